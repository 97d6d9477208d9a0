"""The token ledger and the optimization ladder (SPEC section 4; lecture section 1, script 01).

Read it in this order (each module holds one part; this face re-exports every name):

* :mod:`fastsim.formulas` -- the closed forms the ledger prices with: tokens per speculative round,
  joules per token, cost per million output tokens, the M/D/1 wait;
* :mod:`fastsim.ledger_step` -- one step broken into its parts: :func:`ledger`, :func:`ledger_table`,
  :func:`memory_per_gpu`, the weight-read bound (:func:`min_tp_for_tpot`), :func:`plot_ledger`;
* :mod:`fastsim.ledger_spec` -- one speculative-decoding round: :func:`speculative_step`;
* :mod:`fastsim.ledger_ladder` -- the ladder of levels 0-5 built from the two: :func:`ladder`.

One forward pass of a tensor-parallel instance is broken into the parts a token pays for::

    weight read    matmul params x weight bytes / TP / (eta_bw x HBM bytes/s)
    KV read        kv_tokens x KV bytes per token per GPU / (eta_bw x HBM bytes/s)
    compute        (2 x matmul params x n_tokens + attention FLOPs) / TP / (eta_compute x peak)
    all-reduce     2 per layer, ring all-reduce of n_tokens x hidden x 2 bytes (alpha-beta)
    kernel launch  layers x kernels per layer x launch time
    host           sequences of the step x overhead_per_seq_s (step model v2; 0 under SPEC §3)
    step           max(weight read + KV read, compute) + all-reduce + kernel launch + host
                   (under step_form "classes": max(weight read, GEMM) + max(KV read, attention) + ...)

(and, when an arrival rate is given, an M/D/1 queueing wait with the step as the server; a MoE
model adds its all-to-all, a pipeline stage its send to the next stage).

The first four parts come from :func:`fastsim.stepmodel.step_parts` (SPEC §3). The ledger differs
from the planner's step in one place only: the planner adds a fixed 1 ms per step (CUDA graphs
assumed), the ledger counts kernel launches instead (27 kernels per layer unfused, 12 fused;
4 us per launch eager, 1 us under CUDA graphs; the counts are the lecture's, measured with
CUDA-graph capture in its lecture 12).

How close fastsim comes to the lecture's printed figures (Llama-3.1-70B, 8 x H100, TP8, BF16,
context 4096); the first five are exact to the printed digits, all-reduce is not (see below):

=============================  =========  ==========  ===========================================
figure                         lecture    fastsim     why it differs
=============================  =========  ==========  ===========================================
weight read                    6.48 ms    6.483 ms    same formula
KV read, batch 1 / 64          0.06/4.01  0.063/4.006 same formula
compute, batch 1 / 64          0.03/2.02  0.031/2.019 same formula
2,048-token prefill compute    61.13 ms   61.13 ms    same formula
eager launch (80 x 27 x 4 us)  8.64 ms    8.64 ms     same count
all-reduce batch 1             0.98 ms    0.975 ms    alpha, eta fitted to it (SPEC §3)
all-reduce batch 64            2.08 ms    1.731 ms    the lecture's three all-reduce figures are
                                                      not on one alpha-beta line; fastsim fits
                                                      the batch-1 and prefill ones
all-reduce 2,048-token prefill 25.36 ms   25.53 ms    same fit, +0.7%
step, batch 1 fused + graphs   8.48 ms    8.48 ms     exact
step, batch 64                 13.53 ms   13.18 ms    -2.6%: the 0.35 ms all-reduce gap above
=============================  =========  ==========  ===========================================

The ladder's figures are compared in the docstring of :func:`ladder`.
"""
from __future__ import annotations

from .formulas import joules_per_token, md1_mean_wait_s, speculative_tokens_per_round
from .ledger_ladder import ladder, ladder_draft
from .ledger_spec import SpeculativeResult, speculative_step
from .ledger_step import (BINDING, KERNELS_PER_LAYER_EAGER, KERNELS_PER_LAYER_FUSED, LAUNCH_S_EAGER, LAUNCH_S_GRAPHS,
                          LedgerResult, cost_usd_per_million_output_tokens, ledger, ledger_table, memory_per_gpu, pipeline_round_s,
                          min_tp_for_tpot, plot_ledger, weight_read_lower_bound_s)

__all__ = [
    "LedgerResult", "SpeculativeResult", "ledger", "ledger_table", "pipeline_round_s", "speculative_step", "ladder", "ladder_draft",
    "memory_per_gpu",
    "speculative_tokens_per_round", "joules_per_token", "cost_usd_per_million_output_tokens",
    "weight_read_lower_bound_s", "min_tp_for_tpot", "md1_mean_wait_s", "plot_ledger",
    "KERNELS_PER_LAYER_EAGER", "KERNELS_PER_LAYER_FUSED", "LAUNCH_S_EAGER", "LAUNCH_S_GRAPHS",
    "BINDING",
]

