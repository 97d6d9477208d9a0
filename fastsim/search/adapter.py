"""From the planner's plan to the simulator's: the one converter between the two plan types.

:func:`sim_plan` turns a :class:`fastsim.analytic.Plan` (what the screen sizes: names, TPs,
instance counts) into a :class:`~fastsim.sim.ColocatedPlan`, a :class:`~fastsim.sim.PipelinePlan`
(a plan with ``pp > 1``: the stage rows of :func:`fastsim.stepmodel.stage_params`) or a
:class:`~fastsim.sim.DisaggregatedPlan` (step-parameter vectors of
:func:`fastsim.stepmodel.step_params`, SPEC §3, and instance counts). ``_engine_kwargs`` turns an
engine setting into the simulator's keywords for that plan (the engine policies of
:mod:`fastsim.sim.policy`; a speculative draft of :mod:`fastsim.specdec`). ``_plan_model`` and
``_simulated`` are the opening lines every verification and capacity search shares.
"""
from __future__ import annotations

from ..analytic import Plan
from ..catalog import Catalog, Model, default_catalog
from ..errors import FastsimInputError
from ..stepmodel import P_KV_BUDGET_TOKENS, StepConstants, stage_params, step_params

#: The engine policies that simulate a pipelined instance (:class:`fastsim.sim.PipelinePlan`); the
#: vllm and sglang policies do not (their schedulers are modelled for one instance's step).
PIPELINE_POLICIES = ("lecture", "trtllm")



