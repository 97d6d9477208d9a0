"""Accelerators: dense tensor-core peaks, HBM, scale-up and scale-out bandwidth, node size, price (SPEC §2, §10)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import FastsimInputError
from ._checks import _pos

__all__ = ["GPU", "TP_LINKS"]

#: What may carry a GPU's tensor-parallel all-reduce inside a node (:attr:`GPU.tp_link`).
TP_LINKS = ("nvlink", "pcie")


@dataclass(frozen=True)
class GPU:
    """One accelerator (SPEC §2, §10; figures from the vendors' datasheets, see ``source``).

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"H100"``.
    peak_flops_per_s : dict[str, float]
        Dense tensor-core peak in FLOP/s per precision key (``"bf16"``, ``"fp8"``, ``"fp4"``). A
        GPU without a key has no configurations at the precisions that use it (A100: no FP8;
        Hopper: no FP4).
    hbm_bw_bytes_per_s, hbm_bytes : float
        HBM bandwidth (bytes/s) and capacity (bytes).
    nvlink_bw_bytes_per_s : float
        NVLink (scale-up) bandwidth per GPU, one direction (bytes/s), within one NVLink domain
        of ``gpus_per_node`` GPUs.
    network_bw_bytes_per_s : float
        Scale-out (inter-node) bandwidth per GPU, one direction (bytes/s): KV transfer between
        disaggregated instances, and any TP or EP group larger than one node (SPEC §10).
    price_usd_per_hour, power_w : float
        Assumed rental price per GPU (US dollars per hour; the lecture's comparison values) and
        board power (W).
    description : str
        Free text shown in listings.
    source : str
        Datasheet the figures come from.
    default_grid : bool
        True when the GPU belongs to the planner's default grid (:meth:`Catalog.default_gpus`);
        other GPUs are chosen by name (or ``--gpu all``).
    gpus_per_node : int
        GPUs that share one NVLink domain: 8 in an HGX/DGX node (the default), 72 in a GB200
        NVL72 rack (SPEC §10).
    hbm_bytes_reported : float
        The memory the driver reports, which the engines size their KV pools from (bytes;
        ``nvidia-smi``'s MiB x 2^20: H100 SXM 81,559 MiB, H200 143,771 MiB, A100 80GB 81,920 MiB),
        where it differs from the datasheet's ``hbm_bytes``; 0 (default): ``hbm_bytes``. Used by
        the engines' memory rules of :class:`fastsim.stepmodel.StepConstants` (``kv_memory``),
        never by SPEC §3's.
    tp_link : str
        What carries the tensor-parallel all-reduce inside a node: ``"nvlink"`` (default: NVLink
        or NVSwitch, SPEC §3) or ``"pcie"`` (a PCIe card without NVLink: L40S, RTX PRO 6000, RTX
        4090), whose all-reduce runs through the PCIe switches and host bridges at a smaller
        fraction of the link bandwidth (:attr:`fastsim.stepmodel.StepConstants.eta_pcie`).

    Raises
    ------
    FastsimInputError
        ``peak_flops_per_s`` is not a non-empty mapping, any peak, bandwidth, capacity, price
        or power is not a finite number > 0, ``gpus_per_node`` is not an integer > 0, or ``tp_link`` is
        neither ``"nvlink"`` nor ``"pcie"``.
    """

    name: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bw_bytes_per_s: float
    hbm_bytes: float
    nvlink_bw_bytes_per_s: float
    network_bw_bytes_per_s: float
    price_usd_per_hour: float
    power_w: float
    description: str = ""
    source: str = ""
    default_grid: bool = True
    gpus_per_node: int = 8
    hbm_bytes_reported: float = 0.0
    tp_link: str = "nvlink"

    @property
    def reported_hbm_bytes(self) -> float:
        """``hbm_bytes_reported``, or ``hbm_bytes`` when it is 0 (float, bytes)."""
        return float(self.hbm_bytes_reported) if self.hbm_bytes_reported else float(self.hbm_bytes)

    def __post_init__(self):
        if not isinstance(self.peak_flops_per_s, Mapping) or not self.peak_flops_per_s:
            raise FastsimInputError(f"gpu.{self.name}.peak_flops_per_s", self.peak_flops_per_s,
                                    "a table of precision keys to FLOP/s, e.g. { bf16 = 989e12, fp8 = 1979e12 }")
        for key, v in self.peak_flops_per_s.items():
            _pos("gpu", self.name, f"peak_flops_per_s.{key}", v)
        for f in ("hbm_bw_bytes_per_s", "hbm_bytes", "nvlink_bw_bytes_per_s", "network_bw_bytes_per_s",
                  "price_usd_per_hour", "power_w"):
            _pos("gpu", self.name, f, getattr(self, f))
        _pos("gpu", self.name, "gpus_per_node", self.gpus_per_node, integer=True)
        v = self.hbm_bytes_reported
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or v > 0) or v != v or v == float("inf"):
            raise FastsimInputError(f"gpu.{self.name}.hbm_bytes_reported", v, "a finite number of bytes > 0, or 0 "
                                    "(hbm_bytes)")
        if not isinstance(self.tp_link, str) or self.tp_link not in TP_LINKS:
            raise FastsimInputError(f"gpu.{self.name}.tp_link", self.tp_link, "one of " + ", ".join(TP_LINKS))
        if not isinstance(self.default_grid, bool):
            raise FastsimInputError(f"gpu.{self.name}.default_grid", self.default_grid, "true or false")
