"""Numeric formats: bytes per weight and per KV element, and the GPU peak each runs at (SPEC §2, §10)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import FastsimInputError
from ._checks import _pos

__all__ = ["Precision"]


@dataclass(frozen=True)
class Precision:
    """A numeric format for weights and KV cache (bytes per element) and the peak it runs at.

    Built-in entries: ``BF16`` (2-byte weights and KV, ``bf16`` peak) and ``FP8`` (1-byte weights
    and KV, ``fp8`` peak), SPEC §2; ``NVFP4`` (4-bit weights with one FP8 scale per 16 elements,
    0.5625 bytes per weight) and ``MXFP4`` (4-bit weights with one 8-bit E8M0 scale per 32
    elements, 0.53125 bytes per weight), both with an FP8 KV cache and the ``fp4`` peak, SPEC §10
    (sources in ``precisions.toml``: OCP Microscaling Formats (MX) Specification v1.0; NVIDIA's
    Blackwell NVFP4 description); ``W4A16`` and ``W8A16`` (4- / 8-bit integer weights with a
    128-element group's FP16 scale and zero point, 0.51953125 / 1.0234375 bytes per weight, BF16
    KV cache and the ``bf16`` peak: Marlin dequantises in registers, arXiv:2408.11743), the
    precisions of AWQ / GPTQ / compressed-tensors checkpoints read from a ``config.json``.

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"FP8"``.
    weight_bytes : float
        Bytes per weight element, block scales included.
    kv_bytes : float
        Bytes per KV-cache element.
    flops_key : str
        Key into :attr:`GPU.peak_flops_per_s` giving the matmul peak at this precision; a GPU
        without that key has no configuration at this precision.
    default_grid : bool
        True when the precision belongs to the planner's default grid
        (:meth:`Catalog.default_precisions`: BF16 and FP8 built in, the lecture's); the FP4
        formats are chosen by name (``--precision NVFP4``).

    Raises
    ------
    FastsimInputError
        ``weight_bytes`` or ``kv_bytes`` is not a finite number > 0, ``flops_key`` is not a
        non-empty string, or ``default_grid`` is not a boolean.
    """

    name: str
    weight_bytes: float
    kv_bytes: float
    flops_key: str
    default_grid: bool = True

    def __post_init__(self):
        _pos("precision", self.name, "weight_bytes", self.weight_bytes)
        _pos("precision", self.name, "kv_bytes", self.kv_bytes)
        if not isinstance(self.flops_key, str) or not self.flops_key:
            raise FastsimInputError(f"precision.{self.name}.flops_key", self.flops_key,
                                    "the name of a GPU peak, e.g. 'bf16', 'fp8' or 'fp4'")
        if not isinstance(self.default_grid, bool):
            raise FastsimInputError(f"precision.{self.name}.default_grid", self.default_grid, "true or false")
