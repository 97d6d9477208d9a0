"""The batched capacity search gives every plan the one-plan search's answer (SPEC §7)."""
import pytest

from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.search import SLO, max_sustainable_rate, max_sustainable_rates


@pytest.fixture(scope="module")
def sample():
    cat = default_catalog()
    out = []
    for scen, gpu, prec, tp, n, layout in [("chat", "B200", "FP8", 1, 2, "colocated"),
                                           ("chat", "H100", "FP8", 1, 3, "disaggregated"),
                                           ("coding-agent", "H100", "FP8", 2, 1, "colocated"),
                                           ("offline-batch", "H200", "FP8", 1, 1, "colocated")]:
        s = cat.scenario(scen)
        if layout == "disaggregated":
            kw = dict(mode="disaggregated", prefill_tp=tp, decode_tp=tp, prefill_instances=2, decode_instances=n)
        else:
            kw = dict(tp=tp, instances=n)
        plan = plan_for(s.model, Demand.from_scenario(s), gpu=gpu, precision=prec, **kw)
        out.append((plan, s, SLO(s.ttft_s, s.tpot_s)))
    return out


def test_batched_search_equals_one_plan_search(sample):
    plans = [p for p, _, _ in sample]
    roots = list(range(3, 3 + len(plans)))
    many = max_sustainable_rates(plans, [s for _, s, _ in sample], [slo for _, _, slo in sample], seeds=4,
                                 horizon_s=600.0, seeds_root=roots, bootstrap=500)
    assert len(many) == len(plans) >= 3
    for (plan, s, slo), root, b in zip(sample, roots, many):
        a = max_sustainable_rate(plan, s, slo, seeds=4, horizon_s=600.0, seed=root, bootstrap=500)
        assert a.rate_req_per_s == b.rate_req_per_s > 0
        assert a.probes == b.probes and a.bracket == b.bracket and a.ci95 == b.ci95
        assert (a.per_seed_attainment == b.per_seed_attainment).all()


def test_batched_search_reports_rounds_and_refuses_mismatched_lists(sample):
    plans = [p for p, _, _ in sample[:2]]
    rounds = []
    res = max_sustainable_rates(plans, "chat", SLO(1.0, 0.05), seeds=2, horizon_s=300.0, bootstrap=0,
                                on_round=lambda k, searching, runs: rounds.append((k, searching, runs)))
    assert [r[0] for r in rounds] == list(range(len(rounds)))
    assert rounds[0][1] == 2 and rounds[0][2] == 4         # two plans x two seeds in the first round
    assert max(len(r.probes) for r in res) == len(rounds)
    with pytest.raises(FastsimInputError, match="slos"):
        max_sustainable_rates(plans, "chat", [SLO(1.0, 0.05)] * 3, seeds=2)
    with pytest.raises(FastsimInputError, match="seeds"):
        max_sustainable_rates(plans, "chat", SLO(1.0, 0.05), seeds=0)


def test_groups_bound_the_memory_and_leave_the_answers(sample, monkeypatch):
    import fastsim.search as S
    plans = [p for p, _, _ in sample]
    kw = dict(seeds=2, horizon_s=300.0, bootstrap=0)
    one = max_sustainable_rates(plans, [s for _, s, _ in sample], [slo for _, _, slo in sample], **kw)
    rounds = []
    monkeypatch.setattr(S, "_BATCH_REQUESTS", 1.0)       # every plan a group of its own
    apart = max_sustainable_rates(plans, [s for _, s, _ in sample], [slo for _, _, slo in sample],
                                  on_round=lambda k, searching, runs: rounds.append(searching), **kw)
    assert [r.rate_req_per_s for r in one] == [r.rate_req_per_s for r in apart]
    assert [r.probes for r in one] == [r.probes for r in apart]
    assert set(rounds) == {1}
