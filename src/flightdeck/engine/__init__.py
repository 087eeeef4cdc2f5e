"""The headless core. Never imports textual, rich or flightdeck.tui (tests/test_import_hygiene.py)."""
