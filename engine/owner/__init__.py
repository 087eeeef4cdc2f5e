"""The process that runs a batch, beside its deciding: the batch built at start and its folder,
the duties to clients (heartbeat, requests), the problem sentence, and resume of a dead owner's
batch."""
