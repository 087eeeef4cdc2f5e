"""Token counts, and the estimate of tokens where no count has come."""

from __future__ import annotations

from flightdeck.engine.model.record import record

# Characters to a token, in an estimate where no count has come (providers and CLI formats).
CHARS_PER_TOKEN = 4


@record
class Usage:
    """Token counts; `input_tokens` excludes cache reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if self is NO_USAGE:  # a sum begun at the shared zero: the value itself (immutable)
            return other
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_read_tokens - other.cache_read_tokens,
            self.cache_write_tokens - other.cache_write_tokens,
        )

    @property
    def total(self) -> int:
        """Every token counted."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read: fresh input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


NO_USAGE = Usage()  # the zero that sums start from: shared, never changed in place
