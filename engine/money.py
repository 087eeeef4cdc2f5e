"""How an amount of dollars reads, the same in the engine's messages and on the screen."""

from __future__ import annotations

from decimal import Decimal

# The one zero every sum starts from: a Decimal is a value, and each Decimal(0) an object of its
# own (about 100 bytes), which a child's figures and rows would otherwise each hold.
ZERO_USD = Decimal(0)


def fmt_usd(cost: Decimal) -> str:
    """`$12.50`, `$0.0085`, `$0.10`, `<$0.0001`: small sums need four places, rounder ones read
    better with two, and a sum spent is never shown as `$0.00`."""
    if cost >= 1:
        return f"${cost:,.2f}"
    if 0 < cost < Decimal("0.0001"):
        return "<$0.0001"
    text = f"{cost:.4f}".rstrip("0")
    return "$" + (text if len(text.partition(".")[2]) >= 2 else f"{cost:.2f}")
