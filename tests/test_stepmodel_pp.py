"""Pipeline parallelism in the step model and the ledger: stage partitions, stage vectors, the
stage send, the instance's KV budget, the analytic round, and TP8 x PP2 against TP16."""
from __future__ import annotations

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.ledger import ledger_table, pipeline_round_s
from fastsim.stepmodel import (N_PARAMS, P_ALPHA, P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_MATMUL, P_N_AR,
                               P_OVERHEAD, P_P2P_LAT, P_P2P_S_PER_TOKEN, P_PP, P_QDIM_DEC, P_WDENSE,
                               StepConstants, decode_attn_flops, pipeline_round_params, stage_layers, stage_params,
                               step_params, step_time)

CAT = default_catalog()
M405, M70 = CAT.model("llama-3.1-405b"), CAT.model("llama-3.1-70b")
H100, FP8, BF16 = CAT.gpu("H100"), CAT.precision("FP8"), CAT.precision("BF16")


@pytest.mark.parametrize("layers, pp, want", [
    (126, 2, (63, 63)), (61, 2, (31, 30)), (61, 4, (15, 15, 16, 15)), (80, 3, (27, 27, 26)), (5, 5, (1,) * 5),
    (7, 3, (2, 3, 2)), (43, 10, (4, 4, 4, 4, 4, 4, 5, 5, 5, 4)),
])
def test_stage_layers_are_vllms_partition(layers, pp, want):
    # vllm/distributed/utils.py get_pp_indices: layers // pp each, the remainder to the stages before
    # the last, from the second-to-last backwards
    assert stage_layers(layers, pp) == want


@pytest.mark.parametrize("pp", [0, -1, 127, 2.0, True])
def test_stage_layers_refuses_a_stage_without_layers(pp):
    with pytest.raises(FastsimInputError, match="pp"):
        stage_layers(126, pp)


def test_stages_add_up_to_the_whole_model():
    whole = step_params(M405, H100, FP8, 8)
    S = stage_params(M405, H100, FP8, 8, pp=4)
    assert S.shape == (4, N_PARAMS)
    assert tuple(S[:, P_LAYERS]) == stage_layers(126, 4) == (31, 32, 32, 31)
    for col in (P_MATMUL, P_WDENSE, P_KVPG, P_N_AR):
        assert S[:, col].sum() == pytest.approx(whole[col], rel=1e-12)
    assert (S[:, P_PP] == 4).all()
    # only the last stage holds the LM head: the first and last have 31 layers each
    assert S[3, P_MATMUL] - S[0, P_MATMUL] == pytest.approx(M405.vocab * M405.hidden + M405.hidden, rel=1e-9)
    # step_params(pp=...) is the slowest stage: the most matmul parameters per token
    assert np.array_equal(step_params(M405, H100, FP8, 8, pp=4), S[1])


def test_the_stage_send_crosses_the_node_boundary_at_the_network_bandwidth():
    c = StepConstants()
    S = stage_params(M405, H100, FP8, 8, pp=2)          # 16 GPUs: stage 0 on node 0, stage 1 on node 1
    # vLLM sends hidden_states and residual (2 tensors of hidden BF16 values per token), split over TP
    assert S[0, P_P2P_S_PER_TOKEN] == 2 * 16384 * 2.0 / 8 / (c.eta_nvlink * H100.network_bw_bytes_per_s)
    assert S[0, P_P2P_LAT] == c.alpha_s
    assert S[1, P_P2P_LAT] == 0.0 and S[1, P_P2P_S_PER_TOKEN] == 0.0          # the last stage sends nothing
    S70 = stage_params(M70, H100, FP8, 4, pp=2)          # 8 GPUs: one node, NVLink
    assert S70[0, P_P2P_S_PER_TOKEN] == 2 * 8192 * 2.0 / 4 / (c.eta_nvlink * H100.nvlink_bw_bytes_per_s)
    t0 = step_time(S[0], 100.0, 0.0, 0.0, 100.0)
    t_nosend = step_time(np.where(np.arange(N_PARAMS) == P_P2P_S_PER_TOKEN, 0.0, S[0]), 100.0, 0.0, 0.0, 100.0)
    assert t0 - t_nosend == pytest.approx(100.0 * S[0, P_P2P_S_PER_TOKEN], rel=1e-9)


def test_a_stage_tp_group_stays_in_a_node():
    with pytest.raises(FastsimInputError, match="tp"):
        stage_params(M405, H100, FP8, 16, pp=2)


def test_the_instance_kv_budget_is_the_smallest_stage_budget():
    # SPEC §3's rule per stage: (TP x 0.9 x HBM - the stage's weights) / (TP x its layers' KV per token per GPU)
    S = stage_params(M405, H100, FP8, 8, pp=2)
    m = M405
    kvpg = 2.0 * 63 * 1 * m.head_dim * 1.0              # 8 KV heads over TP8: 1 per GPU, FP8 KV
    assert S[0, P_KVPG] == kvpg
    layers = 63 * m.layer_params
    first = (8 * 0.9 * H100.hbm_bytes - (layers + m.vocab * m.hidden) * 1.0) / (8 * kvpg)
    last = (8 * 0.9 * H100.hbm_bytes - (layers + m.vocab * m.hidden + m.hidden) * 1.0) / (8 * kvpg)
    assert S[0, P_KV_BUDGET_TOKENS] == S[1, P_KV_BUDGET_TOKENS] == pytest.approx(min(first, last), rel=1e-12)
    # twice TP16's: TP16 replicates the 8 KV heads, each stage holds half the layers
    assert S[0, P_KV_BUDGET_TOKENS] / step_params(M405, H100, FP8, 16)[P_KV_BUDGET_TOKENS] == pytest.approx(2.0, rel=2e-3)


