"""Instance layouts: how the GPUs of one instance split attention and experts (SPEC §10).

A light module (no numba) so that the command line can name the layouts without loading kernels.
"""
from __future__ import annotations

from .errors import FastsimInputError

__all__ = ["LAYOUTS", "layout_degrees", "instance_label", "nodes_of"]

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


def nodes_of(gpus: int, gpus_per_node: int = 8) -> int:
    """Nodes an instance of ``gpus`` GPUs spans on nodes of ``gpus_per_node`` GPUs: ``ceil(gpus / gpus_per_node)``.

    Parameters
    ----------
    gpus : int
        GPUs of the instance (``tp x pp``), >= 1.
    gpus_per_node : int
        GPUs of one node (:attr:`fastsim.catalog.GPU.gpus_per_node`, 8 for an HGX board), >= 1.

    Returns
    -------
    int
        At least 1. Inputs are not validated.
    """
    return max(1, -(-int(gpus) // max(1, int(gpus_per_node))))


def instance_label(layout: str, gpus: int, pp: int = 1, gpus_per_node: int = 8) -> str:
    """The label of an instance of ``gpus`` GPUs per pipeline stage in a layout.

    Parameters
    ----------
    layout : str
        One of :data:`LAYOUTS` (anything else reads as ``tp``).
    gpus : int
        GPUs of the instance, or of one of its pipeline stages when ``pp > 1``.
    pp : int, default 1
        Pipeline stages; the instance has ``gpus x pp`` GPUs.
    gpus_per_node : int, default 8
        GPUs of one node: a pipelined instance's label counts the nodes it spans
        (:func:`nodes_of` of ``gpus x pp``).

    Returns
    -------
    str
        ``TP8``, ``TP8+EP8`` or ``DP8+EP8`` for ``tp``, ``tp+ep`` and ``dp+ep``; with ``pp > 1``
        the stages and nodes follow, ``TP8 x PP2 on 2 nodes`` (``on 1 node`` when it fits one).
    """
    if layout == "tp+ep":
        lab = f"TP{gpus}+EP{gpus}"
    elif layout == "dp+ep":
        lab = f"DP{gpus}+EP{gpus}"
    else:
        lab = f"TP{gpus}"
    if int(pp) > 1:
        n = nodes_of(int(gpus) * int(pp), gpus_per_node)
        lab += f" x PP{int(pp)} on {n} node{'s' if n != 1 else ''}"
    return lab
