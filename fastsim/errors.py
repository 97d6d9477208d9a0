"""Errors raised for bad input.

Every error names the field, the value it got and what is allowed, so the command line can print
it on one line and exit with status 2.
"""
from __future__ import annotations


class FastsimInputError(ValueError):
    """Bad input: names the field, the value and what is allowed.

    Parameters
    ----------
    field : str
        The name of the offending field (a CLI flag, a config key, a file and line).
    value : object
        The value that was given.
    allowed : str
        What would have been accepted.
    """

    def __init__(self, field: str, value: object, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")


def require_positive(field: str, value: float) -> float:
    """Check that a value is a finite number > 0.

    Parameters
    ----------
    field : str
        Name of the field, used in the error message.
    value : object
        A number (Python or numpy); booleans and strings are refused, not converted.

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    FastsimInputError
        ``value`` is a boolean or a string, does not convert to a float, or is not finite and
        > 0 (NaN, zero, negative or infinite).
    """
    if isinstance(value, (bool, str, bytes)):
        raise FastsimInputError(field, value, "a finite number > 0")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise FastsimInputError(field, value, "a positive number") from None
    if not (v > 0.0) or v == float("inf"):
        raise FastsimInputError(field, value, "a finite number > 0")
    return v


def require_tp(field: str, value: int) -> int:
    """Check that a tensor-parallel degree is a power of two from 1 to 64.

    Parameters
    ----------
    field : str
        Name of the field, used in the error message.
    value : object
        Anything ``int()`` accepts; it must equal its integer conversion (``2.0`` passes,
        ``2.5`` does not).

    Returns
    -------
    int
        ``int(value)``.

    Raises
    ------
    FastsimInputError
        ``value`` does not convert to an integer, differs from it, or is not one of
        1, 2, 4, ..., 64.
    """
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise FastsimInputError(field, value, "a power of two from 1 to 64") from None
    if v != value or v < 1 or v > 64 or (v & (v - 1)) != 0:
        raise FastsimInputError(field, value, "a power of two from 1 to 64")
    return v


def require_count(field: str, value, lo: int) -> int:
    """Check that a count is an integer of at least ``lo``.

    Parameters
    ----------
    field : str
        Name of the field, used in the error message.
    value : object
        A Python or numpy integer (bools, floats and strings are refused, even ``2.0``).
    lo : int
        The smallest count allowed (0 or 1, typically).

    Returns
    -------
    int
        ``int(value)``.

    Raises
    ------
    FastsimInputError
        ``value`` is a bool, not an integer, or below ``lo``.
    """
    import numpy as np   # not at the top: ``import fastsim`` loads no numerical stack

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo:
        raise FastsimInputError(field, value, f"an integer >= {lo}")
    return int(value)
