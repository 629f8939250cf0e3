"""Argument checks shared by the fusion functions (each raises ``FusionError``)."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

from fusion.errors import FusionError


def checked_weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if weights is None:
        return [1.0] * count
    if isinstance(weights, str):
        raise FusionError("weights must be a sequence of numbers, not a str")
    values = [as_float(f"weights[{index}]", w) for index, w in enumerate(weights)]
    if len(values) != count:
        raise FusionError(
            f"weights must have one entry per ranking: got {len(values)} weights "
            f"for {count} rankings"
        )
    for index, value in enumerate(values):
        if not (math.isfinite(value) and value >= 0):
            raise FusionError(f"weights[{index}] must be a finite number >= 0, got {value!r}")
    return values


def checked_limit(limit: int | None) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise FusionError(f"limit must be an integer >= 0 or None, got {limit!r}")
    try:
        value = operator.index(limit)
    except TypeError as exc:
        raise FusionError(f"limit must be an integer >= 0 or None, got {limit!r}") from exc
    if value < 0:
        raise FusionError(f"limit must be an integer >= 0 or None, got {limit!r}")
    return value


def as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FusionError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range: not a ValueError
        raise FusionError(f"{name} must be a finite real number, got {value!r}") from None
