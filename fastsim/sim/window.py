"""Sliding-window KV accounting of the serving simulator (SPEC sections 6 and 10).

A sliding layer keeps only the last ``W`` tokens of a sequence, a full layer all of them, so a
sequence of ``c`` tokens holds ``held(c) = c - f x max(c - W, 0)`` tokens' worth of KV, in
full-context-equivalent tokens (``f`` = fraction of the layers that slide; :meth:`Model.kv_tokens_held`).
The simulator uses it in two forms, identically in the kernels and in the reference:

- memory (KV reservation, release, rejection against the budget, KV samples and peak), in whole
  tokens: :func:`held_tokens`, ``c - (S x max(c - W, 0)) // L`` in integers (S sliding layers of
  L), that is ``held(c)`` rounded up to a whole token;
- time (KV read, attention FLOPs, KV transfer), in float64: ``float(c) - f x float(max(c - W, 0))``
  for one sequence; for a sum of sequences, ``float(sum of c) - f x float(sum of excesses)``.

Without a window (``P_WINDOW = 0`` or no sliding layer) the window is :data:`NO_WINDOW`, a
length no context reaches, and ``f = 0``: every excess is 0 and both forms give ``c`` exactly.
"""
from __future__ import annotations

import math

from ..errors import FastsimInputError
from ..stepmodel import P_LAYERS, P_SLIDE_FRAC, P_WINDOW

__all__ = ["NO_WINDOW", "kv_window", "held_tokens"]

#: The window of an instance without one: longer than any context (token counts are <= 2**30).
NO_WINDOW = 1 << 62
_MAX_LAYERS = 1 << 20


def kv_window(p, field: str = "p") -> tuple:
    """The integer window of a packed parameter vector: ``(W, S, L, f)``.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,)
        Step parameters from :func:`fastsim.stepmodel.step_params`: ``P_WINDOW`` (tokens, 0 =
        none), ``P_SLIDE_FRAC`` (fraction of the layers that slide) and ``P_LAYERS``.
    field : str
        Name of the vector in error messages.

    Returns
    -------
    tuple
        ``W`` (int, the window in tokens, :data:`NO_WINDOW` without one), ``S`` (int, sliding
        layers, 0 without a window), ``L`` (int, layers, 1 without a window) and ``f`` (float,
        ``P_SLIDE_FRAC``, 0.0 without a window).

    Raises
    ------
    FastsimInputError
        Naming ``field``: ``P_WINDOW`` not a whole number >= 0; with a window, ``P_LAYERS`` not
        a whole number in [1, 2**20], ``P_SLIDE_FRAC`` outside [0, 1] or not a whole number of
        layers (``P_SLIDE_FRAC x P_LAYERS`` within 1e-6 of an integer).
    """
    w = float(p[P_WINDOW])
    if not (math.isfinite(w) and w >= 0.0 and w == math.floor(w)):
        raise FastsimInputError(field, f"P_WINDOW = {w}", "a sliding window of a whole number of tokens >= 0")
    if w == 0.0:
        return NO_WINDOW, 0, 1, 0.0
    lay = float(p[P_LAYERS])
    if not (1.0 <= lay <= _MAX_LAYERS and lay == math.floor(lay)):
        raise FastsimInputError(field, f"P_LAYERS = {lay}", f"a whole number of layers in [1, {_MAX_LAYERS}]")
    f = float(p[P_SLIDE_FRAC])
    if not (0.0 <= f <= 1.0):
        raise FastsimInputError(field, f"P_SLIDE_FRAC = {f}", "a fraction of the layers in [0, 1]")
    s = round(f * lay)
    if abs(f * lay - s) > 1e-6:
        raise FastsimInputError(field, f"P_SLIDE_FRAC = {f}",
                                f"a whole number of the {int(lay)} layers (sliding_layers / layers)")
    if s == 0:
        return NO_WINDOW, 0, 1, 0.0
    return min(int(w), NO_WINDOW), int(s), int(lay), f


def held_tokens(c: int, window: tuple) -> int:
    """KV a sequence of ``c`` tokens holds, in whole full-context-equivalent tokens.

    Parameters
    ----------
    c : int
        Tokens of the sequence (>= 0).
    window : tuple
        ``(W, S, L, f)`` from :func:`kv_window`.

    Returns
    -------
    int
        ``c - (S x max(c - W, 0)) // L``: ``held(c)`` rounded up to a whole token; ``c`` without
        a window.
    """
    w, s, lay, _ = window
    e = c - w
    return c - (s * e) // lay if e > 0 else c
