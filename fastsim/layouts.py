"""Instance layouts: how the GPUs of one instance split attention and experts (SPEC §10).

A light module (no numba) so that the command line can name the layouts without loading kernels.
"""
from __future__ import annotations

from .errors import FastsimInputError

__all__ = ["LAYOUTS", "layout_degrees", "instance_label"]

#: Instance layouts (SPEC §10): ``tp`` (everything tensor-parallel over the G GPUs), ``tp+ep``
#: (attention TP over G, routed experts expert-parallel over G: vLLM ``--enable-expert-parallel``)
#: and ``dp+ep`` (attention data-parallel, one rank per GPU, experts over G: DeepSeek-V3's serving
#: layout, SGLang ``--enable-dp-attention``, vLLM ``--data-parallel-size G --enable-expert-parallel``).
LAYOUTS = ("tp", "tp+ep", "dp+ep")


def layout_degrees(layout: str, gpus: int) -> tuple:
    """``(dp, ep)`` of a layout on an instance of ``gpus`` GPUs.

    Parameters
    ----------
    layout : str
        One of :data:`LAYOUTS`.
    gpus : int
        GPUs of the instance.

    Returns
    -------
    tuple of int
        ``(1, 1)`` for ``tp``, ``(1, gpus)`` for ``tp+ep``, ``(gpus, gpus)`` for ``dp+ep``.

    Raises
    ------
    FastsimInputError
        An unknown layout.
    """
    if layout == "tp":
        return 1, 1
    if layout == "tp+ep":
        return 1, int(gpus)
    if layout == "dp+ep":
        return int(gpus), int(gpus)
    raise FastsimInputError("layout", layout, "one of " + ", ".join(LAYOUTS))


def instance_label(layout: str, gpus: int) -> str:
    """The label of an instance of ``gpus`` GPUs in a layout.

    Parameters
    ----------
    layout : str
        One of :data:`LAYOUTS` (anything else reads as ``tp``).
    gpus : int
        GPUs of the instance.

    Returns
    -------
    str
        ``TP8``, ``TP8+EP8`` or ``DP8+EP8`` for ``tp``, ``tp+ep`` and ``dp+ep``.
    """
    if layout == "tp+ep":
        return f"TP{gpus}+EP{gpus}"
    if layout == "dp+ep":
        return f"DP{gpus}+EP{gpus}"
    return f"TP{gpus}"
