"""`flightdeck serve`: the attached TUI in a browser, through textual-serve."""
