"""Which term of the step or serving model a row's error comes from, shown by one-change reruns.

:func:`diagnose` reruns one row with a single change at a time, to each step-model constant
(SPEC §3: the compute and bandwidth efficiencies, the per-step overhead, the all-reduce's latency
and link efficiency, the memory share that sizes the KV pool) or to one engine setting (the
policy's running-request cap and token budget), and reports each change's ratio. The change that
moves the ratio most toward 1 names the term most likely responsible: a throughput row that
falls toward the measurement when ``eta_compute`` drops was compute-bound and too optimistic
about MFU; a latency row that rises toward it with ``overhead_s`` misses per-step cost.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

__all__ = ["diagnose", "Diagnosis", "CHANGES"]

#: The one-change reruns: (label, StepConstants field or engine setting, factor on its value). The
#: overhead changes scale the whole fixed time of a step: ``overhead_s`` and step model v2's
#: ``overhead_per_layer_s`` together (``_FIXED``).
CHANGES = (
    ("eta_compute x 0.67", "eta_compute", 2 / 3), ("eta_compute x 1.5", "eta_compute", 1.5),
    ("eta_bw x 0.75", "eta_bw", 0.75), ("eta_bw x 1.2", "eta_bw", 1.2),
    ("fixed step time x 4 (overhead_s, overhead_per_layer_s)", "overhead_s", 4.0),
    ("fixed step time x 0.25 (overhead_s, overhead_per_layer_s)", "overhead_s", 0.25),
    ("alpha_s x 10 (all-reduce latency)", "alpha_s", 10.0), ("eta_nvlink x 0.5 (all-reduce bandwidth; eta_pcie too)", "eta_nvlink", 0.5),
    ("memory_utilization x 0.8 (KV pool)", "memory_utilization", 0.8),
    ("max_num_seqs x 0.5", "max_num_seqs", 0.5), ("max_num_seqs x 2", "max_num_seqs", 2.0),
    ("max_num_batched_tokens x 0.5", "max_num_batched_tokens", 0.5),
    ("max_num_batched_tokens x 2", "max_num_batched_tokens", 2.0),
)
_ENGINE = ("max_num_seqs", "max_num_batched_tokens")
_FIXED = {"overhead_s": ("overhead_s", "overhead_per_layer_s")}


class Diagnosis(NamedTuple):
    """The one-change reruns of one row.

    Attributes
    ----------
    id : str
    ratio : float
        ``predicted / real`` with the defaults.
    reruns : tuple of (str, float or None)
        Each change's label and ratio (None: the change does not apply to the row, e.g. an engine
        setting of a ``step`` row, or it made the row inexpressible).
    best : str or None
        The change whose ratio is nearest 1 in log terms (None if none improves on ``ratio``).
    best_ratio : float or None
    """

    id: str
    ratio: float
    reruns: tuple
    best: str | None
    best_ratio: float | None

    def text(self) -> str:
        """One line: the best change and how far it moves the error.

        Returns
        -------
        str
        """
        if self.best is None:
            return "no single change moves the ratio toward 1"
        e0, e1 = abs(self.ratio - 1) * 100, abs(self.best_ratio - 1) * 100
        out = f"{self.best}: ratio {self.ratio:.3g} -> {self.best_ratio:.3g} (abs. error {e0:.1f}% -> {e1:.1f}%)"
        if abs(math.log(self.best_ratio)) > 0.75 * abs(math.log(self.ratio)):
            out += "; no single term explains most of the error"
        return out


def diagnose(result, catalog, constants=None) -> Diagnosis:
    """Rerun one row with each change of :data:`CHANGES` alone.

    Parameters
    ----------
    result : RowResult
        An expressed row (``predicted`` not None) of :func:`fastsim.validate.run_measurements`.
    catalog : Catalog
        The catalog it was run with.
    constants : StepConstants, optional
        The constants it was run with (default SPEC §3's); each change scales one field (a
        fraction is capped at 1).

    Returns
    -------
    Diagnosis

    Raises
    ------
    FastsimInputError
        A row without a prediction, or constants that are not a StepConstants.
    """
    from ..errors import FastsimInputError
    from ..layouts import layout_degrees
    from ..stepmodel import StepConstants
    from .run import _setup, run_group
    base = constants if constants is not None else StepConstants()
    if not isinstance(base, StepConstants):
        raise FastsimInputError("constants", type(base).__name__, "a StepConstants (one set of constants to vary)")
    if result.ratio is None:
        raise FastsimInputError("result", result.measurement.id, "a row with a prediction")
    m = result.measurement
    models = {}
    out = []
    for label, field, f in CHANGES:
        if field in _ENGINE:
            if m.benchmark == "step":
                out.append((label, None))
                continue
            cur = getattr(m, field)
            if cur is None:
                # the engine's default for this deployment, per engine (before the data-parallel scaling)
                pol = _setup(m, catalog, base, models).policy
                dp = layout_degrees(m.layout, m.tp)[0] if pol.name == "vllm" else 1
                cur = getattr(pol, field) // dp
            r = run_group([m], catalog, base, models=models, overrides={field: max(1, int(round(cur * f)))})[0]
        else:
            kw = {}
            for name in _FIXED.get(field, (field,)):
                v = getattr(base, name) * f
                if name in ("eta_compute", "eta_bw", "eta_nvlink", "memory_utilization"):
                    v = min(v, 1.0)
                kw[name] = v
            if field == "eta_nvlink" and base.eta_pcie is not None:
                kw["eta_pcie"] = base.eta_pcie * f          # the all-reduce's bandwidth on a PCIe GPU too
            r = run_group([m], catalog, replace(base, **kw), models=models)[0]
        out.append((label, r.ratio))
    best, best_r = None, None
    err0 = abs(math.log(result.ratio))
    for label, r in out:
        if r is not None and abs(math.log(r)) < err0 - 1e-9 and (best_r is None or abs(math.log(r)) < abs(math.log(best_r))):
            best, best_r = label, r
    return Diagnosis(m.id, result.ratio, tuple(out), best, best_r)
