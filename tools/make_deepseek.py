"""Write docs/DEEPSEEK.md: fastsim's step model beside DeepSeek's published V3/R1 deployment (SPEC §10).

DeepSeek published, for its own V3/R1 service on H800 nodes ("Day 6: One More Thing, DeepSeek-V3/R1
Inference System Overview", 2025-03-01), the throughput of a node in prefill (EP32) and in decode
(EP144). This generator runs fastsim's step model (``fastsim.ledger.ledger`` and
``fastsim.stepmodel.step_parts``) on the same model, GPUs and layouts, sets the result beside the
published figures, and explains every difference by an ablation it computes: each ablation switches
on one mechanism DeepSeek describes (overlap, MTP, EPLB placement, BF16 attention, FP8 dispatch,
node-deduplicated dispatch, the cached prefix) or moves one of the step model's constants. Nothing
is tuned to the published figures; the only numbers typed in are the published ones and the
mechanisms' own parameters, each with its source in ``PUBLISHED`` and ``MECHANISMS``.

Run:  python tools/make_deepseek.py [--out docs/DEEPSEEK.md]      (a second or two)
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fastsim.catalog import Model, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.ledger import KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, ledger
from fastsim.stepmodel import (P_WEXP, StepConstants, decode_attn_flops, prefill_attn_flops, step_params,
                               step_parts)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "DEEPSEEK.md"

#: The published figures (Day-6 post, "Statistics of DeepSeek's Online Service", 24 hours from
#: 2025-02-27 12:00 UTC+8; layouts from its "Large-scale Cross-node Expert Parallelism" section).
PUBLISHED = dict(
    prefill_input_tokens_per_s_per_node=73.7e3,   # "~73.7k tokens/s input (including cache hits)"
    decode_output_tokens_per_s_per_node=14.8e3,   # "~14.8k tokens/s output during decoding"
    cache_hit_fraction=0.563,                     # "608B, of which 342B tokens (56.3%) hit the on-disk KV cache"
    input_tokens=608e9, output_tokens=168e9,      # totals of the 24 hours
    user_speed_band=(20.0, 22.0),                 # "average output speed was 20-22 tokens per second"
    kv_length_per_output_token=4989,              # "average kvcache length per output token was 4,989 tokens"
    prefill_gpus=32, decode_gpus=144,             # EP32 / DP32 (4 nodes), EP144 / DP144 (18 nodes)
    prefill_expert_slots_per_gpu=9,               # "each GPU handles 9 routed experts" (256 + 32 redundant)
    decode_expert_slots_per_gpu=2,                # "each GPU manages 2 routed experts" (256 + 32 redundant)
    redundant_experts=32,
    gpus_per_node=8,
)

#: Mechanisms the ablations switch on, with their published parameters.
MECHANISMS = dict(
    # DeepSeek-V3 technical report (arXiv:2412.19437) §5.4.3: second-token acceptance 85-90%, 1.8x TPS
    mtp_acceptance=0.85,
    # profile-data README: prefill profiled with 4K prompts and 16K tokens per GPU (EP32, TP1)
    profile_prompt_tokens=4096, profile_tokens_per_gpu=16384,
    # DeepEP README (V1, legacy): low-latency kernels on H800 + CX7 400 Gb/s, 128 tokens per GPU,
    # hidden 7168, top-8, FP8 dispatch, BF16 combine, EP128: dispatch 192 us, combine 369 us
    deepep_ll_tokens=128, deepep_ll_dispatch_s=192e-6, deepep_ll_combine_s=369e-6, deepep_ll_ep=128,
    # FP8 dispatch: 1 byte per element plus one FP32 scale per 128 elements (DeepEP / DeepGEMM format)
    fp8_dispatch_bytes=1.0 + 4.0 / 128.0, bf16_bytes=2.0,
)

PREC = "FP8"
SEED = 0
DRAWS = 16            # routing draws per imbalance estimate


# ----------------------------------------------------------------------------------------------
# model and GPU


def model_and_gpu():
    """DeepSeek-V3 and the H800 from the catalog when it has them, else built here (same figures).

    Returns ``(model, gpu, note)``; ``note`` says where each came from.
    """
    cat = default_catalog()
    notes = []
    try:
        m = cat.model("deepseek-v3")
        notes.append("model `deepseek-v3` from fastsim's catalog")
    except (FastsimInputError, KeyError):
        m = Model(name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128, ffn=18432,
                  vocab=129280, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                  v_head_dim=128, q_lora_rank=1536, n_experts=256, experts_per_token=8, moe_ffn=2048,
                  shared_ffn=2048, moe_layers=58, max_context_tokens=163840)
        notes.append("model built from DeepSeek-V3's config.json figures (not in this catalog)")
    try:
        g = cat.gpu("H800")
        notes.append("GPU `H800` from fastsim's catalog")
    except (FastsimInputError, KeyError):
        g = replace(cat.gpu("H100"), name="H800", nvlink_bw_bytes_per_s=400e9)
        notes.append("GPU H800 built as the catalog's H100 with NVLink 400e9 B/s (not in this catalog)")
    return m, g, "; ".join(notes)


# ----------------------------------------------------------------------------------------------
# one step of one variant


@dataclass(frozen=True)
class Variant:
    """fastsim's step with one or more DeepSeek mechanisms switched on (defaults: fastsim's own step)."""

    key: str
    label: str
    constants: StepConstants = field(default_factory=StepConstants)
    combine: str = "serial"          # serial: fastsim; "max": max(mem, compute, comm); "dbo": two micro-batches
    mtp: bool = False                # decode: 1 + acceptance tokens per step, verify 2 tokens per sequence
    kv_bytes: float | None = None    # KV bytes per element (None: the precision's)
    attn_bf16: bool = False          # attention FLOPs at the BF16 peak (DeepSeek: "core MLA computations ... BF16")
    attn_dim_decode: float | None = None   # None: Model.attn_dim_decode (absorbed MLA)
    dispatch_bytes: float = 2.0      # bytes per hidden element of the dispatch (fastsim: 2, BF16)
    node_dedup: bool = False         # prefill: a token crosses the network once per remote node it needs
    imbalance: bool = False          # slowest GPU's receive load under uniform routing, DeepSeek's slot counts
    deepep_measured: bool = False    # decode: all-to-all at DeepEP's measured low-latency kernel times
    prefix: bool = False             # prefill: attend to (and read) the cached prefix
    slots: bool = False              # prefill: hold (and read) DeepSeek's 9 expert slots per GPU, not ceil(E/G)
    overhead_s: float | None = None  # the planner's fixed overhead in place of the ledger's launches
    attn_off: bool = False           # no attention FLOPs at all (share of the step)


FASTSIM = Variant("fastsim", "fastsim's step (serial sum; the headline)")


@dataclass
class Setup:
    model: Model
    gpu: object
    note: str
    prompt_tokens: int          # P, prompt tokens per request (prefill)
    computed_tokens: int        # s = P - c, tokens a prefill computes per prompt
    cached_tokens: int          # c, cache-hit tokens per prompt
    prompts_per_gpu: int        # prompts per GPU in a prefill step
    context: int                # decode context (published average KV length)
    _params: dict = field(default_factory=dict)
    _imb: dict = field(default_factory=dict)

    def precision(self, v: Variant):
        prec = default_catalog().precision(PREC)
        if v.kv_bytes is not None:
            prec = replace(prec, name=f"{PREC} with {v.kv_bytes:g}-byte KV", kv_bytes=v.kv_bytes)
        return prec

    def params(self, phase, v: Variant):
        G = PUBLISHED[f"{phase}_gpus"]
        key = (phase, v.constants, v.kv_bytes, v.slots)
        if key not in self._params:
            prec = self.precision(v)
            p = step_params(self.model, self.gpu, prec, G, v.constants, dp=G, ep=G)
            if v.slots:
                p = p.copy()
                slots = PUBLISHED[f"{phase}_expert_slots_per_gpu"]
                p[P_WEXP] = self.model.routed_expert_params * prec.weight_bytes * slots / self.model.n_experts
            self._params[key] = p
        return self._params[key]

    def imbalance(self, phase, tokens_per_gpu):
        """Mean over draws of (largest per-GPU receive load) / (mean load), uniform routing (see routing_imbalance)."""
        key = (phase, tokens_per_gpu)
        if key not in self._imb:
            self._imb[key] = routing_imbalance(self.model, PUBLISHED[f"{phase}_gpus"],
                                               PUBLISHED[f"{phase}_expert_slots_per_gpu"], tokens_per_gpu)
        return self._imb[key]


def slot_loads(n_experts, gpus, slots_per_gpu):
    """Place E experts on ``gpus x slots_per_gpu`` slots, replicating experts into the spare slots.

    Under uniform routing every expert has the same expected load, so any ``slots - E`` experts are
    replicated (each copy takes half its tokens) and the slots are filled longest-first onto the
    least-loaded GPU with a free slot (the usual greedy balancing, as EPLB does with measured loads).

    Returns ``(owner, share)``: for each slot, its GPU and its expert; and ``copies`` per expert.
    """
    n_slots = gpus * slots_per_gpu
    extra = max(n_slots - n_experts, 0)
    items = [(1.0 if e >= extra else 0.5, e) for e in range(n_experts)]
    items += [(0.5, e) for e in range(extra)]
    items.sort(key=lambda t: -t[0])
    load = np.zeros(gpus)
    free = np.full(gpus, slots_per_gpu)
    placement = []                               # (gpu, expert)
    for w, e in items:
        cand = np.flatnonzero(free > 0)
        gi = cand[np.argmin(load[cand])]
        load[gi] += w
        free[gi] -= 1
        placement.append((gi, e))
    return placement, load


def routing_imbalance(model: Model, gpus: int, slots_per_gpu: int, tokens_per_gpu: float, draws: int = DRAWS):
    """Largest per-GPU dispatch receive load over the mean, uniform routing (SPEC §10's assumption).

    Token-expert pairs ``gpus x tokens_per_gpu x k`` fall on the E experts as a multinomial with equal
    probabilities (the distinct-experts constraint within a token is neglected at these counts); a
    replicated expert's tokens split evenly at random between its two copies; slots are placed by
    :func:`slot_loads`. fastsim's all-to-all and expert compute assume every GPU receives the mean.
    Seeded (``SEED``): the same arguments give the same value.
    """
    rng = np.random.default_rng(SEED)
    E, k = model.n_experts, model.experts_per_token
    placement, _ = slot_loads(E, gpus, slots_per_gpu)
    slot_gpu = np.array([gi for gi, _ in placement])
    slot_exp = np.array([e for _, e in placement])
    copies = np.bincount(slot_exp, minlength=E)
    first_slot = np.zeros(len(placement), dtype=bool)
    seen = set()
    for i, e in enumerate(slot_exp):
        if e not in seen:
            first_slot[i] = True
            seen.add(e)
    pairs = int(round(gpus * tokens_per_gpu * k))
    out = []
    for _ in range(draws):
        counts = rng.multinomial(pairs, np.full(E, 1.0 / E))
        first = rng.binomial(counts, np.where(copies > 1, 0.5, 1.0))
        c, f1 = counts[slot_exp], first[slot_exp]
        load = np.where(copies[slot_exp] == 1, c, np.where(first_slot, f1, c - f1))
        per_gpu = np.bincount(slot_gpu, weights=load, minlength=gpus)
        out.append(per_gpu.max() / per_gpu.mean())
    return float(np.mean(out))


def expected_remote_nodes(model: Model, gpus: int, gpus_per_node: int) -> float:
    """Remote nodes a token's k distinct experts fall on, in expectation (experts spread evenly over nodes).

    A node holds ``E / nodes`` experts; it is missed with probability ``C(E - E/N, k) / C(E, k)``.
    """
    nodes = gpus // gpus_per_node
    E, k = model.n_experts, model.experts_per_token
    per_node = E // nodes
    miss = math.comb(E - per_node, k) / math.comb(E, k)
    return (nodes - 1) * (1.0 - miss)


def run(setup: Setup, phase: str, per_gpu: int, v: Variant = FASTSIM) -> dict:
    """One step of ``phase`` ('decode': ``per_gpu`` sequences per GPU; 'prefill': ``per_gpu`` prompts per GPU).

    fastsim's parts come from :func:`fastsim.stepmodel.step_parts`; the variant then changes only
    what its mechanism changes. With ``FASTSIM`` the result equals :func:`fastsim.ledger.ledger`.
    """
    m, gpu = setup.model, setup.gpu
    G = PUBLISHED[f"{phase}_gpus"]
    p = setup.params(phase, v)
    L = m.layers
    if phase == "decode":
        B = G * per_gpu
        per_seq = 2 if v.mtp else 1
        n = float(B * per_seq)
        kv = float(B * m.kv_tokens_held(setup.context))
        d = m.attn_dim_decode if v.attn_dim_decode is None else v.attn_dim_decode
        attn = 0.0 if v.attn_off else decode_attn_flops(L, d, n * m.kv_tokens_held(setup.context))
        tokens_per_seq = 1.0 + MECHANISMS["mtp_acceptance"] if v.mtp else 1.0
    else:
        B = G * per_gpu
        s, c = setup.computed_tokens, setup.cached_tokens
        n = float(B * s)
        kv = float(B * c) if v.prefix else 0.0
        d = m.attn_dim_prefill
        attn = 0.0 if v.attn_off else B * (prefill_attn_flops(L, d, s) + (4.0 * L * d * s * c if v.prefix else 0.0))
        tokens_per_seq = None
    w, kvr, comp, ar, a2a = (float(x) for x in step_parts(p, n, kv, attn))
    comp_mm = float(step_parts(p, n, kv, 0.0)[2])
    comp_attn = comp - comp_mm
    if v.attn_bf16:
        peaks = gpu.peak_flops_per_s
        comp_attn *= peaks[default_catalog().precision(PREC).flops_key] / peaks["bf16"]
    a2a_lat = float(step_parts(p, 0.0, 0.0, 0.0)[4])
    a2a_bw = a2a - a2a_lat
    k = m.experts_per_token
    routed_share = m.moe_layers * k * m.expert_params / m.active_matmul_params
    imb = setup.imbalance(phase, n / G) if v.imbalance else 1.0
    a2a_bw *= (v.dispatch_bytes + MECHANISMS["bf16_bytes"]) / (2 * MECHANISMS["bf16_bytes"])
    if v.node_dedup:
        a2a_bw *= expected_remote_nodes(m, G, PUBLISHED["gpus_per_node"]) / (k * (G - 1) / G)
    a2a_bw *= imb
    comp_mm *= (1.0 - routed_share) + routed_share * imb
    a2a = a2a_lat + a2a_bw
    if v.deepep_measured:
        per_layer = MECHANISMS["deepep_ll_dispatch_s"] + MECHANISMS["deepep_ll_combine_s"]
        a2a = m.moe_layers * per_layer * (n / G) / MECHANISMS["deepep_ll_tokens"] * imb
    comp = comp_mm + comp_attn
    launch = L * KERNELS_PER_LAYER_FUSED * LAUNCH_S_GRAPHS
    fixed = launch if v.overhead_s is None else v.overhead_s
    mem, comm = w + kvr, ar + a2a
    if v.combine == "serial":
        step = max(mem, comp) + comm + fixed
    elif v.combine == "max":
        step = max(mem, comp, comm) + fixed
    elif v.combine == "dbo":        # two micro-batches: each reads the weights and launches its kernels
        step = max(mem + w, comp, comm) + (2 * launch if v.overhead_s is None else v.overhead_s)
    else:
        raise ValueError(v.combine)
    # memory per GPU: all dense weights (attention is data-parallel), its expert slots, its ranks' KV
    prec = setup.precision(v)
    slots = (PUBLISHED[f"{phase}_expert_slots_per_gpu"] if v.slots else -(-m.n_experts // G)) / m.n_experts
    held = B * (m.kv_tokens_held(setup.context) if phase == "decode"
                else setup.computed_tokens + (setup.cached_tokens if v.prefix else 0))
    mem_gpu = ((m.total_params - m.routed_expert_params) * prec.weight_bytes
               + m.routed_expert_params * prec.weight_bytes * slots
               + held / G * m.kv_bytes_per_token_per_gpu(prec.kv_bytes, 1))
    limit = v.constants.memory_utilization * gpu.hbm_bytes
    out = dict(weight_read_s=w, kv_read_s=kvr, compute_s=comp, attn_compute_s=comp_attn, allreduce_s=ar,
               alltoall_s=a2a, alltoall_latency_s=a2a_lat if not v.deepep_measured else float("nan"),
               fixed_s=fixed, step_s=step, n_tokens=n, imbalance=imb,
               expert_read_s=w - float(step_parts(p, 0.0, 0.0, 0.0)[0]),
               memory_per_gpu_bytes=mem_gpu, memory_limit_per_gpu_bytes=limit, fits=bool(mem_gpu <= limit))
    node = PUBLISHED["gpus_per_node"]
    if phase == "decode":
        out["user_tokens_per_s"] = tokens_per_seq / step
        out["node_tokens_per_s"] = node * per_gpu * tokens_per_seq / step
    else:
        out["node_computed_tokens_per_s"] = node * per_gpu * setup.computed_tokens / step
        out["node_tokens_per_s"] = node * per_gpu * setup.prompt_tokens / step
    return out


def band_batch(setup: Setup, v: Variant, hi=512):
    """Batch per GPU whose per-user speed is nearest the middle of the published 20-22 tokens/s band.

    Only batches whose weights and KV cache fit in memory are considered. Returns ``(batch, result,
    (node tokens/s at the smallest and largest batch in the band), capped)``, where ``capped`` says
    that memory, not the band, stopped the search; ``(None, None, None, capped)`` when no batch
    that fits lands in the band.
    """
    a, b = PUBLISHED["user_speed_band"]
    mid = (a + b) / 2
    rows, capped = [], False
    for bb in range(1, hi + 1):
        r = run(setup, "decode", bb, v)
        if not r["fits"]:
            capped = True
            break
        if r["user_tokens_per_s"] < a:
            break                    # per-user speed falls as the batch grows
        rows.append((bb, r))
    inside = [(bb, r) for bb, r in rows if a <= r["user_tokens_per_s"] <= b]
    if not inside:
        return None, None, None, capped
    bb, r = min(inside, key=lambda t: (abs(t[1]["user_tokens_per_s"] - mid), t[0]))
    return bb, r, (inside[0][1]["node_tokens_per_s"], inside[-1][1]["node_tokens_per_s"]), capped


# ----------------------------------------------------------------------------------------------
# the figures


def make_setup() -> Setup:
    m, g, note = model_and_gpu()
    P = MECHANISMS["profile_prompt_tokens"]
    s = round(P * (1.0 - PUBLISHED["cache_hit_fraction"]))
    per_gpu = round(MECHANISMS["profile_tokens_per_gpu"] / s)
    return Setup(model=m, gpu=g, note=note, prompt_tokens=P, computed_tokens=s, cached_tokens=P - s,
                 prompts_per_gpu=per_gpu, context=PUBLISHED["kv_length_per_output_token"])


def variants(setup: Setup):
    """The ablations: (section, Variant, applies to decode, applies to prefill)."""
    fp8 = MECHANISMS["fp8_dispatch_bytes"]
    base = StepConstants()
    V = []
    add = lambda sec, v, dec=True, pf=True: V.append((sec, v, dec, pf))  # noqa: E731
    add("a", Variant("max", "(a) overlap: step = max(memory, compute, communication) + launches", combine="max"))
    add("a", Variant("dbo", "(a) two micro-batches: max(memory + a second weight read, compute, communication) "
                            "+ launches of both", combine="dbo"))
    add("b", Variant("mtp", "(b) MTP: 1.85 tokens per step, verify 2 tokens per sequence", mtp=True), pf=False)
    add("b", Variant("mtp_dbo", "(b) MTP and two micro-batches", mtp=True, combine="dbo"), pf=False)
    add("c", Variant("imbalance", "(c) slowest GPU under uniform routing, DeepSeek's expert slots (all-to-all "
                                  "and expert compute x max/mean load)", imbalance=True))
    add("c", Variant("slots", "(c) EPLB's 9 expert slots per GPU held and read in prefill (fastsim: 8)", slots=True),
        dec=False)
    add("d", Variant("attn_off", "(d) no attention FLOPs (attention's share of the step)", attn_off=True))
    add("d", Variant("attn_wide", f"(d) MLA decode without absorption (width {setup.model.attn_dim_prefill:,.0f} "
                                  f"instead of {setup.model.attn_dim_decode:,.0f})",
                     attn_dim_decode=setup.model.attn_dim_prefill), pf=False)
    add("d", Variant("bf16_mla", "(d) MLA in BF16 as DeepSeek runs it: 2-byte latent cache, attention at the BF16 "
                                 "peak", kv_bytes=2.0, attn_bf16=True))
    add("f", Variant("fp8_dispatch", f"(f) FP8 dispatch ({fp8:.3f} bytes per element), BF16 combine",
                     dispatch_bytes=fp8))
    add("f", Variant("dedup", "(f) FP8 dispatch and one network transfer per remote node (NVLink fans out)",
                     dispatch_bytes=fp8, node_dedup=True), dec=False)
    add("f", Variant("deepep", "(f) all-to-all at DeepEP's measured low-latency kernel times (EP128, 128 tokens)",
                     deepep_measured=True), pf=False)
    add("g", Variant("prefix", "(g) attention over (and read of) the cached prefix", prefix=True), dec=False)
    dec_all = dict(mtp=True, kv_bytes=2.0, attn_bf16=True, dispatch_bytes=fp8, imbalance=True)
    pf_all = dict(prefix=True, kv_bytes=2.0, attn_bf16=True, dispatch_bytes=fp8, node_dedup=True, slots=True,
                  imbalance=True)
    add("all", Variant("deployed_dec_serial", "DeepSeek's mechanisms except overlap: MTP, BF16 MLA, FP8 "
                                              "dispatch, uniform-routing imbalance", **dec_all), pf=False)
    add("all", Variant("deployed_dec", "the same and two micro-batches", combine="dbo", **dec_all), pf=False)
    add("all", Variant("deployed_pf_serial", "DeepSeek's mechanisms except overlap: cached prefix, BF16 MLA, FP8 "
                                             "dispatch, node-deduplicated transfers, 9 slots, uniform-routing "
                                             "imbalance", **pf_all), dec=False)
    add("all", Variant("deployed_pf", "the same and two micro-batches", combine="dbo", **pf_all), dec=False)
    for name, vals, unit in (("eta_compute", (0.5, 0.7, 0.8), "of peak FLOP/s"),
                             ("eta_bw", (0.7, 0.9), "of HBM bandwidth"),
                             ("alpha_s", (0.0, 0.86e-6), "per hop"),
                             ("eta_nvlink", (0.7, 1.0), "of link bandwidth (NVLink and the network alike)")):
        for x in vals:
            shown = f"{x * 1e6:g} us" if name == "alpha_s" else f"{x:g}"
            dflt = getattr(base, name)
            dshown = f"{dflt * 1e6:g} us" if name == "alpha_s" else f"{dflt:g}"
            add("e", Variant(f"{name}={x:g}", f"(e) {name} {shown} (default {dshown}) {unit}",
                             constants=replace(base, **{name: x})))
    for x in (0.0, 1e-3, 2e-3):
        add("e", Variant(f"overhead={x:g}", f"(e) fixed overhead {x * 1e3:g} ms per step in place of the ledger's "
                                            f"{setup.model.layers * KERNELS_PER_LAYER_FUSED} launches x 1 us"
                                            + (" (the planner's step)" if x == 1e-3 else ""), overhead_s=x))
    return V


def compute() -> dict:
    """Every figure of the page (the generator's core; tests/test_deepseek_doc.py checks it)."""
    S = make_setup()
    m, g = S.model, S.gpu
    R = dict(setup=S)
    # decode: a grid of batches per GPU, the headline is the one nearest 21 tokens/s per user
    grid = list(range(48, 129, 8))
    R["decode_grid"] = [(b, run(S, "decode", b)) for b in grid]
    b, r, rng_, _ = band_batch(S, FASTSIM)
    R["decode_batch"], R["decode"], R["decode_band_range"] = b, r, rng_
    led = ledger(m, g, PREC, PUBLISHED["decode_gpus"], batch=PUBLISHED["decode_gpus"] * b,
                 context_tokens=S.context, layout="dp+ep")
    assert math.isclose(led.step_s, r["step_s"], rel_tol=1e-12), (led.step_s, r["step_s"])
    assert math.isclose(led.memory_per_gpu_bytes, r["memory_per_gpu_bytes"], rel_tol=1e-12)
    R["decode_ledger"] = led
    R["decode_ratio"] = r["node_tokens_per_s"] / PUBLISHED["decode_output_tokens_per_s_per_node"]
    # prefill: prompts per GPU of s computed tokens each
    pf = run(S, "prefill", S.prompts_per_gpu)
    led_pf = ledger(m, g, PREC, PUBLISHED["prefill_gpus"], batch=PUBLISHED["prefill_gpus"] * S.prompts_per_gpu,
                    prefill_tokens=S.computed_tokens, layout="dp+ep")
    assert math.isclose(led_pf.step_s, pf["step_s"], rel_tol=1e-12), (led_pf.step_s, pf["step_s"])
    R["prefill"], R["prefill_ledger"] = pf, led_pf
    R["prefill_ratio"] = pf["node_tokens_per_s"] / PUBLISHED["prefill_input_tokens_per_s_per_node"]
    R["prefill_grid"] = [(q, run(S, "prefill", q)) for q in (1, 2, 4, S.prompts_per_gpu, 16)]
    plen = []
    for P in (1024, 2048, 4096, 8192, 16384):
        s = round(P * (1.0 - PUBLISHED["cache_hit_fraction"]))
        S2 = replace(S, prompt_tokens=P, computed_tokens=s, cached_tokens=P - s,
                     prompts_per_gpu=max(1, round(MECHANISMS["profile_tokens_per_gpu"] / s)), _params={}, _imb={})
        plen.append((P, s, S2.prompts_per_gpu, run(S2, "prefill", S2.prompts_per_gpu),
                     run(S2, "prefill", S2.prompts_per_gpu, Variant("p", "", prefix=True))))
    R["prompt_lengths"] = plen
    # ablations
    rows = []
    for sec, v, dec, pfl in variants(S):
        row = dict(section=sec, variant=v, decode=None, band=None, prefill=None)
        if dec:
            row["decode"] = run(S, "decode", b, v)
            row["band"] = band_batch(S, v)
        if pfl:
            row["prefill"] = run(S, "prefill", S.prompts_per_gpu, v)
        rows.append(row)
    R["ablations"] = rows
    # DeepSeek's operating point: concurrency = output tokens/s per GPU / tokens/s per user (band middle)
    mid = sum(PUBLISHED["user_speed_band"]) / 2
    R["implied_batch"] = bi = round(PUBLISHED["decode_output_tokens_per_s_per_node"] / PUBLISHED["gpus_per_node"] / mid)
    keys = ("fastsim", "mtp", "deployed_dec_serial", "deployed_dec")
    R["operating_point"] = [(k, FASTSIM.label if k == "fastsim" else next(r["variant"].label for r in rows
                                                                          if r["variant"].key == k),
                             run(S, "decode", bi, FASTSIM if k == "fastsim" else next(
                                 r["variant"] for r in rows if r["variant"].key == k)))
                            for k in keys]
    R["mtp_attn_off"] = run(S, "decode", b, Variant("mtp_attn_off", "", mtp=True, attn_off=True))
    # computed tokens per GPU per second the published prefill figure implies, and its FLOP rate
    flop_per_token = (2 * m.active_matmul_params + 2 * m.layers * m.attn_dim_prefill * S.computed_tokens
                      + 4 * m.layers * m.attn_dim_prefill * S.cached_tokens)
    per_gpu = (PUBLISHED["prefill_input_tokens_per_s_per_node"] / PUBLISHED["gpus_per_node"]
               * S.computed_tokens / S.prompt_tokens)
    R["implied_prefill"] = dict(computed_tokens_per_s_per_gpu=per_gpu, flop_per_token=flop_per_token,
                                fraction_of_peak=per_gpu * flop_per_token / g.peak_flops_per_s["fp8"])
    R["by_key"] = {row["variant"].key: row for row in rows}
    R["touched_decode"] = 1.0 - (1.0 - m.experts_per_token / m.n_experts) ** (PUBLISHED["decode_gpus"] * b)
    R["touched_per_gpu_tokens"] = 1.0 - (1.0 - m.experts_per_token / m.n_experts) ** b
    R["remote_nodes_prefill"] = expected_remote_nodes(m, PUBLISHED["prefill_gpus"], PUBLISHED["gpus_per_node"])
    # fastsim's all-to-all at DeepEP's benchmark point (128 tokens per GPU), EP128 and EP144
    R["a2a_check"] = a2a_at_deepep_point(S)
    return R


def a2a_at_deepep_point(S: Setup) -> dict:
    """fastsim's dispatch + combine of one MoE layer at 128 tokens per GPU, beside DeepEP's measured 192 + 369 us."""
    m, g = S.model, S.gpu
    prec = default_catalog().precision(PREC)
    t = MECHANISMS["deepep_ll_tokens"]
    out = {}
    for G in (MECHANISMS["deepep_ll_ep"], PUBLISHED["decode_gpus"]):
        p = step_params(m, g, prec, G, dp=G, ep=G)
        a2a = float(step_parts(p, float(G * t), 0.0, 0.0)[4]) / m.moe_layers       # dispatch + combine
        lat = float(step_parts(p, 0.0, 0.0, 0.0)[4]) / m.moe_layers
        one_bw = (a2a - lat) / 2                                                     # one BF16 all-to-all
        fp8 = MECHANISMS["fp8_dispatch_bytes"] / MECHANISMS["bf16_bytes"]
        out[G] = dict(total_s=a2a, latency_s=lat, dispatch_bf16_s=lat / 2 + one_bw,
                      dispatch_fp8_s=lat / 2 + one_bw * fp8, combine_s=lat / 2 + one_bw)
    return out


# ----------------------------------------------------------------------------------------------
# the page


def k_(x):
    return "-" if x is None or not math.isfinite(x) else f"{x / 1e3:,.1f}k"


def pc(x):
    """A signed percentage, with changes under half a percent shown as 0%."""
    return "0%" if abs(x) < 0.005 else f"{x:+.0%}"


def ms(x, d=2):
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:,.{d}f}"


def ratio(x):
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def within(r):
    return abs(r - 1.0) <= 0.35


def verdict(r):
    return "yes" if within(r) else "**no: outside the 35% target**"


def _band(row_band):
    bb, r, _, capped = row_band
    if bb is None:
        return "no batch that fits in memory reaches the band" if capped else "no batch in the band"
    return f"{bb} per GPU, {k_(r['node_tokens_per_s'])} per node" + (" (memory-bound)" if capped else "")


def render(R: dict) -> str:
    S = R["setup"]
    m, g = S.model, S.gpu
    Pd, Pp = PUBLISHED["decode_gpus"], PUBLISHED["prefill_gpus"]
    dec, pf = R["decode"], R["prefill"]
    b = R["decode_batch"]
    hit = PUBLISHED["cache_hit_fraction"]
    pub_d, pub_p = PUBLISHED["decode_output_tokens_per_s_per_node"], PUBLISHED["prefill_input_tokens_per_s_per_node"]
    by = R["by_key"]
    bi = R["implied_batch"]
    op = {k: r for k, _, r in R["operating_point"]}
    imp = R["implied_prefill"]
    L = []
    w = L.append
    w("# fastsim beside DeepSeek's V3/R1 deployment")
    w("")
    w("DeepSeek published the throughput of its own DeepSeek-V3/R1 service on H800 nodes (\"Day 6: One More Thing, "
      "DeepSeek-V3/R1 Inference System Overview\", 2025-03-01; SPEC §10). This page runs fastsim's step model on the "
      "same model, GPUs and layouts, sets the two results beside the published figures, and explains the differences "
      "by ablations that each switch on one mechanism DeepSeek describes, or move one of the step model's constants. "
      "No constant is tuned to the published figures and fastsim's defaults are unchanged. Generated by "
      "`python tools/make_deepseek.py` from fastsim's own output; do not edit by hand "
      "(`tests/test_deepseek_doc.py` checks the page against the generator).")
    w("")
    w("## Summary")
    w("")
    rows = [
        [f"decode output tokens/s per node (EP144, {b} sequences per GPU, {dec['user_tokens_per_s']:.1f} tokens/s "
         "per user)", k_(pub_d), k_(dec["node_tokens_per_s"]), ratio(R["decode_ratio"]), verdict(R["decode_ratio"])],
        [f"prefill input tokens/s per node (EP32, {S.prompts_per_gpu} prompts of {S.prompt_tokens:,} tokens per GPU, "
         f"{hit:.1%} of them cache hits)", k_(pub_p), k_(pf["node_tokens_per_s"]), ratio(R["prefill_ratio"]),
         verdict(R["prefill_ratio"])],
    ]
    w(table(["figure", "DeepSeek (published)", "fastsim", "fastsim / published", "within 35%?"], rows))
    w("")
    for name, r in (("decode", R["decode_ratio"]), ("prefill", R["prefill_ratio"])):
        if not within(r):
            w(f"fastsim's {name} figure is outside the 35% target ({r:.2f} of the published figure).")
            w("")
    dl, dh = R["decode_band_range"]
    pser, pall = by["deployed_pf_serial"], by["deployed_pf"]
    w(f"**Decode.** Every batch per GPU whose per-user speed lands in the published 20-22 tokens/s band gives "
      f"{k_(dl)} to {k_(dh)} output tokens/s per node ({dl / pub_d:.2f} to {dh / pub_d:.2f} of the published figure). "
      f"The published figures imply {bi} sequences per GPU ({pub_d / 8:,.0f} output tokens/s per GPU at 21 tokens/s "
      f"per user). At that concurrency fastsim's step gives {op['fastsim']['user_tokens_per_s']:.1f} tokens/s per "
      f"user without MTP and {op['mtp']['user_tokens_per_s']:.1f} with it (85% acceptance), and "
      f"{op['deployed_dec_serial']['user_tokens_per_s']:.1f} with every mechanism DeepSeek states except overlap "
      f"(MTP, BF16 MLA, FP8 dispatch, the slowest GPU under uniform routing): all in or near the band. DeepSeek's "
      f"two micro-batches would, as an ideal overlap, make the same step "
      f"{op['deployed_dec']['user_tokens_per_s']:.1f} tokens/s per user "
      f"({op['deployed_dec']['node_tokens_per_s'] / pub_d:.2f} of the published throughput at that concurrency): the "
      "service runs at the speed fastsim computes without overlap, and fastsim cannot say which of the costs it does "
      "not model (section 7) takes up the difference.")
    w("")
    w(f"**Prefill.** fastsim's prefill is communication-bound: the all-to-all is "
      f"{pf['alltoall_s'] / pf['step_s']:.0%} of the step, because fastsim sends each token's hidden state in BF16 to "
      f"each of its {m.experts_per_token} experts over the {g.network_bw_bytes_per_s / 1e9:.0f} GB/s network. "
      f"DeepSeek dispatches in FP8 and crosses the network once per remote node; with those, the cached prefix and "
      f"BF16 MLA, fastsim reads {k_(pser['prefill']['node_tokens_per_s'])} "
      f"({pser['prefill']['node_tokens_per_s'] / pub_p:.2f}) without overlap and "
      f"{k_(pall['prefill']['node_tokens_per_s'])} ({pall['prefill']['node_tokens_per_s'] / pub_p:.2f}) with an ideal "
      f"two-micro-batch overlap. The published 73.7k is a 24-hour average: {imp['computed_tokens_per_s_per_gpu']:,.0f} "
      f"computed tokens/s per GPU at {imp['flop_per_token'] / 1e9:.1f} GFLOP each, "
      f"{imp['fraction_of_peak']:.0%} of the FP8 peak, where fastsim's step assumes 60%. No ablation accounts for "
      "that residual: a prefill node that is not always full (TTFT targets, the load over the day) is outside "
      "fastsim's step model. "
      + ("fastsim's headline lands within the target because its all-to-all is slower than DeepSeek's, not because "
         "it reproduces DeepSeek's prefill." if within(R["prefill_ratio"]) else
         "fastsim's headline misses the target; its all-to-all is slower than DeepSeek's (ablation (f))."))
    w("")

    # ---------------------------------------------------------------- setup
    w("## 1. What DeepSeek published, and what fastsim is given")
    w("")
    w("Published (quoted from the post, checked against its text):")
    w("")
    w("- served on H800 GPUs, 8 per node; prefill \"Routed Expert EP32, MLA/Shared Expert DP32\", 4 nodes, 32 "
      "redundant routed experts, 9 routed experts and 1 shared expert per GPU; decode \"Routed Expert EP144, "
      "MLA/Shared Expert DP144\", 18 nodes, 32 redundant routed experts, 2 routed experts and 1 shared expert per GPU;")
    w("- \"matrix multiplications and dispatch transmissions adopt the FP8 format ..., while core MLA computations "
      "and combine transmissions use the BF16 format\";")
    w("- a dual-batch overlap (two micro-batches) hides communication behind computation in prefill; decode splits "
      "attention into two steps in a 5-stage pipeline;")
    w(f"- over 24 hours: {PUBLISHED['input_tokens'] / 1e9:.0f}B input tokens, of which {hit:.1%} hit the on-disk KV "
      f"cache; {PUBLISHED['output_tokens'] / 1e9:.0f}B output tokens; average output speed 20-22 tokens/s; average "
      f"KV cache length per output token {PUBLISHED['kv_length_per_output_token']:,} tokens;")
    w(f"- per H800 node ~{pub_p / 1e3:.1f}k input tokens/s in prefill (including cache hits) or ~{pub_d / 1e3:.1f}k "
      "output tokens/s in decode.")
    w("")
    w("The post does not mention multi-token prediction (MTP); DeepSeek-V3's technical report (arXiv:2412.19437, "
      "§5.4.3) reports a second-token acceptance of 85-90% and 1.8x the tokens per second with MTP as the draft, "
      "and SPEC §10 takes the decode deployment to use it. The published figures are 24-hour averages of a live "
      "service, not a benchmark at a fixed batch; fastsim's are full-batch steps.")
    w("")
    w(f"fastsim is given: {S.note}. DeepSeek-V3: {m.layers} layers ({m.layers - m.moe_layers} dense, {m.moe_layers} "
      f"MoE with {m.n_experts} routed experts, top-{m.experts_per_token}, one shared expert), an MLA latent cache of "
      f"{m.kv_lora_rank} + {m.qk_rope_head_dim} elements per layer per token; {m.total_params / 1e9:.1f}B parameters, "
      f"{m.active_matmul_params / 1e9:.1f}B matmul parameters active per token, {m.dense_matmul_params / 1e9:.1f}B of "
      f"them dense (attention, shared experts, dense layers, LM head). H800: H100 compute and HBM "
      f"({g.peak_flops_per_s['fp8'] / 1e12:,.0f} TFLOP/s FP8, {g.peak_flops_per_s['bf16'] / 1e12:,.0f} BF16, "
      f"{g.hbm_bw_bytes_per_s / 1e12:.2f} TB/s, {g.hbm_bytes / 1e9:.0f} GB), NVLink "
      f"{g.nvlink_bw_bytes_per_s / 1e9:.0f} GB/s per GPU one way, network {g.network_bw_bytes_per_s / 1e9:.0f} GB/s "
      f"per GPU. Precision {PREC}: 1-byte weights, 1-byte KV cache, the FP8 peak for every FLOP.")
    w("")
    w(f"Layout `dp+ep` over G GPUs: attention data-parallel, one rank per GPU (attention TP 1, so no all-reduce); each "
      f"GPU holds all dense weights and ceil({m.n_experts}/G) routed experts (2 at EP144, 8 at EP32); every MoE layer "
      "dispatches each token to its k experts and combines the results, two all-to-alls of "
      "`(G-1) alpha + (G-1)/G x tokens per GPU x k x hidden x 2 bytes / (eta x link)`. Both groups span nodes, so "
      f"the link is the network's {g.network_bw_bytes_per_s / 1e9:.0f} GB/s per GPU (the NVLink figure does not "
      "enter). A step is `max(weight read + KV read, compute) + all-reduce + all-to-all + kernel launches` "
      f"({m.layers} layers x {KERNELS_PER_LAYER_FUSED} kernels x 1 us under CUDA graphs), the ledger's step (SPEC §3, "
      "§4, §10); fastsim's planner uses the same step with a fixed 1 ms in place of the launches.")
    w("")

    # ---------------------------------------------------------------- decode
    w("## 2. Decode: EP144, 18 nodes")
    w("")
    w(f"Context: the published average KV length per output token, {S.context:,} tokens. The batch per GPU is the one "
      f"whose fastsim per-user speed (1 / step) is nearest 21 tokens/s, the middle of the published band: {b}. The "
      f"ledger is called with the instance's batch, {Pd} x {b} = {Pd * b:,} sequences.")
    w("")
    rows = []
    grid = sorted(R["decode_grid"] + ([(b, dec)] if b not in [x for x, _ in R["decode_grid"]] else []),
                  key=lambda t: t[0])
    for bb, r in grid:
        rows.append([f"{bb}{' (chosen)' if bb == b else ''}", ms(r["weight_read_s"]), ms(r["expert_read_s"]),
                     ms(r["kv_read_s"]), ms(r["compute_s"]), ms(r["alltoall_s"]), ms(r["fixed_s"]), ms(r["step_s"]),
                     f"{r['user_tokens_per_s']:.1f}", k_(r["node_tokens_per_s"]),
                     ratio(r["node_tokens_per_s"] / pub_d)])
    w(table(["batch per GPU", "weight ms", "of it experts ms", "KV ms", "compute ms", "all-to-all ms", "launch ms",
             "step ms", "tokens/s per user", "output tokens/s per node", "/ 14.8k"], rows))
    w("")
    led = R["decode_ledger"]
    w(f"At {b} sequences per GPU the step is {ms(dec['step_s'])} ms: memory "
      f"{ms(dec['weight_read_s'] + dec['kv_read_s'])} ms (dense weights "
      f"{ms(dec['weight_read_s'] - dec['expert_read_s'])}, "
      f"two experts x {m.moe_layers} layers {ms(dec['expert_read_s'])}, KV {ms(dec['kv_read_s'])}); compute "
      f"{ms(dec['compute_s'])} ms, under the memory side; all-to-all {ms(dec['alltoall_s'])} ms, of which "
      f"{ms(dec['alltoall_latency_s'])} ms is the latency term ({m.moe_layers} layers x 2 x {Pd - 1} hops x 0.43 us); "
      f"launches {ms(dec['fixed_s'])} ms. The binding part is {led.binding}: the all-to-all alone is "
      f"{dec['alltoall_s'] / dec['step_s']:.0%} of the step. Memory per GPU {led.memory_per_gpu_bytes / 1e9:.1f} GB "
      f"of {led.memory_limit_per_gpu_bytes / 1e9:.0f} GB usable (fits: {'yes' if led.fits else 'no'}).")
    w("")
    w(f"DeepSeek's operating point. Throughput is concurrency times per-user speed, so the published figures imply "
      f"{pub_d:,.0f} / 8 / 21 = {bi} sequences per GPU, and a step of 1 / 21 s = {1e3 / 21:.1f} ms per token, or "
      f"{1.85e3 / 21:.1f} ms when MTP yields 1.85 tokens per step. fastsim at {bi} sequences per GPU:")
    w("")
    rows = []
    for key, label, r in R["operating_point"]:
        tps = 1.85 if by.get(key, {}).get("variant", FASTSIM).mtp else 1.0
        rows.append([label, f"{tps:.2f}", ms(r["step_s"], 1), ms(tps / 21, 1), f"{r['user_tokens_per_s']:.1f}",
                     k_(r["node_tokens_per_s"]), ratio(r["node_tokens_per_s"] / pub_d)])
    w(table(["fastsim's step", "tokens per step per sequence", "step ms", "step at 21 tokens/s", "tokens/s per user",
             "output tokens/s per node", "/ 14.8k"], rows))
    w("")

    # ---------------------------------------------------------------- prefill
    w("## 3. Prefill: EP32, 4 nodes")
    w("")
    rem = PUBLISHED["input_tokens"] / PUBLISHED["output_tokens"]
    O = S.context / (rem + 0.5)
    w(f"Prompt length: {S.prompt_tokens:,} tokens, the length DeepSeek profiled its EP32 prefill with (profile-data: "
      f"\"a prompt length set to 4K and a batch size of 16K tokens per GPU\"). The published statistics agree: with "
      f"{rem:.2f} input tokens per output token ({PUBLISHED['input_tokens'] / 1e9:.0f}B / "
      f"{PUBLISHED['output_tokens'] / 1e9:.0f}B) and requests of one length, an average KV length per output token "
      f"of prompt + output / 2 = {S.context:,} gives prompts of {rem * O:,.0f} tokens and outputs of {O:,.0f}.")
    w("")
    w(f"Accounting of the cache hits: DeepSeek counts every input token, {hit:.1%} of which are read from the on-disk "
      f"KV cache instead of being computed. Each {S.prompt_tokens:,}-token prompt is therefore a cached prefix of "
      f"{S.cached_tokens:,} tokens and {S.computed_tokens:,} computed tokens (round({S.prompt_tokens:,} x "
      f"{1 - hit:.3f})). fastsim's prefill step computes the {S.computed_tokens:,} tokens of each of "
      f"{S.prompts_per_gpu} prompts per GPU ({S.prompts_per_gpu * S.computed_tokens:,} tokens, about the profile's "
      f"16K per GPU; the ledger is called with {Pp} x {S.prompts_per_gpu} = {Pp * S.prompts_per_gpu} prompts of "
      f"{S.computed_tokens:,} tokens) and credits the whole prompts as input: input tokens/s per node "
      f"= 8 x {S.prompts_per_gpu} x {S.prompt_tokens:,} / step = computed tokens/s per node x "
      f"{S.prompt_tokens:,} / {S.computed_tokens:,} (x {S.prompt_tokens / S.computed_tokens:.4f}, against "
      f"1 / (1 - {hit}) = {1 / (1 - hit):.4f}). The ledger's prefill attends only within the computed tokens; "
      "attending to the cached prefix is ablation (g).")
    w("")
    rows = []
    for q, r in R["prefill_grid"]:
        rows.append([f"{q}{' (chosen)' if q == S.prompts_per_gpu else ''}", f"{q * S.computed_tokens:,}",
                     ms(r["weight_read_s"], 1), ms(r["compute_s"], 1), ms(r["alltoall_s"], 1), ms(r["step_s"], 1),
                     k_(r["node_computed_tokens_per_s"]), k_(r["node_tokens_per_s"]),
                     ratio(r["node_tokens_per_s"] / pub_p)])
    w(table(["prompts per GPU", "computed tokens per GPU", "weight ms", "compute ms", "all-to-all ms", "step ms",
             "computed tokens/s per node", "input tokens/s per node", "/ 73.7k"], rows))
    w("")
    per_tok = S.prompts_per_gpu * S.computed_tokens
    w(f"The step is communication-bound: {pf['alltoall_s'] / per_tok * 1e6:.0f} us of all-to-all per token per GPU "
      f"against {pf['compute_s'] / per_tok * 1e6:.0f} us of compute; past one prompt per GPU the batch hardly "
      "matters. Prompt length, at the same hit rate and about 16K computed tokens per GPU:")
    w("")
    rows = []
    for P, s_, q, r, rp in R["prompt_lengths"]:
        rows.append([f"{P:,}", f"{s_:,}", q, k_(r["node_tokens_per_s"]), ratio(r["node_tokens_per_s"] / pub_p),
                     k_(rp["node_tokens_per_s"]), ratio(rp["node_tokens_per_s"] / pub_p)])
    w(table(["prompt tokens", "computed per prompt", "prompts per GPU", "input tokens/s per node", "/ 73.7k",
             "with the cached prefix attended (g)", "/ 73.7k"], rows))
    w("")

    # ---------------------------------------------------------------- ablations
    w("## 4. Where the differences come from: ablations")
    w("")
    w(f"Each row switches on one mechanism in fastsim's step (the first row is fastsim unchanged) and recomputes "
      f"decode at the headline batch ({b} per GPU), decode at the batch that brings the per-user speed back into the "
      f"20-22 tokens/s band (nearest 21, among batches that fit in memory), and prefill ({S.prompts_per_gpu} prompts "
      f"of {S.computed_tokens:,} computed tokens per GPU). Ratios are against the published 14.8k and 73.7k; a dash "
      "means the row does not apply to that phase.")
    w("")
    heads = ["variant", "decode tokens/s per user", "decode tokens/s per node", "batch in band",
             "decode per node in band", "/ 14.8k", "prefill input tokens/s per node", "/ 73.7k"]
    first = [f"{dec['user_tokens_per_s']:.1f}", k_(dec["node_tokens_per_s"]), str(b), k_(dec["node_tokens_per_s"]),
             ratio(R["decode_ratio"]), k_(pf["node_tokens_per_s"]), ratio(R["prefill_ratio"])]
    rows = [["fastsim's step (headline)"] + first]
    rows += [_ablation_row(row, pub_d, pub_p) for row in R["ablations"] if row["section"] != "e"]
    w(table(heads, rows))
    w("")
    w(_explanations(R))
    w("")
    w("### (e) Sensitivity to the step model's constants")
    w("")
    w("Each row moves one constant (the others at their defaults; fastsim's defaults are not changed).")
    w("")
    rows = [["defaults: eta_compute 0.6, eta_bw 0.8, alpha 0.43 us, link eta 0.85, launches"] + first]
    rows += [_ablation_row(row, pub_d, pub_p) for row in R["ablations"] if row["section"] == "e"]
    heads[0] = "constant"
    w(table(heads, rows))
    w("")
    w(_sensitivity_text(R))
    w("")

    # ---------------------------------------------------------------- reproduce
    w("## 5. Reproducing the figures")
    w("")
    w("```python")
    w("from fastsim.catalog import default_catalog")
    w("from fastsim.ledger import ledger")
    w("cat = default_catalog()")
    w("m, g = cat.model('deepseek-v3'), cat.gpu('H800')")
    w(f"# decode: EP144 dp+ep, {b} sequences per GPU at the published average KV length")
    w(f"d = ledger(m, g, '{PREC}', {Pd}, batch={Pd} * {b}, context_tokens={S.context}, layout='dp+ep')")
    w(f"print(1 / d.step_s, d.tokens_per_s_per_gpu * 8)   # {dec['user_tokens_per_s']:.2f} tokens/s per user, "
      f"{dec['node_tokens_per_s']:,.0f} per node")
    w(f"# prefill: EP32 dp+ep, {S.prompts_per_gpu} prompts of {S.computed_tokens} computed tokens per GPU")
    w(f"p = ledger(m, g, '{PREC}', {Pp}, batch={Pp} * {S.prompts_per_gpu}, prefill_tokens={S.computed_tokens}, "
      "layout='dp+ep')")
    w(f"print(p.tokens_per_s_per_gpu * 8 * {S.prompt_tokens} / {S.computed_tokens})   # "
      f"{pf['node_tokens_per_s']:,.0f} input tokens/s per node")
    w("```")
    w("")
    w("From the command line (`--tp` is the instance's GPU count; tokens/s/GPU x 8 is the node figure, and the "
      f"prefill's x {S.prompt_tokens} / {S.computed_tokens} credits the cache hits):")
    w("")
    w("```")
    w(f"fastsim ledger --model deepseek-v3 --gpu H800 --precision {PREC} --tp {Pd} --layout dp+ep "
      f"--batch {Pd * b} --context {S.context}")
    w(f"fastsim ledger --model deepseek-v3 --gpu H800 --precision {PREC} --tp {Pp} --layout dp+ep "
      f"--batch {Pp * S.prompts_per_gpu} --prefill {S.computed_tokens}")
    w("```")
    w("")
    w("Every ablation is `run(setup, phase, per_gpu, Variant(...))` in `tools/make_deepseek.py`: it takes the parts "
      "of `fastsim.stepmodel.step_parts(step_params(model, gpu, precision, G, constants, dp=G, ep=G), n_tokens, "
      "kv_tokens, attention_flops)` and changes only what its mechanism changes; with no mechanism it equals "
      "`ledger(...)`, step and memory (the generator asserts it). The sensitivity rows pass `StepConstants(...)` to "
      "`step_params`. `python tools/make_deepseek.py` rewrites this page in a few seconds.")
    w("")

    # ---------------------------------------------------------------- sources
    w("## 6. Sources")
    w("")
    w("- DeepSeek, \"Day 6: One More Thing, DeepSeek-V3/R1 Inference System Overview\", 2025-03-01, "
      "github.com/deepseek-ai/open-infra-index, `202502OpenSourceWeek/day_6_one_more_thing_deepseekV3R1_inference_"
      "system_overview.md`: layouts, precisions, overlap, the 24-hour statistics (every figure quoted here was "
      "checked against its text, the 4,989-token average KV length included).")
    w("- DeepSeek-AI, \"DeepSeek-V3 Technical Report\", arXiv:2412.19437: §3.4 (deployment, redundant experts), "
      "§5.4.3 (MTP second-token acceptance 85-90%, 1.8x TPS).")
    w("- deepseek-ai/profile-data, README: prefill profiled at EP32 with 4K prompts and 16K tokens per GPU; decode at "
      "EP128 with 4K prompts and 128 requests per GPU; two micro-batches in both.")
    w("- deepseek-ai/DeepEP, README (V1 performance, now `docs/legacy.md`): low-latency dispatch / combine on H800 "
      "with CX7 400 Gb/s at 128 tokens per GPU, EP128: 192 us / 369 us, FP8 dispatch and BF16 combine; the normal "
      "(prefill) kernels forward from the network to NVLink within a node.")
    w("- fastsim: SPEC §3, §4 and §10; `fastsim/stepmodel.py` (step model), `fastsim/ledger.py` (ledger), "
      "`fastsim/catalog/data` (DeepSeek-V3 from its config.json, the H800 from NVIDIA's specifications).")
    w("")

    # ---------------------------------------------------------------- not modelled
    w("## 7. What fastsim does not model here")
    w("")
    for item in _not_modelled(R):
        w(f"- {item}")
    return "\n".join(L)


def _ablation_row(row, pub_d, pub_p):
    v = row["variant"]
    d, bd, p = row["decode"], row["band"], row["prefill"]
    cells = [v.label]
    if d is None:
        cells += ["-", "-", "-", "-", "-"]
    else:
        cells += [f"{d['user_tokens_per_s']:.1f}", k_(d["node_tokens_per_s"])]
        if bd[0] is None:
            cells += ["none (memory)" if bd[3] else "none", "-", "-"]
        else:
            cells += [f"{bd[0]}{' (memory-bound)' if bd[3] else ''}", k_(bd[1]["node_tokens_per_s"]),
                      ratio(bd[1]["node_tokens_per_s"] / pub_d)]
    if p is None:
        cells += ["-", "-"]
    else:
        cells += [k_(p["node_tokens_per_s"]), ratio(p["node_tokens_per_s"] / pub_p)]
    return cells


def _explanations(R) -> str:
    S = R["setup"]
    m = S.model
    by = R["by_key"]
    dec, pf = R["decode"], R["prefill"]
    b = R["decode_batch"]
    pub_p = PUBLISHED["prefill_input_tokens_per_s_per_node"]
    acc = MECHANISMS["mtp_acceptance"]
    mx, dbo = by["max"], by["dbo"]
    mtp, mtpd = by["mtp"], by["mtp_dbo"]
    imb, slots = by["imbalance"], by["slots"]
    off, wide, bf = by["attn_off"], by["attn_wide"], by["bf16_mla"]
    f8, dd, dp = by["fp8_dispatch"], by["dedup"], by["deepep"]
    pre = by["prefix"]
    chk = R["a2a_check"]
    E128, E144 = chk[MECHANISMS["deepep_ll_ep"]], chk[PUBLISHED["decode_gpus"]]
    mo = R["mtp_attn_off"]
    s = []
    w = s.append
    w(f"**(a) Overlap.** DeepSeek runs two micro-batches so that one's all-to-all proceeds while the other computes. "
      "fastsim's planner and ledger do not assume this overlap: they add communication to the step. With the step "
      f"taken as max(memory, compute, communication) instead, decode at {b} per GPU goes from "
      f"{dec['user_tokens_per_s']:.1f} to {mx['decode']['user_tokens_per_s']:.1f} tokens/s per user and the band "
      f"holds {_band(mx['band'])}; prefill becomes {k_(mx['prefill']['node_tokens_per_s'])} "
      f"({mx['prefill']['node_tokens_per_s'] / pub_p:.2f}), still bound by the all-to-all. That bound is ideal: two "
      f"micro-batches each read the weights ({ms(dec['weight_read_s'])} ms per decode step here) and launch their "
      f"own kernels, which the second row charges: {dbo['decode']['user_tokens_per_s']:.1f} tokens/s per user at "
      f"{b}, {_band(dbo['band'])} in the band.")
    w("")
    w(f"**(b) MTP.** fastsim's simulator and ledger do not model speculative decoding with DeepSeek's MTP module yet "
      f"(a later issue), so the headline has none. With it, each step verifies 2 tokens per sequence (twice the tokens "
      f"through the matmuls, the all-to-all and the attention; the same KV read) and yields 1 + {acc} = {1 + acc:.2f} "
      f"tokens per sequence ({acc:.0%}, the low end of the technical report's 85-90% second-token acceptance; the MTP "
      f"module's own forward pass, one more MoE layer, is not charged). At {b} per GPU the step grows from "
      f"{ms(dec['step_s'], 1)} to {ms(mtp['decode']['step_s'], 1)} ms and per-user speed from "
      f"{dec['user_tokens_per_s']:.1f} to {mtp['decode']['user_tokens_per_s']:.1f}; in the band, "
      f"{_band(mtp['band'])}. MTP buys little throughput here because the verify step doubles the all-to-all, which "
      f"dominates the step. MTP with two micro-batches: {_band(mtpd['band'])}.")
    w("")
    w(f"**(c) Routing.** fastsim assumes uniform routing (SPEC §10): a step of T tokens touches E (1 - (1 - k/E)^T) "
      f"distinct experts per MoE layer. At {b} x {PUBLISHED['decode_gpus']} = {b * PUBLISHED['decode_gpus']:,} tokens "
      f"that is all of them but a fraction (31/32)^{b * PUBLISHED['decode_gpus']:,} = 10^"
      f"{b * PUBLISHED['decode_gpus'] * math.log10(1 - m.experts_per_token / m.n_experts):.0f}, so every GPU "
      "reads both its experts each "
      "step: the formula changes nothing at DeepSeek's batch sizes. EPLB's 32 redundant experts give 2 slots per GPU "
      f"in decode, fastsim's ceil(256/144) = 2, and 9 in prefill against fastsim's 8 (holding and reading the ninth: "
      f"prefill {k_(slots['prefill']['node_tokens_per_s'])}). What EPLB is for is load: the post states its "
      "objective as minimising the largest dispatch receive load over the GPUs, while fastsim's all-to-all and expert "
      f"compute assume every GPU receives the mean. Even uniform routing does not give that: {m.n_experts} experts on "
      f"{PUBLISHED['decode_gpus']} x 2 slots replicate {PUBLISHED['decode_gpus'] * 2 - m.n_experts}, so some GPUs "
      f"hold two unreplicated experts (2 expert-loads against a mean of {m.n_experts / PUBLISHED['decode_gpus']:.2f}), "
      f"and the multinomial spread adds to that. Sampled ({DRAWS} draws, seed {SEED}), the slowest GPU receives "
      f"{imb['decode']['imbalance']:.3f} x the mean in decode and {imb['prefill']['imbalance']:.3f} x in prefill "
      "(9 slots per GPU: 7 experts and 2 half-loaded replicas each, balanced). Charging the slowest GPU's all-to-all "
      f"and expert compute: {_band(imb['band'])} in the band, prefill {k_(imb['prefill']['node_tokens_per_s'])}. "
      "Real routing is more skewed than uniform; EPLB's replicas exist to pull it back towards this.")
    w("")
    share = dec["attn_compute_s"] / dec["compute_s"]
    w(f"**(d) MLA attention width.** fastsim's decode attention uses the absorbed width, `Model.attn_dim_decode` = "
      f"{m.heads} x (2 x {m.kv_lora_rank} + {m.qk_rope_head_dim}) / 2 = {m.attn_dim_decode:,.0f}: each head scores "
      f"the {m.kv_lora_rank + m.qk_rope_head_dim}-element latent and sums {m.kv_lora_rank}-element values; "
      f"4 x {m.layers} x {S.context:,} x {m.attn_dim_decode:,.0f} = "
      f"{4 * m.layers * S.context * m.attn_dim_decode / 1e9:.1f} GFLOP per token against "
      f"{2 * m.active_matmul_params / 1e9:.1f} GFLOP of matmuls. Attention is {share:.0%} of the decode compute "
      f"({ms(dec['attn_compute_s'])} of {ms(dec['compute_s'])} ms at {b} per GPU) and none of the step, since compute "
      f"stays under the memory side ({ms(dec['weight_read_s'] + dec['kv_read_s'])} ms): without attention decode "
      f"reads {k_(off['decode']['node_tokens_per_s'])} per node, with the non-absorbed width "
      f"({m.attn_dim_prefill:,.0f}) {k_(wide['decode']['node_tokens_per_s'])}. Under MTP compute "
      f"({ms(mtp['decode']['compute_s'])} ms) exceeds memory and attention costs "
      f"{ms(mtp['decode']['step_s'] - mo['step_s'])} ms of the {ms(mtp['decode']['step_s'], 1)} ms step. In prefill "
      f"attention is {pf['attn_compute_s'] / pf['compute_s']:.0%} of compute; without it prefill reads "
      f"{k_(off['prefill']['node_tokens_per_s'])}. DeepSeek runs MLA in BF16: a 2-byte latent cache "
      f"({m.kv_bytes_per_token(2):,.0f} bytes per token, SPEC §10) and attention at the BF16 peak. At {b} per GPU "
      f"that is {ms(bf['decode']['kv_read_s'] - dec['kv_read_s'])} ms more KV read and "
      f"{ms(bf['decode']['attn_compute_s'] - dec['attn_compute_s'])} ms more attention: {_band(bf['band'])} in the "
      f"band; prefill {k_(bf['prefill']['node_tokens_per_s'])}.")
    w("")
    w(f"**(f) All-to-all bytes.** fastsim sends BF16 both ways. DeepSeek dispatches in FP8 "
      f"({MECHANISMS['fp8_dispatch_bytes']:.3f} bytes per element, one FP32 scale per 128) and combines in BF16, so "
      f"the bandwidth part of the all-to-all is {(MECHANISMS['fp8_dispatch_bytes'] + 2) / 4:.3f} of fastsim's: "
      f"{_band(f8['band'])} in the band, prefill {k_(f8['prefill']['node_tokens_per_s'])}. In prefill DeepEP's "
      f"normal kernels cross the network once per remote node a token needs and fan out over NVLink: "
      f"{R['remote_nodes_prefill']:.2f} remote nodes per token in expectation ({m.experts_per_token} of "
      f"{m.n_experts} experts spread evenly over 4 nodes) instead of fastsim's k (G-1)/G = "
      f"{m.experts_per_token * 31 / 32:.2f} network transfers; with FP8 dispatch, prefill reads "
      f"{k_(dd['prefill']['node_tokens_per_s'])} ({dd['prefill']['node_tokens_per_s'] / pub_p:.2f}) and is no longer "
      f"bound by the network. As a check of the term itself: at DeepEP's published benchmark point (128 tokens per "
      f"GPU, EP128, FP8 dispatch, BF16 combine: 192 us dispatch, 369 us combine) fastsim's all-to-all gives "
      f"{E128['dispatch_fp8_s'] * 1e6:.0f} us dispatch in FP8 and {E128['combine_s'] * 1e6:.0f} us combine "
      f"({E128['latency_s'] / 2 * 1e6:.0f} us of each is the (G-1) alpha term), and at EP144 "
      f"{E144['dispatch_fp8_s'] * 1e6:.0f} and {E144['combine_s'] * 1e6:.0f} us. Taking DeepEP's measured times "
      f"instead, scaled by the tokens per GPU, decode reads {_band(dp['band'])} in the band.")
    w("")
    w(f"**(g) The cached prefix.** fastsim's ledger prefill attends only within the {S.computed_tokens:,} computed "
      f"tokens of each prompt; they also attend to the {S.cached_tokens:,} cached ones "
      f"(4 x {m.layers} x {m.attn_dim_prefill:,.0f} x {S.computed_tokens:,} x {S.cached_tokens:,} FLOPs per prompt) "
      f"and read their KV: prefill {k_(pre['prefill']['node_tokens_per_s'])} "
      f"({pre['prefill']['node_tokens_per_s'] / pub_p:.2f}).")
    w("")
    w("**Together.** The last four rows of the table switch on every mechanism DeepSeek states, without and then with "
      "an ideal two-micro-batch overlap. The overlap is the largest single term in both phases, and the one fastsim "
      "can only bound: it assumes the communication hides completely.")
    return "\n".join(s)


def _sensitivity_text(R) -> str:
    by = R["by_key"]
    dec, pf = R["decode"], R["prefill"]

    def span(prefix):
        rows = [r for k, r in by.items() if k.startswith(prefix)]
        d = [r["decode"]["node_tokens_per_s"] / dec["node_tokens_per_s"] - 1 for r in rows]
        p = [r["prefill"]["node_tokens_per_s"] / pf["node_tokens_per_s"] - 1 for r in rows]
        return f"decode {pc(min(d))} to {pc(max(d))}, prefill {pc(min(p))} to {pc(max(p))}"

    def most(sens):
        x = []
        for row in R["ablations"]:
            if (row["section"] == "e") != sens or row["section"] == "all":
                continue
            if row["decode"] is not None:
                x.append(abs(row["decode"]["node_tokens_per_s"] / dec["node_tokens_per_s"] - 1))
            if row["prefill"] is not None:
                x.append(abs(row["prefill"]["node_tokens_per_s"] / pf["node_tokens_per_s"] - 1))
        return max(x)

    out = []
    for row in R["ablations"]:
        if row["section"] != "e":
            continue
        bd, p = row["band"], row["prefill"]
        bad = []
        if bd[0] is None or not within(bd[1]["node_tokens_per_s"] / PUBLISHED["decode_output_tokens_per_s_per_node"]):
            bad.append("decode")
        if not within(p["node_tokens_per_s"] / PUBLISHED["prefill_input_tokens_per_s_per_node"]):
            bad.append("prefill")
        if bad:
            out.append(f"{row['variant'].key} ({' and '.join(bad)})")
    outside = ("Every setting keeps both figures within the 35% target." if not out else
               "Settings that take a figure outside the 35% target: " + ", ".join(out) + ".")
    return (f"At the headline batch, over the ranges above: eta_compute {span('eta_compute')} (decode compute stays "
            f"under the memory side); eta_bw {span('eta_bw')}; alpha {span('alpha_s')} (the latency term is "
            f"{ms(dec['alltoall_latency_s'])} ms of each decode step at EP144, none of prefill's to speak of); link "
            f"efficiency {span('eta_nvlink')}, the largest in prefill, since both phases are communication-bound; "
            f"the fixed overhead {span('overhead')}. {outside} A constant moved alone shifts a figure by at most "
            f"{most(True):.0%}; one mechanism of the ablations above, by up to {most(False):.0%}.")


def _not_modelled(R):
    S = R["setup"]
    return [
        "speculative decoding with DeepSeek's MTP module (ablation (b) estimates it outside the ledger; the module's "
        "own forward pass is not charged there either);",
        "overlap of communication with computation (two micro-batches, decode's 5-stage pipeline): fastsim adds "
        "communication to the step; ablation (a) can only bound it;",
        "FP8 dispatch with BF16 combine, and node-deduplicated network transfers with NVLink forwarding: fastsim "
        "sends BF16 both ways over the slowest link (ablation (f));",
        "the all-to-all's latency is a ring's (G-1) alpha, where DeepEP issues all messages at once (ablation (f) "
        "compares with its measured kernels);",
        "mixed precision within a step: every FLOP runs at the precision's peak and the KV cache has the "
        "precision's element size, where DeepSeek runs MLA in BF16 (ablation (d));",
        "expert load imbalance and EPLB's redundant experts: at SPEC §3's constants fastsim's all-to-all and "
        "expert compute take the mean load (step model v2's moe_load_cv, 0 there, charges the busiest rank), and it "
        "places ceil(E/G) experts per GPU (ablation (c));",
        "attention to a cached prefix, and prefix caching on disk (SPEC §10 names prefix caching; the ledger's "
        "prefill starts from an empty cache; ablation (g));",
        "the KV-cache transfer from prefill to decode nodes, the load balancers between data-parallel ranks, and "
        f"unequal sequence lengths within a batch (the decode context is one average, {S.context:,} tokens);",
        "a live service's averages: the published figures are 24-hour means under a varying load (DeepSeek scales "
        "the number of nodes with it, and prefill batches are bounded by time to first token); fastsim's are "
        "full-batch steps;",
        "the H800's NVLink does not enter: both groups span nodes and attention has no tensor parallelism, so "
        "every message is charged at the network's 50 GB/s per GPU.",
    ]


def build() -> str:
    """The page's text."""
    return render(compute()) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DOC))
    args = ap.parse_args(argv)
    Path(args.out).write_text(build(), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
