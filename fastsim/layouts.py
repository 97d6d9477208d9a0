"""Instance layouts: how the GPUs of one instance split attention and experts (SPEC §10).

A light module (no numba) so that the command line can name the layouts without loading kernels.
"""
from __future__ import annotations

from .errors import FastsimInputError

__all__ = ["LAYOUTS", "layout_degrees", "instance_label", "nodes_of", "instance_layout_refusal", "layout_refusal"]

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


def instance_layout_refusal(model: "fastsim.catalog.Model", gpu: "fastsim.catalog.GPU", gpus: int, dp: int = 1,
                            ep: int = 1) -> str | None:
    """Why an instance layout cannot serve a model, or None when it can (SPEC §10).

    Parameters
    ----------
    model : Model
    gpu : GPU
        Gives ``gpus_per_node`` (not used for refusals today; groups may span nodes).
    gpus : int
        GPUs of the instance (G).
    dp : int
        Data-parallel attention ranks; must divide ``gpus``; attention TP = ``gpus / dp``.
    ep : int
        1 (experts tensor-sharded over the G GPUs, vLLM's default) or ``gpus`` (expert
        parallelism; vLLM ``--enable-expert-parallel`` makes EP = TP x DP).

    Returns
    -------
    str or None
        A sentence naming what does not fit: TP not dividing the attention heads (vLLM refuses
        it), EP other than 1 or G, EP or DP attention on a dense model (DP attention of a dense
        model is just more instances), DP attention without EP, more expert-parallel GPUs than
        experts.
    """
    if dp < 1 or gpus % dp:
        return f"data-parallel attention ranks (dp = {dp}) must divide the instance's {gpus} GPUs"
    why = model.tp_refusal(gpus // dp)
    if why:
        return why
    if ep not in (1, gpus):
        return f"expert parallelism must span 1 GPU or all {gpus} of the instance (got EP{ep})"
    if not model.is_moe and (ep > 1 or dp > 1):
        return f"{model.name} is dense: expert parallelism and data-parallel attention do not apply"
    if dp > 1 and ep == 1:
        return "data-parallel attention needs expert parallelism over the instance's GPUs (EP = G)"
    if ep > 1 and ep > model.n_experts:
        return f"EP{ep} spreads {model.name}'s {model.n_experts} experts over more GPUs than experts"
    return None


def layout_refusal(model: "fastsim.catalog.Model", gpu: "fastsim.catalog.GPU", layout: str, gpus: int) -> str | None:
    """Why a named instance layout cannot serve a model on ``gpus`` GPUs, or None when it can (SPEC §10).

    :func:`instance_layout_refusal` of the layout's degrees (:func:`layout_degrees`), and an
    expert-parallel layout (``tp+ep``, ``dp+ep``) named on a dense model at any G: at G = 1 its
    degrees are plain TP's, so the degrees alone do not show it.

    Parameters
    ----------
    model : Model
    gpu : GPU
    layout : str
        One of :data:`LAYOUTS`.
    gpus : int
        GPUs of the instance (G).

    Returns
    -------
    str or None
        A sentence naming what does not fit.

    Raises
    ------
    FastsimInputError
        An unknown layout.
    """
    dp, ep = layout_degrees(layout, gpus)
    if layout != "tp" and not model.is_moe:
        return f"{model.name} is dense: expert parallelism and data-parallel attention do not apply"
    return instance_layout_refusal(model, gpu, int(gpus), dp, ep)
