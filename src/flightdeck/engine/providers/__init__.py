"""Model clients behind one Protocol (base.py)."""
