"""Scalar checks shared by the fleet strategies, lifetimes, failures and cost accounting."""
from __future__ import annotations

import math

from ..errors import FastsimInputError, require_count, require_positive


def _nonneg(field: str, v) -> float:
    if isinstance(v, (bool, str, bytes)):
        raise FastsimInputError(field, v, "a finite number >= 0")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise FastsimInputError(field, v, "a finite number >= 0") from None
    if not (math.isfinite(x) and x >= 0.0):
        raise FastsimInputError(field, v, "a finite number >= 0")
    return x


#: The count check (:func:`fastsim.errors.require_count`, shared with the workload draws).
_count = require_count


def _fraction(field: str, v) -> float:
    x = require_positive(field, v)
    if x > 1.0:
        raise FastsimInputError(field, v, "a fraction in (0, 1]")
    return x