def sim_plan(plan: Plan, catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
             model: Model | None = None):
    """The simulator's plan object for an analytic :class:`~fastsim.analytic.Plan`.

    Parameters
    ----------
    plan : Plan
    catalog : Catalog, optional
        Resolves the plan's GPU, precision and (unless ``model`` is given) model; defaults to
        the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry (e.g. read from a ``config.json``).

    Returns
    -------
    ColocatedPlan, PipelinePlan or DisaggregatedPlan
        With step parameters from :func:`fastsim.stepmodel.step_params`; the plan's
        ``chunk_tokens`` for a colocated plan, the default prefill token budget (8192) for a
        disaggregated one; the plan's ``max_batch`` (0: no cap) on its (decode) instances. A
        colocated plan with ``pp > 1`` is a :class:`~fastsim.sim.PipelinePlan` of the
        :func:`~fastsim.stepmodel.stage_params` rows of its ``tp x pp`` instance.

    Raises
    ------
    FastsimInputError
        Unknown names, a TP that is not a power of two, a GPU without a peak for the precision,
        instance counts / chunk below 1, or ``pp > 1`` on a disaggregated plan, with
        speculative decoding, beyond the model's layers or with a stage TP larger than a node.
    """
    from ..sim import ColocatedPlan, DisaggregatedPlan
    catalog, model = _plan_model(plan, catalog, model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    pp = int(getattr(plan, "pp", 1))
    if pp != 1:
        from ..sim import PipelinePlan
        if plan.mode != "colocated" or plan.spec_gamma:
            raise FastsimInputError("plan.pp", pp, "1 for a disaggregated plan or one with speculative decoding "
                                    "(pipeline parallelism is simulated on colocated instances without a draft)")
        stages = stage_params(model, g, pr, plan.tp, constants, pp=pp, **plan.layout_kwargs(plan.tp))
        return PipelinePlan(stages, plan.instances, plan.chunk_tokens, plan.max_batch)
    if plan.mode == "disaggregated":
        # a heterogeneous plan's prefill side has its own GPU and precision (its KV is sent as it holds it)
        gp, prp = catalog.gpu(plan.prefill_gpu_name), catalog.precision(plan.prefill_precision_name)
        return DisaggregatedPlan(step_params(model, gp, prp, plan.prefill_tp, constants,
                                             **plan.layout_kwargs(plan.prefill_tp)), plan.prefill_instances,
                                 step_params(model, g, pr, plan.decode_tp, constants,
                                             **plan.layout_kwargs(plan.decode_tp)), plan.decode_instances,
                                 decode_max_batch=plan.max_batch)
    if plan.spec_gamma:
        # the draft shares the instance: the KV budget left beside it (fastsim.specdec)
        from ..specdec import spec_step_params
        p, _ = spec_step_params(model, g, pr, plan.tp, constants, plan.spec, catalog=catalog,
                                **plan.layout_kwargs(plan.tp))
        return ColocatedPlan(p, plan.instances, plan.chunk_tokens, plan.max_batch)
    return ColocatedPlan(step_params(model, g, pr, plan.tp, constants, **plan.layout_kwargs(plan.tp)),
                         plan.instances, plan.chunk_tokens, plan.max_batch)


def _engine_kwargs(engine, plan: Plan, catalog: Catalog, model: Model, constants: StepConstants) -> dict:
    """The simulator keywords of an engine setting for a plan (``engine`` of :func:`verify` and the capacity searches).

    A plan sized with speculative decoding (``plan.spec_gamma > 0``) brings its draft: ``spec`` and
    ``p_draft`` (:func:`fastsim.specdec.spec_step_params`); the lecture policy cannot simulate it.
    """
    if engine is None:
        if plan.spec_gamma:
            raise FastsimInputError("engine", None, f"an engine policy (e.g. {{'policy': 'vllm'}}) for {plan.describe()}: "
                                    "speculative decoding is simulated under the vllm, sglang and trtllm policies only")
        return {}
    if not isinstance(engine, dict) or "policy" not in engine:
        raise FastsimInputError("engine", engine, "a dict with a policy (vllm, sglang or an EnginePolicy) and "
                                "optionally spec_seed")
    why = pipeline_refusal(plan, engine)
    if why:
        name = engine["policy"] if isinstance(engine["policy"], str) else getattr(engine["policy"], "name", "?")
        raise FastsimInputError("engine", name, "lecture or trtllm for " + plan.describe() + ": " + why)
    kw = dict(engine)
    over = {k: kw.pop(k) for k in ("max_num_batched_tokens", "max_num_seqs", "prefix_caching") if k in kw}
    from_plan = bool(kw.pop("plan_settings", False)) and plan.mode == "colocated" and plan.batch > 0
    if from_plan:
        # the settings `fastsim plan --emit` writes for this plan (fastsim.emit): the plan's decode batch,
        # and a token budget of its decodes' tokens plus its chunk (vLLM) or its chunk (SGLang)
        name = kw["policy"] if isinstance(kw["policy"], str) else kw["policy"].name
        over.setdefault("max_num_seqs", int(plan.batch))
        over.setdefault("max_num_batched_tokens", int(plan.batch) * (int(plan.spec_gamma) + 1)
                        + int(plan.chunk_tokens) if name == "vllm" else int(plan.chunk_tokens))
    if isinstance(kw["policy"], str) and kw["policy"] != "lecture":
        # the engine's defaults for this plan's GPU (and KV pool), with the user's overrides
        from ..sim.policy import engine_policy
        p = sim_plan(plan, catalog, constants, model)
        p = p.p if hasattr(p, "p") else p.p_decode       # a PipelinePlan's .p holds the instance's KV budget
        pol = engine_policy(kw["policy"], catalog.gpu(plan.gpu).hbm_bytes,
                            kv_budget_tokens=float(p[P_KV_BUDGET_TOKENS]),
                            context_tokens=model.max_context_tokens, **over)
        dp = int(plan.layout_kwargs(plan.tp).get("dp", 1)) if plan.mode == "colocated" else 1
        if pol.name == "vllm" and dp > 1 and not from_plan:
            # vLLM's data-parallel ranks are engines of their own, each with these limits
            # (vllm/v1/engine/core.py, DPEngineCoreProc); SGLang's --max-running-requests counts the
            # whole instance and SGLang splits it over its DP-attention ranks
            pol = pol._replace(max_num_batched_tokens=pol.max_num_batched_tokens * dp,
                               max_num_seqs=pol.max_num_seqs * dp,
                               source=pol.source + f"; x {dp} data-parallel ranks")
        kw["policy"] = pol
    elif over:
        raise FastsimInputError("engine", sorted(over), "engine settings with a vllm or sglang policy name")
    if plan.spec_gamma:
        from ..specdec import spec_step_params
        if plan.mode != "colocated":
            raise FastsimInputError("plan", plan.describe(), "a colocated plan (the engine policies simulate "
                                    "speculative decoding on colocated instances)")
        _, pd = spec_step_params(model, catalog.gpu(plan.gpu), catalog.precision(plan.precision), plan.tp, constants,
                                 plan.spec, catalog=catalog, **plan.layout_kwargs(plan.tp))
        kw.update(spec=plan.spec, p_draft=pd)
        kw.setdefault("spec_seed", 0)
    return kw


def pipeline_refusal(plan: Plan, engine) -> str:
    """Why an engine policy cannot simulate a pipelined plan ("" when it can, or the plan has ``pp`` 1).

    The simulator runs a :class:`~fastsim.sim.PipelinePlan` under the lecture and trtllm policies
    (:data:`PIPELINE_POLICIES`); the vllm and sglang policies model one instance's scheduler step
    and refuse it.

    Parameters
    ----------
    plan : Plan
    engine : dict or None
        ``engine`` of :func:`fastsim.search.verify` (None: the lecture policy).

    Returns
    -------
    str
    """
    if int(getattr(plan, "pp", 1)) == 1 or engine is None:
        return ""
    pol = engine.get("policy") if isinstance(engine, dict) else None
    name = pol if isinstance(pol, str) else getattr(pol, "name", None)
    if name in PIPELINE_POLICIES:
        return ""
    return (f"pipeline parallelism (PP{plan.pp}), which the {name} policy of the simulator does not simulate "
            "(the lecture and trtllm policies do)")


def _plan_model(plan: Plan, catalog: Catalog | None, model: Model | None) -> tuple:
    """``(catalog, model)``: the catalog given (else the built-in one) and the model given (else the plan's entry in it)."""
    catalog = catalog or default_catalog()
    return catalog, model or catalog.model(plan.model)


def _simulated(plan: Plan, engine, catalog: Catalog, constants: StepConstants, model: Model) -> tuple:
    """``(sim plan, engine keywords)``: what the simulator takes for ``plan`` under ``engine``.

    :func:`sim_plan` and ``_engine_kwargs``, in that order (their errors come in that order).
    """
    return sim_plan(plan, catalog, constants, model), _engine_kwargs(engine, plan, catalog, model, constants)
