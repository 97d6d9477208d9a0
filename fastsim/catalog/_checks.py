"""Shared checks of catalog entries: every figure a finite positive number, named in the error."""
from __future__ import annotations

import math

from ..errors import FastsimInputError


def _pos(kind: str, name: str, field_: str, v, *, integer: bool = False, allow_zero: bool = False) -> None:
    """Raise unless ``v`` is a finite number > 0 (>= 0 with allow_zero; an integer with integer)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if ok and integer:
        ok = float(v).is_integer()
    if not ok:
        what = "an integer" if integer else "a finite number"
        raise FastsimInputError(f"{kind}.{name}.{field_}", v, f"{what} {'>= 0' if allow_zero else '> 0'}")

