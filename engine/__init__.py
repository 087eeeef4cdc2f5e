"""The headless core: never imports textual, rich or flightdeck.tui (see test_import_hygiene)."""
