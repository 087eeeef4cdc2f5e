"""A child's changes: what it changed in its own workspace, read, accepted or discarded."""
