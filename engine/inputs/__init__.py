"""What the operator gives: task files (`tasks`), flightdeck.toml (`settings`), TOML positions.

It imports no runtime part of the engine (control, child, records, providers, api).
"""
