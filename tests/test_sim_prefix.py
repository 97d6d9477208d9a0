"""Prefix caching on the Mooncake conversation trace (its hash_ids, 512-token blocks), and synthetic shared prefixes."""
from __future__ import annotations

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.sim import ColocatedPlan, simulate
from fastsim.sim.policy import engine_policy
from fastsim.stepmodel import step_params
from fastsim.workload import read_trace, synthesize

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("FP8"), 1)


@pytest.fixture(scope="module")
def mooncake():
    return read_trace("mooncake-conv")


def unbounded_hit_tokens(wl) -> int:
    """Prompt tokens an unbounded cache could serve, computed here from the raw block lists.

    In arrival order, a request hits its longest run of leading full 512-token blocks seen as full
    blocks of any earlier request, at most P - 1 tokens.
    """
    bt = wl.prefix.block_tokens
    seen = set()
    total = 0
    for i in range(wl.n):
        P = int(wl.prompt_tokens[i])
        ids = wl.prefix.ids[wl.prefix.offsets[i]:wl.prefix.offsets[i + 1]].tolist()
        full = ids[:P // bt]
        h = 0
        while h < len(full) and h < (P - 1) // bt and full[h] in seen:
            h += 1
        total += h * bt
        seen.update(full)
    return total


def _run(wl, caching, routing):
    pol = engine_policy("vllm", prefix_caching=caching)
    return simulate(ColocatedPlan(P8, 4, 512), wl.arrival_s, wl.prompt_tokens, wl.output_tokens,
                    horizon_s=float(np.nextafter(wl.horizon_s, np.inf)), ttft_slo_s=2.0, tpot_slo_s=0.1,
                    policy=pol, routing=routing, prefix=wl.prefix)


@pytest.mark.parametrize("routing", ["least-loaded", "prefix-aware"])
def test_mooncake_prefix_caching_lowers_ttft(mooncake, routing):
    off = _run(mooncake, False, routing).metrics
    on = _run(mooncake, True, routing)
    m = on.metrics
    assert m.ttft_p50_s < off.ttft_p50_s
    assert m.ttft_p90_s < off.ttft_p90_s
    # the hit fraction never exceeds what an unbounded cache could serve on this trace
    bound = unbounded_hit_tokens(mooncake) / float(mooncake.prompt_tokens.sum())
    assert 0.0 < m.cache_hit_fraction <= bound
    assert int(on.cached_tokens.sum()) == m.cached_prompt_tokens
    assert np.all(on.cached_tokens % 512 == 0)
    assert np.all(on.cached_tokens <= np.maximum(on.prompt_tokens - 1, 0))
    # per instance, the hits add up to the total
    assert m.cache_hit_fraction_per_instance.shape == (4,)
    assert np.isnan(off.cache_hit_fraction)


def test_prefix_aware_routing_finds_more_hits(mooncake):
    ll = _run(mooncake, True, "least-loaded").metrics
    pa = _run(mooncake, True, "prefix-aware").metrics
    assert pa.cache_hit_fraction > ll.cache_hit_fraction


def test_library_bound_matches_the_independent_one(mooncake):
    from fastsim.workload import prefix_reuse_bound
    want = unbounded_hit_tokens(mooncake) / float(mooncake.prompt_tokens.sum())
    assert prefix_reuse_bound(mooncake) == pytest.approx(want, rel=1e-12)


def test_shared_system_prompt_is_served_from_cache():
    """A 2,048-token system prompt shared by every request: after the first, each request hits it."""
    chat = CAT.scenario("chat")
    wl = synthesize(chat, 2.0, 60.0, 0, shared_prefix_tokens=2048)
    res = simulate(ColocatedPlan(P8, 1, 512), wl.arrival_s, wl.prompt_tokens, wl.output_tokens, horizon_s=60.0,
                   ttft_slo_s=2.0, tpot_slo_s=0.1, policy="vllm", prefix=wl.prefix)
    admitted = res.status != 2
    # the first request computes the system prompt; every later admitted one takes all 2,048 tokens
    assert res.cached_tokens[0] == 0
    later = np.flatnonzero(admitted)[1:]
    assert np.all(res.cached_tokens[later] >= 2048)
