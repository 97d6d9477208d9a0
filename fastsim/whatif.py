"""What-if studies: the planner re-run while one assumption moves (SPEC §8; lecture §2.4, script 04).

Five studies, each a pandas DataFrame with one row per setting and a plot:

==============  =====================================================  ==========================
study           what moves                                             workload
==============  =====================================================  ==========================
``tpot``        P90 TPOT target 100, 50, 25, 15, 10 ms                 chat
``fp8``         FP8 allowed vs forbidden (BF16 only): cost ratio       chat, coding-agent
``prices``      B200 at 4, 5, 6 $/h; H200 at 2.6, 2.2 $/h              chat
``model-size``  Llama-3.1-8B / 70B / 405B                              chat
``traffic``     5, 20, 50, 100, 500 req/s: integer vs efficiency cost  chat
==============  =====================================================  ==========================

Every study calls :func:`fastsim.planner.plan_deployment`: the analytic screen ranks the whole
grid, and, when ``verify`` is on, the ``top_k`` cheapest plans are simulated, repaired and
re-ranked by their verified cost (lecture §2.4: "each result is checked and repaired in the
simulator"). ``verify=None`` verifies exactly when the simulator (:mod:`fastsim.sim`) can be
imported; the ``verified`` column of every row says which it was. The horizon obeys the rule of
``fastsim capacity`` (:func:`fastsim.search.horizon_floor`) for the plans a setting verifies: too
short for any of them to pass is refused, too short for some of them, or short enough to
understate their capacity, is noted.

A row without a plan (``no feasible plan``, cost ``inf``) says why in ``no_plan_reason``: no
configuration passed the analytic screen, or every plan verified failed (the first failure's
reason). ``df.attrs['notes']`` holds these notes, which :func:`format_study` prints under the table.

Each frame carries the lecture's printed figure beside fastsim's where the lecture gives one
(``lecture_*`` columns, NaN or '' where it does not); ``df.attrs['study']`` names the study and
:func:`plot_study` draws any of them. How close fastsim comes, and why it differs where it does,
is written down in ``docs/REPRODUCTION.md``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from .plans import Demand, ScreenOptions
from .catalog import Catalog, default_catalog
from .errors import FastsimInputError, require_positive

__all__ = ["STUDIES", "LECTURE", "simulator_available", "tpot_study", "fp8_study", "price_study",
           "model_size_study", "traffic_study", "run_studies", "format_study", "plot_tpot_study", "plot_fp8_study",
           "plot_price_study", "plot_model_size_study", "plot_traffic_study", "plot_study"]

#: Study names in the order of the lecture (and of ``fastsim whatif --study all``).
STUDIES = ("tpot", "fp8", "prices", "model-size", "traffic")

#: The figures lecture 16 §2.4 prints (US dollars per million output tokens unless named).
#: What the ``lecture`` columns are, for readers who have not seen it.
LECTURE_NOTE = ("lecture columns: the figures printed by lecture 16 ('wrap-up and deployment planner') of the "
                "LLM-systems course whose planner fastsim reproduces; n/a where it prints none; "
                "docs/REPRODUCTION.md sets every one beside fastsim's")

LECTURE = {
    "tpot": {100.0: (0.444, ""), 50.0: (0.444, ""), 25.0: (0.444, ""), 15.0: (0.444, "TP2"),
             10.0: (1.011, "H200 FP8 disaggregated: prefill TP1 x 3 + decode TP4 x 1")},
    "fp8": {"chat": 2.00, "coding-agent": 2.00},
    "prices": {("B200", 4.0): "B200 = H100 (tie)", ("B200", 6.0): "H100",
               ("H200", 2.2): "not H200"},
    "model-size": {"llama-3.1-8b": (0.111, ""), "llama-3.1-70b": (0.444, ""),
                   "llama-3.1-405b": (3.556, "16 x B200, TP4 x 4")},
    "traffic": {5.0: (0.578, 0.440), 500.0: (0.276, 0.274)},
}

_SIM_OK: bool | None = None


def simulator_available() -> bool:
    """Whether the discrete-event simulator can run here (``from fastsim.sim import simulate`` works).

    Returns
    -------
    bool
        True when :mod:`fastsim.sim` provides ``simulate``, ``simulate_batch``, ``ColocatedPlan``
        and ``DisaggregatedPlan``; the answer is cached for the process.
    """
    global _SIM_OK
    if _SIM_OK is None:
        try:
            from .sim import ColocatedPlan, DisaggregatedPlan, simulate, simulate_batch  # noqa: F401
            _SIM_OK = True
        except ImportError:
            _SIM_OK = False
    return _SIM_OK


# ----------------------------------------------------------------------------------------------
# one planner run -> one row


def _check(verify, seeds, horizon_s, top_k):
    if verify is None:
        verify = simulator_available()
    elif verify and not simulator_available():
        raise FastsimInputError("verify", verify, "False: the simulator (fastsim.sim) is not available here")
    if isinstance(seeds, bool) or int(seeds) != seeds or seeds < 1:
        raise FastsimInputError("seeds", seeds, "an integer >= 1")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
        raise FastsimInputError("top_k", top_k, "an integer >= 1")
    require_positive("horizon_s", horizon_s)
    return bool(verify)


def _layout(p) -> str:
    if p.mode == "disaggregated":
        return f"prefill TP{p.prefill_tp} x {p.prefill_instances} + decode TP{p.decode_tp} x {p.decode_instances}"
    if p.pp > 1:
        return f"TP{p.tp} x PP{p.pp} x {p.instances}"
    return f"TP{p.tp} x {p.instances}"


def _empty_row(reason: str) -> dict:
    return dict(plan="no feasible plan", gpu="", precision="", mode="", layout="", gpus=0,
                usd_per_million_output_tokens=math.inf, analytic_usd_per_million_output_tokens=math.inf,
                efficiency_usd_per_million_output_tokens=math.inf, capacity_req_per_s=0.0,
                verified=False, attainment=math.nan, repaired=False, no_plan_reason=reason)


class _StudyLog:
    """What a study's notes need, gathered setting by setting and written by :meth:`notes`.

    Attributes
    ----------
    understated : list of (str, float)
        Settings whose horizon is below :func:`fastsim.search.horizon_floor`'s ``full_horizon_s``
        (label, that horizon in s).
    other : list of str
        Notes in the order they arose: verified plans the horizon cannot measure, and the reasons
        of settings without a plan.
    """

    def __init__(self):
        self.understated = []
        self.other = []

    def notes(self, horizon_s: float) -> list:
        """The study's notes.

        Parameters
        ----------
        horizon_s : float
            The study's simulated horizon (s).

        Returns
        -------
        list of str
            One note for every setting whose horizon understates capacities (all such settings
            together), then the others.
        """
        out = []
        if self.understated:
            need = max(h for _, h in self.understated)
            which = ", ".join(f"{lab} (needs {h:.3g} s)" for lab, h in self.understated)
            out.append(f"a horizon of {horizon_s:g} s understates the plans' capacity, so the verified costs may be "
                       f"overstated (repair adds instances the plan does not need), for {which}: near capacity a "
                       "mean request takes about TTFT target + (O - 1) x TPOT target, longer than the last 20% of "
                       "the horizon after the measured window, and measured requests still running at the horizon "
                       f"count as misses (fastsim.search.horizon_floor); a horizon of at least {need:.3g} s "
                       "measures the plans")
        return out + list(self.other)


def _horizon_check(model, demand: Demand, source, catalog: Catalog, options: ScreenOptions, top_k: int,
                   horizon_s: float, label: str, log: _StudyLog) -> None:
    """Apply :func:`fastsim.search.horizon_floor` to the plans one setting verifies in simulation.

    The plans are the analytic screen's ``top_k`` feasible ones that the simulator can run as
    sized (what :func:`fastsim.planner.plan_deployment` with ``search="screen"`` verifies; repair
    adds instances, which leaves a plan's floor unchanged). When the horizon is below every such
    plan's ``min_horizon_s`` (no plan could pass) it is refused; plans below theirs, beside plans
    above, are noted in ``log``, as is a horizon below the setting's ``full_horizon_s``.

    Parameters
    ----------
    model, demand, source, catalog, options, top_k, horizon_s
        As passed to :func:`fastsim.planner.plan_deployment` for the setting.
    label : str
        The setting, as the notes and the error name it (``TPOT 25 ms``).
    log : _StudyLog
        Collects the notes.

    Raises
    ------
    FastsimInputError
        Field ``horizon_s``: no plan of the setting can be measured at this horizon.
    """
    from .analytic import screen
    from .planner import unsimulated_reason
    from .search import SLO, horizon_floor
    grid = screen(model, demand, catalog=catalog, options=options)
    prefixes = getattr(source, "prefix", None) is not None
    plans = [p for p in grid[grid.feasible].head(int(top_k)).plan if not unsimulated_reason(p, None, prefixes)]
    if not plans:
        return
    sc = source
    P = float(sc.prompt.mean) if hasattr(sc, "prompt") else float(demand.mean_prompt_tokens)
    O = float(sc.output.mean) if hasattr(sc, "output") else float(demand.mean_output_tokens)
    slo = SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)
    floors = [(p, horizon_floor(p, P, O, slo, catalog=catalog, constants=options.constants, model=model))
              for p in plans]
    short = [(p, f) for p, f in floors if horizon_s < f.min_horizon_s]
    need = max(f.min_horizon_s for _, f in floors)
    full = max(f.full_horizon_s for _, f in floors)
    if len(short) == len(floors):
        lone = min(floors, key=lambda pf: pf[1].min_horizon_s)
        raise FastsimInputError("horizon_s", horizon_s, (
            f"a horizon of at least {lone[1].min_horizon_s:.3g} s for {label}, and {need:.3g} s to measure every "
            f"plan verified there ({len(floors)}): a mean request ({P:,.0f} + {O:,.0f} tokens) takes "
            f"{lone[1].lone_s:.3g} s alone even on {lone[0].describe()}, and measured requests still running at the "
            f"horizon count as misses (a run does not drain), so at {horizon_s:g} s no plan could pass and the "
            f"verification would measure the horizon, not the plans (fastsim.search.horizon_floor); at least "
            f"{full:.3g} s keeps their capacity from being understated"))
    if short:
        names = "; ".join(f"{p.describe()} (needs {f.min_horizon_s:.3g} s: {f.lone_s:.3g} s alone)" for p, f in short)
        log.other.append(f"{label}: {len(short)} of the {len(floors)} plans verified cannot pass at a horizon of "
                         f"{horizon_s:g} s whatever their size, so their failure measures the horizon, not the plan: "
                         f"{names}; a horizon of at least {need:.3g} s measures every one")
    if horizon_s < full:
        log.understated.append((label, full))


def _no_plan_reason(rep) -> str:
    """Why a planner run has no passing plan: the screen found none, or every verified plan failed."""
    g = rep.grid
    if not bool(g.feasible.any()):
        why = g.reason[~g.feasible].value_counts() if "reason" in g.columns else None
        top = (f"; the most common reason: {why.index[0]} ({int(why.iloc[0])} of {len(g)})"
               if why is not None and len(why) else "")
        return f"no configuration of the grid passes the analytic screen{top}"
    failed = [d for d in rep.deployments if d.repair is not None and not d.repair.passed]
    if not failed:
        return "no plan passed"
    d = failed[0]
    why, last = d.repair.reason, d.repair.verification.reason
    r = "; ".join(x for x in (why, f"at {d.repair.plan.describe()}: {last}" if why and last else last) if x) \
        or "it did not pass"
    return (f"every plan verified in simulation ({len(failed)}) failed; the first, {d.analytic.describe()}: {r}")


def _best(model, demand: Demand, source, catalog: Catalog, options: ScreenOptions, verify: bool,
          seeds: int, horizon_s: float, top_k: int, seed: int, label: str = "", log: _StudyLog | None = None):
    """(row dict of the cheapest plan, PlanReport).

    With ``verify``, the horizon is first checked against the plans to verify
    (:func:`_horizon_check`); a row without a plan carries ``no_plan_reason``, also noted in
    ``log`` under ``label``.
    """
    from .planner import plan_deployment
    log = log if log is not None else _StudyLog()
    if verify:
        _horizon_check(model, demand, source, catalog, options, top_k, horizon_s, label, log)
    rep = plan_deployment(model, demand, source, search="screen", top_k=top_k, seeds=seeds, horizon_s=horizon_s,
                          verify=verify, seed=seed, catalog=catalog, options=options)
    passed = [d for d in rep.deployments if d.repair is None or d.repair.passed]
    if not passed:
        why = _no_plan_reason(rep)
        log.other.append(f"{label}: no feasible plan (inf): {why}")
        return _empty_row(why), rep
    d = passed[0]
    p = d.plan
    row = dict(plan=p.describe(), gpu=p.gpu, precision=p.precision, mode=p.mode, layout=_layout(p),
               gpus=int(p.gpus), usd_per_million_output_tokens=d.usd_per_million_output_tokens,
               analytic_usd_per_million_output_tokens=d.analytic_usd_per_million_output_tokens,
               efficiency_usd_per_million_output_tokens=d.efficiency_usd_per_million_output_tokens,
               capacity_req_per_s=float(p.capacity_req_per_s), verified=d.repair is not None,
               attainment=d.repair.verification.attainment if d.repair is not None else math.nan,
               repaired=bool(d.repair is not None and d.repair.repaired_from_instances is not None),
               no_plan_reason="")
    return row, rep


def _frame(rows, study: str, verified: bool, log: _StudyLog | None = None, horizon_s: float = 0.0) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df.attrs["study"] = study
    df.attrs["verified"] = verified
    df.attrs["notes"] = log.notes(horizon_s) if log is not None else []
    return df


_PLANNER_DOC = """
    verify : bool or None, default None
        Simulate, repair and re-rank the ``top_k`` analytic plans (SPEC §7). None: when the
        simulator is importable (:func:`simulator_available`).
    seeds : int, default 2
        Simulation seeds per verification (common random numbers), >= 1.
    horizon_s : float, default 600
        Simulated arrival window per run (s), > 0. With ``verify``, a horizon below
        :func:`fastsim.search.horizon_floor`'s ``min_horizon_s`` for every plan a setting
        verifies is refused (no plan could pass); one below some plans' floor, or below the
        ``full_horizon_s`` that keeps capacities from being understated, is noted in
        ``df.attrs['notes']``.
    top_k : int, default 3
        Analytic plans verified per setting, >= 1.
    seed : int, default 0
        Root seed of the synthetic workloads.
    catalog : Catalog, optional
        Defaults to :func:`fastsim.catalog.default_catalog`.
    options : ScreenOptions, optional
        The grid and the screen's constants (defaults: the whole grid of SPEC §5)."""

_COMMON_COLS = """``plan`` (str), ``gpu``, ``precision``, ``mode``, ``layout`` (str), ``gpus`` (int),
        ``usd_per_million_output_tokens`` (float, the final plan's integer cost: verified and
        repaired when ``verified``), ``analytic_usd_per_million_output_tokens``,
        ``efficiency_usd_per_million_output_tokens`` (float, USD per million output tokens),
        ``capacity_req_per_s`` (float, analytic, of the whole plan), ``verified``, ``repaired``
        (bool), ``attainment`` (float, NaN when not verified), ``no_plan_reason`` (str: why a
        'no feasible plan' row has none, '' otherwise)"""


def _doc(f):
    f.__doc__ = f.__doc__.replace("%(planner)s", _PLANNER_DOC.strip("\n")).replace("%(cols)s", _COMMON_COLS)
    return f


def _scenario_demand(catalog, scenario, **over):
    sc = catalog.scenario(scenario)
    return sc, Demand.from_scenario(sc, **over)


# ----------------------------------------------------------------------------------------------
# the five studies


@_doc
def tpot_study(tpot_ms: Sequence[float] = (100.0, 50.0, 25.0, 15.0, 10.0), *, scenario: str = "chat",
               verify: bool | None = None, seeds: int = 2, horizon_s: float = 600.0, top_k: int = 3,
               seed: int = 0, catalog: Catalog | None = None,
               options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """The cheapest plan as the P90 TPOT target tightens (lecture §2.4, first bullet).

    Parameters
    ----------
    tpot_ms : sequence of float
        P90 TPOT targets (ms), each > 0.
    scenario : str, default 'chat'
        Catalog scenario; its other SLOs, lengths and rate are kept.
%(planner)s

    Returns
    -------
    pandas.DataFrame
        One row per target: ``tpot_ms`` (float), %(cols)s, ``lecture_usd_per_million_output_tokens``
        (float, NaN where the lecture gives none), ``lecture_plan`` (str).

    Raises
    ------
    FastsimInputError
        A non-positive target, an unknown scenario, ``verify=True`` without the simulator, bad
        ``seeds`` / ``top_k`` / ``horizon_s`` (a horizon too short for any plan a setting
        verifies to pass: :func:`fastsim.search.horizon_floor`).

    Notes
    -----
    The lecture: $0.444 from 100 ms down to 15 ms (TP2 at 15 ms); at 10 ms H200 FP8 disaggregated
    (prefill TP1 x 3 + decode TP4 x 1) wins at $1.011, the one win of disaggregation in the
    lecture.
    """
    verify = _check(verify, seeds, horizon_s, top_k)
    catalog = catalog or default_catalog()
    rows = []
    log = _StudyLog()
    for t in tpot_ms:
        t = require_positive("tpot_ms", t)
        sc, d = _scenario_demand(catalog, scenario, tpot_s=t * 1e-3)
        row, _ = _best(catalog.model(sc.model), d, sc, catalog, options, verify, seeds, horizon_s, top_k, seed,
                       f"TPOT {t:g} ms", log)
        lec = LECTURE["tpot"].get(t) if scenario == "chat" else None
        rows.append(dict(tpot_ms=t, **row, lecture_usd_per_million_output_tokens=lec[0] if lec else math.nan,
                         lecture_plan=lec[1] if lec else ""))
    return _frame(rows, "tpot", verify, log, horizon_s)


@_doc
def fp8_study(scenarios: Sequence[str] = ("chat", "coding-agent"), *, verify: bool | None = None,
              seeds: int = 2, horizon_s: float = 600.0, top_k: int = 3, seed: int = 0,
              catalog: Catalog | None = None, options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """What forbidding FP8 costs: the cheapest plan with FP8 allowed vs BF16 only (lecture §2.4).

    Parameters
    ----------
    scenarios : sequence of str
        Catalog scenarios.
%(planner)s
        Its ``precisions`` are replaced by "all" and by ``('BF16',)`` for the two runs.

    Returns
    -------
    pandas.DataFrame
        One row per scenario: ``scenario``; ``fp8_plan``, ``fp8_usd_per_million_output_tokens``,
        ``fp8_efficiency_usd_per_million_output_tokens`` (cheapest with every precision);
        ``bf16_plan``, ``bf16_usd_per_million_output_tokens``,
        ``bf16_efficiency_usd_per_million_output_tokens`` (BF16 only); ``cost_ratio`` (BF16 / any,
        integer costs), ``efficiency_ratio`` (the same for efficiency costs), ``verified``,
        ``lecture_cost_ratio`` (float).

    Raises
    ------
    FastsimInputError
        Unknown scenario; bad planner arguments as in :func:`tpot_study`.

    Notes
    -----
    The lecture: FP8 forbidden costs 2.00x for both chat and the coding agent. Whether FP8's
    quality loss is acceptable is measured elsewhere; the planner treats it as a constraint.
    """
    from dataclasses import replace
    verify = _check(verify, seeds, horizon_s, top_k)
    catalog = catalog or default_catalog()
    rows = []
    log = _StudyLog()
    for s in scenarios:
        sc, d = _scenario_demand(catalog, s)
        m = catalog.model(sc.model)
        any_, _ = _best(m, d, sc, catalog, replace(options, precisions=None), verify, seeds, horizon_s, top_k, seed,
                        f"{sc.name}, FP8 allowed", log)
        bf, _ = _best(m, d, sc, catalog, replace(options, precisions=("BF16",)), verify, seeds, horizon_s,
                      top_k, seed, f"{sc.name}, BF16 only", log)
        a, b = any_["usd_per_million_output_tokens"], bf["usd_per_million_output_tokens"]
        ea, eb = any_["efficiency_usd_per_million_output_tokens"], bf["efficiency_usd_per_million_output_tokens"]
        rows.append(dict(scenario=sc.name, fp8_plan=any_["plan"], fp8_usd_per_million_output_tokens=a,
                         fp8_efficiency_usd_per_million_output_tokens=ea,
                         bf16_plan=bf["plan"], bf16_usd_per_million_output_tokens=b,
                         bf16_efficiency_usd_per_million_output_tokens=eb,
                         cost_ratio=b / a if math.isfinite(a) else math.nan,
                         efficiency_ratio=eb / ea if math.isfinite(ea) else math.nan,
                         verified=bool(any_["verified"] and bf["verified"]),
                         lecture_cost_ratio=LECTURE["fp8"].get(sc.name, math.nan)))
    return _frame(rows, "fp8", verify, log, horizon_s)


@_doc
def price_study(prices: Sequence[tuple] = (("B200", 4.0), ("B200", 5.0), ("B200", 6.0), ("H200", 2.6),
                                           ("H200", 2.2)), *, scenario: str = "chat",
                verify: bool | None = None, seeds: int = 2, horizon_s: float = 600.0, top_k: int = 3,
                seed: int = 0, catalog: Catalog | None = None,
                options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """Which GPU wins as one GPU's price moves, the others at their catalog prices (lecture §2.4).

    Parameters
    ----------
    prices : sequence of (str, float)
        ``(GPU name, USD per GPU-hour)`` settings, each applied alone to the catalog.
    scenario : str, default 'chat'
%(planner)s

    Returns
    -------
    pandas.DataFrame
        One row per setting: ``price_gpu`` (str), ``price_usd_per_gpu_hour`` (float), %(cols)s,
        ``tied_with`` (str: other GPUs whose cheapest analytic plan costs the same, to 1e-9),
        ``best_<GPU>_usd_per_million_output_tokens`` (float, the cheapest analytic plan on each
        GPU of the grid), ``lecture_winner`` (str, '' where the lecture says nothing).

    Raises
    ------
    FastsimInputError
        Unknown GPU, non-positive price; bad planner arguments as in :func:`tpot_study`.

    Notes
    -----
    The lecture: at the default prices 2 x B200 and 4 x H100 cost the same (2 x 4.0 = 4 x 2.0);
    with B200 at $6/h H100 wins; H200 at $2.2/h is still not enough.
    """
    verify = _check(verify, seeds, horizon_s, top_k)
    catalog = catalog or default_catalog()
    rows = []
    log = _StudyLog()
    for name, usd in prices:
        gname = catalog.gpu(name).name
        usd = require_positive(f"price of {gname}", usd)
        cat = catalog.with_prices({gname: usd})
        sc, d = _scenario_demand(cat, scenario)
        row, rep = _best(cat.model(sc.model), d, sc, cat, options, verify, seeds, horizon_s, top_k, seed,
                         f"{gname} at ${usd:g}/h", log)
        g = rep.grid[rep.grid.feasible]
        per_gpu = g.groupby("gpu")["usd_per_million_output_tokens"].min() if len(g) else pd.Series(dtype=float)
        ties = [k for k, v in per_gpu.items() if k != row["gpu"] and abs(v - row["analytic_usd_per_million_output_tokens"]) <= 1e-9]
        extra = {f"best_{k}_usd_per_million_output_tokens": float(v) for k, v in per_gpu.items()}
        rows.append(dict(price_gpu=gname, price_usd_per_gpu_hour=usd, **row, tied_with=", ".join(ties), **extra,
                         lecture_winner=LECTURE["prices"].get((gname, usd), "") if scenario == "chat" else ""))
    return _frame(rows, "prices", verify, log, horizon_s)


@_doc
def model_size_study(models: Sequence[str] = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"), *,
                     scenario: str = "chat", verify: bool | None = None, seeds: int = 2,
                     horizon_s: float = 600.0, top_k: int = 3, seed: int = 0,
                     catalog: Catalog | None = None, options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """The cheapest plan for models of different sizes under one workload and SLO (lecture §2.4).

    Parameters
    ----------
    models : sequence of str
        Catalog model names (or ``config.json`` paths).
    scenario : str, default 'chat'
        Its lengths, SLOs and rate are used for every model.
%(planner)s

    Returns
    -------
    pandas.DataFrame
        One row per model: ``model`` (str), ``params`` (float, total parameters), %(cols)s,
        ``lecture_usd_per_million_output_tokens`` (float), ``lecture_plan`` (str).

    Raises
    ------
    FastsimInputError
        Unknown model or scenario; bad planner arguments as in :func:`tpot_study`.

    Notes
    -----
    The lecture: 8B $0.111, 70B $0.444, 405B $3.556 (16 x B200, TP4 x 4).
    """
    verify = _check(verify, seeds, horizon_s, top_k)
    catalog = catalog or default_catalog()
    sc, d = _scenario_demand(catalog, scenario)
    rows = []
    log = _StudyLog()
    for name in models:
        m = catalog.model(name)
        row, _ = _best(m, d, sc, catalog, options, verify, seeds, horizon_s, top_k, seed, m.name, log)
        lec = LECTURE["model-size"].get(m.name.lower()) if scenario == "chat" else None
        rows.append(dict(model=m.name, params=float(m.total_params), **row,
                         lecture_usd_per_million_output_tokens=lec[0] if lec else math.nan,
                         lecture_plan=lec[1] if lec else ""))
    return _frame(rows, "model-size", verify, log, horizon_s)


@_doc
def traffic_study(rates_req_per_s: Sequence[float] = (5.0, 20.0, 50.0, 100.0, 500.0), *, scenario: str = "chat",
                  verify: bool | None = None, seeds: int = 2, horizon_s: float = 600.0, top_k: int = 3,
                  seed: int = 0, catalog: Catalog | None = None,
                  options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """Integer cost vs efficiency cost as traffic grows (lecture §2.4, last bullet; §2.2).

    The integer cost pays for whole instances at the target rate; the efficiency cost pays for
    fractional instances at their capacity. Their gap is the idle part of the last instance, which
    shrinks as the rate grows.

    Parameters
    ----------
    rates_req_per_s : sequence of float
        Target rates (req/s), each > 0.
    scenario : str, default 'chat'
%(planner)s

    Returns
    -------
    pandas.DataFrame
        One row per rate: ``rate_req_per_s`` (float), %(cols)s, ``utilization`` (rate / analytic
        capacity of the plan), ``best_efficiency_usd_per_million_output_tokens`` (the lowest
        efficiency cost anywhere in the grid), ``lecture_usd_per_million_output_tokens``,
        ``lecture_efficiency_usd_per_million_output_tokens`` (float, NaN where none).

    Raises
    ------
    FastsimInputError
        A non-positive rate, an unknown scenario; bad planner arguments as in :func:`tpot_study`.

    Notes
    -----
    The lecture: 5 req/s $0.578 integer vs $0.440 efficiency; 500 req/s $0.276 vs $0.274.
    """
    verify = _check(verify, seeds, horizon_s, top_k)
    catalog = catalog or default_catalog()
    rows = []
    log = _StudyLog()
    for r in rates_req_per_s:
        r = require_positive("rate_req_per_s", r)
        sc, d = _scenario_demand(catalog, scenario, rate_req_per_s=r)
        row, rep = _best(catalog.model(sc.model), d, sc, catalog, options, verify, seeds, horizon_s, top_k, seed,
                         f"{r:g} req/s", log)
        g = rep.grid[rep.grid.feasible]
        lec = LECTURE["traffic"].get(r) if scenario == "chat" else None
        cap = row["capacity_req_per_s"]
        rows.append(dict(rate_req_per_s=r, **row, utilization=r / cap if cap > 0 else math.nan,
                         best_efficiency_usd_per_million_output_tokens=float(
                             g.efficiency_usd_per_million_output_tokens.min()) if len(g) else math.inf,
                         lecture_usd_per_million_output_tokens=lec[0] if lec else math.nan,
                         lecture_efficiency_usd_per_million_output_tokens=lec[1] if lec else math.nan))
    return _frame(rows, "traffic", verify, log, horizon_s)


_STUDY_FUNCS = {"tpot": tpot_study, "fp8": fp8_study, "prices": price_study, "model-size": model_size_study,
                "traffic": traffic_study}


def run_studies(studies: Sequence[str] = STUDIES, *, verify: bool | None = None, seeds: int = 2,
                horizon_s: float = 600.0, top_k: int = 3, seed: int = 0, catalog: Catalog | None = None,
                options: ScreenOptions = ScreenOptions()) -> dict:
    """Run several studies with their default settings.

    Parameters
    ----------
    studies : sequence of str
        Names from :data:`STUDIES` (``'all'`` alone means every study).
    verify, seeds, horizon_s, top_k, seed, catalog, options
        As in :func:`tpot_study`, for every study.

    Returns
    -------
    dict of str to pandas.DataFrame
        Study name -> its frame, in the order asked.

    Raises
    ------
    FastsimInputError
        An unknown study name; bad planner arguments.
    """
    if isinstance(studies, str):
        studies = (studies,)
    if list(studies) == ["all"]:
        studies = STUDIES
    for s in studies:
        if s not in _STUDY_FUNCS:
            raise FastsimInputError("study", s, "one of " + ", ".join(STUDIES) + ", all")
    kw = dict(verify=verify, seeds=seeds, horizon_s=horizon_s, top_k=top_k, seed=seed, catalog=catalog,
              options=options)
    return {s: _STUDY_FUNCS[s](**kw) for s in studies}


# ----------------------------------------------------------------------------------------------
# text


def _m(x, spec=".3f"):
    """A table cell: ``inf`` for +inf, ``n/a`` where there is no figure."""
    from ._output import cell
    return cell(x, spec)


_TEXT = {
    "tpot": [("TPOT target ms", "tpot_ms", "g"), ("cheapest plan", "plan", ""),
             ("$/M out", "usd_per_million_output_tokens", ".3f"),
             ("$/M eff", "efficiency_usd_per_million_output_tokens", ".3f"),
             ("lecture $/M", "lecture_usd_per_million_output_tokens", ".3f"), ("lecture plan", "lecture_plan", "")],
    "fp8": [("scenario", "scenario", ""), ("FP8 allowed", "fp8_plan", ""),
            ("$/M", "fp8_usd_per_million_output_tokens", ".3f"), ("BF16 only", "bf16_plan", ""),
            ("$/M", "bf16_usd_per_million_output_tokens", ".3f"), ("ratio", "cost_ratio", ".2f"),
            ("eff ratio", "efficiency_ratio", ".2f"), ("lecture ratio", "lecture_cost_ratio", ".2f")],
    "prices": [("GPU", "price_gpu", ""), ("$/GPU-h", "price_usd_per_gpu_hour", "g"), ("cheapest plan", "plan", ""),
               ("$/M out", "usd_per_million_output_tokens", ".3f"), ("tied with", "tied_with", ""),
               ("best H100", "best_H100_usd_per_million_output_tokens", ".3f"),
               ("best H200", "best_H200_usd_per_million_output_tokens", ".3f"),
               ("best B200", "best_B200_usd_per_million_output_tokens", ".3f"),
               ("lecture winner", "lecture_winner", "")],
    "model-size": [("model", "model", ""), ("cheapest plan", "plan", ""),
                   ("$/M out", "usd_per_million_output_tokens", ".3f"),
                   ("$/M eff", "efficiency_usd_per_million_output_tokens", ".3f"),
                   ("lecture $/M", "lecture_usd_per_million_output_tokens", ".3f"), ("lecture plan", "lecture_plan", "")],
    "traffic": [("rate req/s", "rate_req_per_s", "g"), ("cheapest plan", "plan", ""),
                ("$/M integer", "usd_per_million_output_tokens", ".3f"),
                ("$/M eff", "efficiency_usd_per_million_output_tokens", ".3f"), ("utilization", "utilization", ".2f"),
                ("lecture integer", "lecture_usd_per_million_output_tokens", ".3f"),
                ("lecture eff", "lecture_efficiency_usd_per_million_output_tokens", ".3f")],
}
_TITLES = {"tpot": "TPOT target (chat)", "fp8": "FP8 forbidden", "prices": "GPU prices (chat)",
           "model-size": "model size (chat workload and SLOs)", "traffic": "traffic (chat)"}


def format_study(df: pd.DataFrame) -> str:
    """A study's frame as a plain-text table (the one ``fastsim whatif`` and ``examples/04`` print).

    Parameters
    ----------
    df : pandas.DataFrame
        A frame returned by one of the study functions (``df.attrs['study']`` set).

    Returns
    -------
    str
        A title line (saying whether the plans were verified in simulation) and a table; costs in
        US dollars per million output tokens, ``n/a`` where there is no figure and ``inf``
        for an infinite one; then ``note:`` lines: the frame's ``attrs['notes']`` (a short
        horizon, why a row has no plan) and what the lecture columns are.

    Raises
    ------
    FastsimInputError
        A frame without a known ``attrs['study']``.
    """
    from tabulate import tabulate
    study = getattr(df, "attrs", {}).get("study")
    if study not in _TEXT:
        raise FastsimInputError("df.attrs['study']", study, "one of " + ", ".join(STUDIES))
    spec = [c for c in _TEXT[study] if c[1] in df.columns]
    verified = bool(df.attrs.get("verified", False))
    if verified and study != "fp8":
        spec = spec + [("attainment", "attainment", ".3f"), ("repaired", "repaired", "")]
    rows = [[(_m(r[c], f) if f else ("" if r[c] is None else str(r[c]))) for _, c, f in spec]
            for _, r in df.iterrows()]
    head = f"what-if: {_TITLES[study]}; " + ("plans verified and repaired in simulation" if verified
                                             else "analytic screen, not verified in simulation")
    text = head + "\n" + tabulate(rows, headers=[h for h, _, _ in spec], disable_numparse=True)
    for n in df.attrs.get("notes", []):
        text += "\nnote: " + n
    if any(c.startswith("lecture_") for _, c, _ in spec):
        text += "\nnote: " + LECTURE_NOTE
    return text


# ----------------------------------------------------------------------------------------------
# plots (matplotlib Figure on an Agg canvas: no pyplot state is touched)


def _figure(width=6.5, height=4.0):
    from .plots import _figure as figure
    return figure(1, 1, (width, height))


def _save(fig, ax, path, title, verified, **legend):
    ax.set_title(title + (" (verified in simulation)" if verified else " (analytic screen)"), fontsize="medium")
    ax.legend(**({"fontsize": "small"} | legend))
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    return str(path)


def _need(df, study):
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise FastsimInputError("df", type(df).__name__, f"a non-empty frame from the {study} study")
    return bool(df.attrs.get("verified", False))


def _finite(a):
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isfinite(a), a, np.nan)


def plot_tpot_study(df: pd.DataFrame, path) -> str:
    """Cost against the TPOT target, with each setting's plan and the lecture's figures.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`tpot_study`.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        An empty frame.
    """
    v = _need(df, "tpot")
    fig, ax = _figure()
    x = np.arange(len(df))
    ax.bar(x, _finite(df.usd_per_million_output_tokens), color="tab:blue", label="fastsim")
    ax.plot(x, df.lecture_usd_per_million_output_tokens, "k_", markersize=30, mew=2, label="lecture 16 (published)")
    for i, (c, lay, g, pr, m) in enumerate(zip(df.usd_per_million_output_tokens, df.layout, df.gpu,
                                               df.precision, df["mode"])):
        if math.isfinite(c):
            ax.annotate(f"{g} {pr}\n{m[:5]}. {lay}", (i, c), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, [f"{t:g} ms" for t in df.tpot_ms])
    ax.set_xlabel("P90 TPOT target")
    ax.set_ylabel("$ per million output tokens")
    return _save(fig, ax, path, "TPOT target (chat)", v)


def plot_fp8_study(df: pd.DataFrame, path) -> str:
    """Cost with FP8 allowed and forbidden, per scenario, ratios annotated.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`fp8_study`.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        An empty frame.
    """
    v = _need(df, "fp8")
    fig, ax = _figure()
    x = np.arange(len(df))
    ax.bar(x - 0.2, _finite(df.fp8_usd_per_million_output_tokens), 0.4, label="FP8 allowed")
    ax.bar(x + 0.2, _finite(df.bf16_usd_per_million_output_tokens), 0.4, label="BF16 only")
    for i, (r, lr, h) in enumerate(zip(df.cost_ratio, df.lecture_cost_ratio, df.bf16_usd_per_million_output_tokens)):
        ax.annotate(f"{r:.2f}x (lecture 16: {lr:.2f}x)", (i + 0.2, h), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, list(df.scenario))
    ax.set_ylabel("$ per million output tokens")
    return _save(fig, ax, path, "FP8 forbidden", v)


def plot_price_study(df: pd.DataFrame, path) -> str:
    """The cheapest analytic plan on each GPU under each price setting; the winner is labelled.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`price_study`.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        An empty frame.
    """
    fig, ax = _draw_price_study(df)
    return _save(fig, ax, path, "GPU prices (chat)", bool(df.attrs.get("verified", False)), loc="upper left",
                 ncol=4)


def _draw_price_study(df: pd.DataFrame):
    """(figure, axes) of :func:`plot_price_study`, before the title and legend.

    Each setting's winner is written under its tick label (not over the bars, where neighbouring
    labels collided) and its bar, with any tied bar, carries a star; the y axis leaves room above
    the bars for a one-row legend.
    """
    _need(df, "prices")
    suffix = "_usd_per_million_output_tokens"
    cols = [c for c in df.columns if c.startswith("best_") and c.endswith(suffix)]
    names = [c[len("best_"):-len(suffix)] for c in cols]
    fig, ax = _figure(8.0, 4.5)
    x = np.arange(len(df))
    w = 0.8 / max(len(cols), 1)
    top = 0.0
    star_x, star_y = [], []
    for j, (c, name) in enumerate(zip(cols, names)):
        h = _finite(df[c])
        ax.bar(x - 0.4 + w * (j + 0.5), h, w, label=name)
        top = max(top, float(np.nanmax(h)) if np.isfinite(h).any() else 0.0)
        for i, (g, t) in enumerate(zip(df.gpu, df.tied_with)):
            winners = [g] + [s.strip() for s in str(t).split(",") if s.strip()]
            if name in winners and math.isfinite(h[i]):
                star_x.append(x[i] - 0.4 + w * (j + 0.5))
                star_y.append(h[i])
    if star_x:
        ax.plot(star_x, np.asarray(star_y) + 0.03 * max(top, 1e-12), "k*", markersize=8, linestyle="none",
                label="winner")
    labels = []
    for g, t, pg, p in zip(df.gpu, df.tied_with, df.price_gpu, df.price_usd_per_gpu_hour):
        winner = (g + (f" = {t}" if t else "")) if g else "none"
        labels.append(f"{pg} ${p:g}/h\nwinner: {winner}")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0.0, 1.3 * top if top > 0 else 1.0)
    ax.set_ylabel("$ per million output tokens")
    return fig, ax


def plot_model_size_study(df: pd.DataFrame, path) -> str:
    """Cost per model size (log scale), fastsim against the lecture.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`model_size_study`.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        An empty frame.
    """
    v = _need(df, "model-size")
    fig, ax = _figure()
    x = np.arange(len(df))
    ax.bar(x, _finite(df.usd_per_million_output_tokens), color="tab:blue", label="fastsim")
    ax.plot(x, df.lecture_usd_per_million_output_tokens, "k_", markersize=30, mew=2, label="lecture 16 (published)")
    for i, (c, lay, g, pr) in enumerate(zip(df.usd_per_million_output_tokens, df.layout, df.gpu, df.precision)):
        if math.isfinite(c):
            ax.annotate(f"{g} {pr} {lay}", (i, c), ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, list(df.model))
    ax.set_ylabel("$ per million output tokens")
    return _save(fig, ax, path, "Model size (chat)", v)


def plot_traffic_study(df: pd.DataFrame, path) -> str:
    """Integer and efficiency cost against the target rate (log x), with the lecture's points.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`traffic_study`.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        An empty frame.
    """
    v = _need(df, "traffic")
    fig, ax = _figure()
    r = df.rate_req_per_s
    ax.plot(r, _finite(df.usd_per_million_output_tokens), "o-", label="integer cost")
    ax.plot(r, _finite(df.efficiency_usd_per_million_output_tokens), "s--", label="efficiency cost")
    ax.plot(r, df.lecture_usd_per_million_output_tokens, "kx", label="lecture 16, integer")
    ax.plot(r, df.lecture_efficiency_usd_per_million_output_tokens, "k+", label="lecture 16, efficiency")
    ax.set_xscale("log")
    ax.set_xlabel("target rate (req/s)")
    ax.set_ylabel("$ per million output tokens")
    return _save(fig, ax, path, "Traffic (chat)", v)


_PLOTS = {"tpot": plot_tpot_study, "fp8": plot_fp8_study, "prices": plot_price_study,
          "model-size": plot_model_size_study, "traffic": plot_traffic_study}


def plot_study(df: pd.DataFrame, path) -> str:
    """Draw any study's frame (dispatch on ``df.attrs['study']``) to a PNG.

    Parameters
    ----------
    df : pandas.DataFrame
        A frame returned by one of the study functions.
    path : str or path-like
        Output PNG file.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        A frame without a known ``attrs['study']``, or an empty one.
    """
    study = getattr(df, "attrs", {}).get("study")
    if study not in _PLOTS:
        raise FastsimInputError("df.attrs['study']", study, "one of " + ", ".join(STUDIES))
    return _PLOTS[study](df, path)
