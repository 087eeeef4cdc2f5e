"""Arithmetic helpers."""


def mean(values: list[float]) -> float:
    """The arithmetic mean of `values`."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator."""
    # TODO: a zero denominator raises ZeroDivisionError; callers expect None.
    return numerator / denominator


def clamp(value: float, low: float, high: float) -> float:
    """`value` limited to the range [low, high]."""
    return max(low, min(value, high))
