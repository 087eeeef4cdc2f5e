"""flightdeck: run many LLM subagents in parallel and supervise them live."""

__version__ = "0.1.0"