@pytest.mark.parametrize("pp, b", [(2, 64.0), (4, 256.0), (3, 30.0)])
def test_the_analytic_round_is_pp_stage_steps_of_a_micro_batch(pp, b):
    # a dense stage's terms are linear in the micro-batch: S x stage(b / S) == round(b)
    p = step_params(M70, H100, BF16, 2, pp=pp)
    q = pipeline_round_params(p)
    ctx = 3000.0
    kv = b * ctx
    attn = decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], kv)
    want = pp * step_time(p, b / pp, kv / pp, attn / pp, b / pp)
    assert float(step_time(q, b, kv, attn, b)) == pytest.approx(float(want), rel=1e-12)
    assert q[P_OVERHEAD] == pp * p[P_OVERHEAD] and q[P_ALPHA] == pp * p[P_ALPHA]
    one = step_params(M70, H100, BF16, 2)
    assert np.array_equal(pipeline_round_params(one), one)                 # no PP: unchanged


def test_ledger_tp8_pp2_against_tp16_term_by_term():
    """Llama-3.1-405B FP8 on 16 H100 (2 nodes of 8), 64 sequences of 4,096 tokens.

    TP16 spans the nodes, so its 252 all-reduces per step run at the 50 GB/s network per GPU;
    TP8 x PP2 keeps each all-reduce inside a node (NVLink) and sends one 2 x hidden activation per
    token across the boundary. The weight read per GPU is the same (1/16 of the weights); TP16
    replicates the 8 KV heads on 16 GPUs (each reads a whole head per token), PP2 splits the layers.
    """
    c = StepConstants()
    tp16 = ledger_table(M405, H100, FP8, 16, batch=64, context_tokens=4096)
    pp2 = ledger_table(M405, H100, FP8, 8, batch=64, context_tokens=4096, pp=2)
    assert list(pp2["stage"]) == [0, 1] and list(pp2["pp"]) == [2, 2]
    h, b = 16384, 64
    ar16 = 2 * 126 * (2 * 15 * c.alpha_s + 2 * 15 / 16 * b * h * 2.0 / (c.eta_nvlink * H100.network_bw_bytes_per_s))
    assert tp16["allreduce_s"].iloc[0] == pytest.approx(ar16, rel=1e-12)
    ar8 = 2 * 63 * (2 * 7 * c.alpha_s + 2 * 7 / 8 * 32 * h * 2.0 / (c.eta_nvlink * H100.nvlink_bw_bytes_per_s))
    assert pp2["allreduce_s"].iloc[0] == pytest.approx(ar8, rel=1e-12)
    assert pp2["p2p_s"].iloc[0] == pytest.approx(c.alpha_s + 32 * 2 * h * 2.0 / 8 / (c.eta_nvlink * 50e9), rel=1e-12)
    # per GPU each reads a 16th of the weights (the last stage also its LM head)
    assert pp2["weight_read_s"].sum() == pytest.approx(2 * tp16["weight_read_s"].iloc[0], rel=2e-2)
    r16, r2 = pipeline_round_s(tp16).iloc[0], pipeline_round_s(pp2).iloc[0]
    assert r2.round_s == pytest.approx(2 * pp2["step_s"].max(), rel=1e-12)
    assert r2.tokens_per_s_per_gpu > 1.5 * r16.tokens_per_s_per_gpu         # 161.6 against 98.4
    # a lone sequence: PP crosses two stages one after the other, TP16 pays its network all-reduces
    lone16 = pipeline_round_s(ledger_table(M405, H100, FP8, 16, batch=1)).iloc[0]
    lone2 = pipeline_round_s(ledger_table(M405, H100, FP8, 8, batch=1, pp=2)).iloc[0]
    assert lone2.round_s == lone2.latency_s and lone2.round_s > lone16.round_s


def test_ledger_pp_one_is_the_plain_ledger():
    a = ledger_table(M70, H100, BF16, 8, batch=[1, 8], prefill_tokens=[0, 512])
    b = ledger_table(M70, H100, BF16, 8, batch=[1, 8], prefill_tokens=[0, 512], pp=1)
    assert a.equals(b) and (a["p2p_s"] == 0).all() and (a["stage"] == 0).all()


def test_sliding_window_stages_keep_whole_sliding_layers():
    from fastsim.stepmodel import P_SLIDE_FRAC, pp_refusal
    m = CAT.model("gpt-oss-20b")                        # 24 layers, 12 sliding
    S = stage_params(m, CAT.gpu("B200"), CAT.precision("MXFP4"), 1, pp=4)
    assert (S[:, P_SLIDE_FRAC] * S[:, P_LAYERS] == 3).all()
    why = pp_refusal(m, H100, 1, 5)                     # 24 layers in 5 stages: 4, 5, 5, 5, 5
    assert "stages of 4 and 5 layers" in why and why.endswith("pipeline stages that can: 1, 2, 3, 4, 6, 12")
    with pytest.raises(FastsimInputError, match="pp"):
        stage_params(m, CAT.gpu("B200"), CAT.precision("MXFP4"), 1, pp=5)
    assert "spans nodes" in pp_refusal(M405, H100, 16, 2) and pp_refusal(M405, H100, 8, 2) is None
