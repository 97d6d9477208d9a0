"""Launch commands of a plan for a real engine: ``fastsim plan --emit vllm|sglang``.

:func:`launch_commands` turns a :class:`fastsim.analytic.Plan` into the command line of every
instance role of the plan (colocated, or prefill and decode), written with the engine's own flag
names, plus the router in front of the instances. Nothing is guessed silently: what an engine
cannot run as planned (a precision the checkpoint is not in and the engine cannot quantize to, an
MTP head the checkpoint does not have, an instance whose GPUs do not split evenly over nodes) is
refused with a :class:`fastsim.errors.FastsimInputError` naming ``--emit`` and the plan.

What each figure of the plan becomes
------------------------------------
========================== ===================================== ======================================
plan                       vLLM (``vllm serve``)                 SGLang (``python -m sglang.launch_server``)
========================== ===================================== ======================================
checkpoint                 positional model tag                  ``--model-path``
GPUs per instance, ``tp``  ``--tensor-parallel-size G``          ``--tp-size G``
layout ``tp+ep``           ``+ --enable-expert-parallel``        ``+ --ep-size G``
layout ``dp+ep``           ``--tensor-parallel-size 1``          ``--tp-size G --dp-size G``
                           ``--data-parallel-size G``            ``--enable-dp-attention --ep-size G``
                           ``--enable-expert-parallel``
decode batch ``b``         ``--max-num-seqs ceil(b / dp)``       ``--max-running-requests b``
chunk ``c`` (colocated)    ``--enable-chunked-prefill``          ``--chunked-prefill-size c``
                           ``--max-num-batched-tokens``
                           ``ceil((b (gamma + 1) + c) / dp)``
FP8 weights                ``--quantization fp8``                ``--quantization fp8``
                           (BF16 checkpoint; an FP8 checkpoint   (same rule)
                           carries its own)
KV of 1 byte (FP8, FP4)    ``--kv-cache-dtype fp8``              ``--kv-cache-dtype fp8_e4m3``
memory_utilization (0.9)   ``--gpu-memory-utilization``          ``--mem-fraction-static``
model context (capped by   ``--max-model-len`` (whole 16-token   ``--context-length`` (at most the
the instance's KV tokens)  blocks, less the null block)          KV pool)
draft model, gamma         ``--speculative-config`` JSON:        ``--speculative-algorithm STANDALONE``
                           ``method draft_model``, ``model``,    ``--speculative-draft-model-path``
                           ``num_speculative_tokens gamma``      ``--speculative-num-steps gamma``
                                                                 ``--speculative-eagle-topk 1``
                                                                 ``--speculative-num-draft-tokens``
                                                                 ``gamma + 1``
MTP head (DeepSeek-V3/R1)  ``method mtp``                        ``--speculative-algorithm EAGLE``
instance over N nodes      ``--nnodes N --node-rank r``          ``--nnodes N --node-rank r``
                           ``--master-addr`` (``--headless`` on  ``--dist-init-addr``
                           r > 0); dp+ep: ``--data-parallel-*``
pipeline stages ``pp``     ``--pipeline-parallel-size P``;       ``--pp-size P``; over N nodes
                           over N nodes a Ray cluster: node 0    ``--nnodes N --node-rank r``
                           ``ray start --head --port=6379``,     ``--dist-init-addr`` on every node
                           the others ``ray start``              (``P`` a multiple of ``N``)
                           ``--address=HEAD:6379 --block``, then
                           ``vllm serve`` on node 0 with
                           ``--distributed-executor-backend ray``
prefill / decode roles     ``--kv-transfer-config`` JSON:        ``--disaggregation-mode prefill|decode``
                           ``kv_connector NixlConnector``,       ``--disaggregation-transfer-backend``
                           ``kv_role kv_producer|kv_consumer``   ``mooncake``
router                     an HTTP load balancer (vLLM ships     ``python -m sglang_router.launch_router``
                           none for separate instances)          ``--policy cache_aware``;
                                                                 ``--pd-disaggregation --prefill URL PORT``
                                                                 ``--decode URL``
========================== ===================================== ======================================

Every command is checked against the engine's start-up rules (:mod:`fastsim.engine_rules`, each
citing the engine's source): vLLM's KV block count behind ``--max-model-len``
(``check_enough_kv_cache_memory``) and its budget against the sequence cap
(``SchedulerConfig.verify_max_model_len``: a decode instance whose batch exceeds vLLM's default
budget gets ``--max-num-batched-tokens`` of its decodes); SGLang's context against the model and
its KV pool, and its chunk against the page size. A precision of BF16 weights with a 1-byte KV
cache (a catalog entry with ``weight_bytes = 2``, ``kv_bytes = 1``) serves the BF16 checkpoint
with ``--kv-cache-dtype``.

Why the token budgets differ: vLLM's ``max_num_batched_tokens`` is one budget per step shared by
the running decodes (``gamma + 1`` tokens each with speculative decoding) and the prefill chunk,
so the plan's step of ``b`` decodes plus a chunk of ``c`` prompt tokens needs ``b (gamma + 1) + c``;
SGLang's ``chunked_prefill_size`` counts the prompt tokens of a prefill step only (its default
scheduler runs prefill and decode steps apart), so it is ``c``. Under the ``dp+ep`` layout every
data-parallel rank of vLLM is an engine with its own scheduler (the plan's instance-wide batch and
budget are split over the ``dp`` ranks), while SGLang divides ``--max-running-requests`` and
``--chunked-prefill-size`` over its DP-attention ranks itself.

Sources (flag names as the engines define them; no engine code is used):

* vLLM ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``): ``--tensor-parallel-size``,
  ``--data-parallel-size``, ``--data-parallel-size-local``, ``--data-parallel-start-rank``,
  ``--data-parallel-address``, ``--data-parallel-rpc-port``, ``--enable-expert-parallel``,
  ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--pipeline-parallel-size``,
  ``--distributed-executor-backend`` (``ray``), ``--gpu-memory-utilization``,
  ``--kv-cache-dtype``, ``--max-model-len``, ``--quantization``, ``--max-num-seqs``,
  ``--max-num-batched-tokens``, ``--enable-chunked-prefill``, ``--speculative-config``,
  ``--kv-transfer-config``; ``vllm/config/speculative.py`` (``SpeculativeConfig``: ``method``
  ``draft_model`` / ``mtp``, ``model``, ``num_speculative_tokens``, ``quantization``);
  ``vllm/config/kv_transfer.py`` (``KVTransferConfig``: ``kv_connector``, ``kv_role``
  ``kv_producer`` / ``kv_consumer``); ``vllm/config/parallel.py`` (``nnodes``, ``node_rank``,
  ``master_addr`` for multi-node multiprocessing; ``enable_expert_parallel``); ``vllm serve
  --headless`` on the nodes other than the head (vLLM's multi-node and data-parallel deployment
  documentation). A pipelined instance over several nodes runs on a Ray cluster as vLLM's
  ``docs/serving/parallelism_scaling.md`` ("Multi-node deployment", "Running vLLM on a Ray
  cluster": tensor parallelism the GPUs of a node, pipeline parallelism the nodes, ``vllm serve``
  on one node with ``--distributed-executor-backend ray``) and
  ``examples/online_serving/multi-node-serving.sh`` (its ``leader``: ``ray start --head
  --port=6379``; its ``worker``: ``ray start --address=HEAD:6379 --block``) start it.
* SGLang ``python/sglang/srt/server_args.py`` (``ServerArgs``; a field ``x_y`` is the flag
  ``--x-y``): ``model_path``, ``tp_size``, ``dp_size``, ``enable_dp_attention``, ``ep_size``,
  ``nnodes``, ``node_rank``, ``dist_init_addr``, ``context_length``, ``quantization``,
  ``kv_cache_dtype`` (choices ``fp8_e4m3``, ``fp8_e5m2``, ...), ``mem_fraction_static``,
  ``max_running_requests``, ``chunked_prefill_size``, ``speculative_algorithm`` (``STANDALONE``,
  ``EAGLE``, ...), ``speculative_draft_model_path``, ``speculative_draft_model_quantization``,
  ``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``,
  ``disaggregation_mode``, ``disaggregation_transfer_backend``, ``disaggregation_bootstrap_port``.
* SGLang ``python/sglang/srt/entrypoints/engine.py`` (``_launch_subprocesses``): over ``nnodes``
  nodes each node runs ``pp_size // nnodes`` pipeline ranks of the whole ``tp_size`` group (when
  ``nnodes <= pp_size``), so a pipelined instance over N nodes needs ``pp`` a multiple of N.
* SGLang router ``sgl-model-gateway/bindings/python/src/sglang_router/router_args.py``
  (``RouterArgs.add_cli_args``): ``--worker-urls``, ``--policy`` (``cache_aware``, ...),
  ``--pd-disaggregation``, ``--prefill URL [BOOTSTRAP_PORT]``, ``--decode URL``, ``--host``,
  ``--port``.
"""
from __future__ import annotations

import json
import math
import os
import shlex
from typing import TYPE_CHECKING

from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError

if TYPE_CHECKING:                      # fastsim.stepmodel loads numba: imported only when called
    from .stepmodel import StepConstants

__all__ = ["ENGINES", "HF_CHECKPOINTS", "launch_commands", "format_launch"]

#: Engines :func:`launch_commands` writes commands for.
ENGINES = ("vllm", "sglang")

#: Checkpoint served for each built-in catalog model: ``(Hugging Face repo id, weight format)``.
#: The catalog's ``source`` names the config each model's figures come from; the instruction-tuned
#: release of the same architecture is what one serves. The weight format says what the
#: checkpoint holds: BF16 (quantized online to FP8 by ``--quantization fp8``), FP8 (DeepSeek-V3 and
#: R1 ship block-quantized FP8 weights) or MXFP4 (gpt-oss ships its experts in MXFP4).
HF_CHECKPOINTS = {
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "BF16"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "BF16"),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B-Instruct", "BF16"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "FP8"),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", "FP8"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", "BF16"),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "BF16"),
    "qwen3-32b": ("Qwen/Qwen3-32B", "BF16"),
    "gpt-oss-120b": ("openai/gpt-oss-120b", "MXFP4"),
    "gpt-oss-20b": ("openai/gpt-oss-20b", "MXFP4"),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1", "BF16"),
    "mistral-7b": ("mistralai/Mistral-7B-Instruct-v0.1", "BF16"),   # v0.1: the 4,096-token window modelled
}

#: Catalog models whose checkpoint carries a multi-token-prediction layer (``num_nextn_predict_layers``).
MTP_MODELS = frozenset({"deepseek-v3", "deepseek-r1"})

#: Ports and addresses written into the commands (the engines' defaults where they have one).
VLLM_PORT = 8000                 # vllm serve --port default
VLLM_DP_RPC_PORT = 13345         # --data-parallel-rpc-port of a multi-node data-parallel instance
SGLANG_PORT = 30000              # sglang.launch_server --port default
SGLANG_BOOTSTRAP_PORT = 8998     # --disaggregation-bootstrap-port default
SGLANG_DIST_PORT = 20000         # port of --dist-init-addr
ROUTER_PORT = 8000               # the SGLang router's --port (its default 30000 is a worker's)
VLLM_KV_CONNECTOR = "NixlConnector"
SGLANG_TRANSFER_BACKEND = "mooncake"   # SGLang's default --disaggregation-transfer-backend
HEAD_ADDR = "<head-node-ip>"           # placeholder: the address of an instance's first node
RAY_PORT = 6379                        # ray start --head --port of vLLM's multi-node-serving.sh

_KV_FP8 = {"vllm": "fp8", "sglang": "fp8_e4m3"}


def _plan_label(plan) -> str:
    if plan.mode == "disaggregated":
        shape = f"P:{plan.label(plan.prefill_tp)} x{plan.prefill_instances} D:{plan.label(plan.decode_tp)} x{plan.decode_instances}"
    else:
        shape = f"{plan.label(plan.tp)} x{plan.instances}"
    spec = f" spec gamma {plan.spec_gamma}" if plan.spec_gamma else ""
    return f"{plan.gpu} {plan.precision} {plan.mode} {shape}{spec}"


def _refuse(engine, plan, why):
    return FastsimInputError("--emit", f"{engine} for plan {_plan_label(plan)}", why)


def _resolve_model(plan, catalog: Catalog, model) -> Model:
    if isinstance(model, Model):
        return model
    return catalog.model(model if model is not None else plan.model)


def _checkpoint(m: Model, override: str | None):
    """``(checkpoint to serve, weight format or None when unknown)``."""
    if override:
        return str(override), None
    key = m.name.lower()
    if key in HF_CHECKPOINTS:
        return HF_CHECKPOINTS[key]
    prefix = "config.json at "
    if m.source.startswith(prefix):          # a config.json read by path: serve its directory
        return os.path.dirname(m.source[len(prefix):]), None
    return None, None


#: Bytes per weight of each weight format an engine loads (the catalog's precisions).
_WEIGHT_FORMATS = {"BF16": 2.0, "FP8": 1.0, "NVFP4": 0.5625, "MXFP4": 0.53125}


def _weights_of(engine, plan, precision) -> str:
    """The weight format of a precision: its name, or the format of its bytes per weight.

    A catalog precision that pairs BF16 weights with an FP8 KV cache (``weight_bytes = 2``,
    ``kv_bytes = 1``) serves BF16 weights; its KV cache becomes ``--kv-cache-dtype``.
    """
    name = precision.name.upper()
    if name in _WEIGHT_FORMATS:
        return name
    for fmt, b in _WEIGHT_FORMATS.items():
        if float(precision.weight_bytes) == b:
            return fmt
    raise _refuse(engine, plan, f"weights in {', '.join(_WEIGHT_FORMATS)} (precision {precision.name} has "
                                f"{precision.weight_bytes:g} bytes per weight)")


def _quantization(engine, plan, precision, weight_format, who):
    """The ``--quantization`` value (None: none needed) for weights of ``precision``."""
    p = precision.upper()
    if weight_format is None:                   # a checkpoint fastsim does not know
        return "fp8" if p == "FP8" else None
    if p == weight_format:
        return None                             # BF16 as is; FP8 / MXFP4 checkpoints carry their own config
    if p == "FP8" and weight_format == "BF16":
        return "fp8"                            # online FP8 quantization of a BF16 checkpoint
    raise _refuse(engine, plan, f"a checkpoint with {p} weights: {who} ships {weight_format} weights, which "
                                f"{engine} does not convert to {p}; give a {p} checkpoint "
                                f"(launch_commands(checkpoint=...))")


def _instance_args(engine, plan, *, role, gpus, batch, chunk, model, ckpt, wfmt, precision, gpu,
                   constants, spec_ckpt, spec_wfmt, pp=1):
    """argv (without multi-node flags) and notes of one instance of a role (``gpus`` per pipeline stage)."""
    layout = plan.layout
    dp = gpus if layout == "dp+ep" else 1
    gamma = int(plan.spec_gamma or 0)
    notes = []
    wname = _weights_of(engine, plan, precision)
    quant = _quantization(engine, plan, wname, wfmt, ckpt)
    if precision.kv_bytes == 1:
        kv = _KV_FP8[engine]
    elif precision.kv_bytes == 2:
        kv = None
    else:
        raise _refuse(engine, plan, f"a KV cache of 1 or 2 bytes per element (precision {precision.name} "
                                    f"has {precision.kv_bytes:g})")
    if kv and wname == "BF16":
        notes.append(f"BF16 weights with an FP8 KV cache: the checkpoint is served as it is, --kv-cache-dtype {kv} "
                     "stores its KV cache in FP8")
    mem = f"{constants.memory_utilization:g}"
    # the context an instance can hold, counted as the engine counts it (fastsim.engine_rules): vLLM refuses
    # to start when the blocks of one sequence of --max-model-len do not fit the KV blocks it can allocate
    # (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory); SGLang refuses every request past its
    # KV pool (tp_worker.py max_req_input_len)
    from . import engine_rules as R
    from .stepmodel import kv_budget_tokens
    lk = plan.layout_kwargs(gpus)
    if pp > 1:
        # every stage holds its layers' KV of every sequence: the instance's budget is the smallest stage's
        from .stepmodel import P_KV_BUDGET_TOKENS, stage_params
        kv_tokens = int(stage_params(model, gpu, precision, gpus, constants, pp=pp, **lk)[0, P_KV_BUDGET_TOKENS])
    else:
        kv_tokens = int(kv_budget_tokens(model, precision, gpu, gpus, constants, **lk))
    rank_kv = kv_tokens // dp if dp > 1 else kv_tokens          # every data-parallel rank has its own cache
    if kv_tokens < 1:
        raise _refuse(engine, plan, f"an instance whose KV cache holds a sequence ({role} on {gpus * pp} x {gpu.name} "
                                    f"{precision.name} has no room after the weights)")
    fit = R.vllm_max_model_len(rank_kv) if engine == "vllm" else R.sglang_context_length(rank_kv)
    if fit < 1:
        why = (R.vllm_refusal(kv_tokens=rank_kv, max_model_len=1) if engine == "vllm"
               else R.sglang_refusal(kv_tokens=rank_kv))
        raise _refuse(engine, plan, f"an instance whose KV cache holds a sequence ({role} on {gpus} x {gpu.name} "
                                    f"{precision.name}: {why})")
    ctx = min(int(model.max_context_tokens), fit)
    if ctx < model.max_context_tokens:
        blocks = (f" ({ctx // R.VLLM_BLOCK_SIZE:,} blocks of {R.VLLM_BLOCK_SIZE} tokens, the null block left out: vLLM "
                  "refuses to start when the blocks of one --max-model-len sequence exceed those it can allocate, "
                  "check_enough_kv_cache_memory)" if engine == "vllm" else "")
        notes.append(f"max model length {ctx:,} tokens{blocks}, not the model's {model.max_context_tokens:,}: one "
                     f"sequence must fit the instance's KV cache ({kv_tokens:,} tokens"
                     + (f", {dp} data-parallel ranks" if dp > 1 else "") + "); longer requests are refused")
    if engine == "vllm":
        a = ["vllm", "serve", ckpt, "--host", "0.0.0.0", "--port", str(VLLM_PORT)]
        if layout == "dp+ep":
            a += ["--tensor-parallel-size", "1", "--data-parallel-size", str(gpus), "--enable-expert-parallel"]
        else:
            a += ["--tensor-parallel-size", str(gpus)]
            if layout == "tp+ep":
                a += ["--enable-expert-parallel"]
        if pp > 1:
            a += ["--pipeline-parallel-size", str(pp)]
        a += ["--max-model-len", str(ctx), "--gpu-memory-utilization", mem]
        if quant:
            a += ["--quantization", quant]
        if kv:
            a += ["--kv-cache-dtype", kv]
        seqs = budget = None
        if batch:
            seqs = math.ceil(batch / dp)
            a += ["--max-num-seqs", str(seqs)]
        if chunk:
            budget = math.ceil((batch * (gamma + 1) + chunk) / dp)
            a += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(budget)]
            notes.append(f"token budget {budget} = ({batch} decodes x {gamma + 1} token{'s' if gamma else ''} + a {chunk}-token "
                         f"prefill chunk){f' / {dp} data-parallel ranks' if dp > 1 else ''}: vLLM's budget is "
                         "shared by decodes and prefill chunks")
        elif seqs:
            from .sim.policy import policy_defaults
            default = policy_defaults("vllm", gpu.hbm_bytes).max_num_batched_tokens
            if seqs > default:
                # vLLM's default budget is below the sequence cap: it would refuse to start
                # (SchedulerConfig.verify_max_model_len), so the budget the decodes need is written
                budget = seqs * (gamma + 1)
                a += ["--max-num-batched-tokens", str(budget)]
                notes.append(f"token budget {budget} = {seqs} decodes x {gamma + 1} token{'s' if gamma else ''}: "
                             f"vLLM's default ({default}) is below --max-num-seqs {seqs}, which vLLM refuses")
        why = R.vllm_refusal(max_num_seqs=seqs, max_num_batched_tokens=budget, max_model_len=ctx,
                             enable_chunked_prefill=True, kv_tokens=rank_kv, kv_cache_dtype=kv or "auto")
        if gamma:
            if plan.spec_draft == "mtp":
                cfg = {"method": "mtp", "num_speculative_tokens": gamma}
            else:
                cfg = {"method": "draft_model", "model": spec_ckpt, "num_speculative_tokens": gamma}
                dq = _quantization(engine, plan, wname, spec_wfmt, spec_ckpt)
                if dq:
                    cfg["quantization"] = dq
            a += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        if role in ("prefill", "decode"):
            kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
            a += ["--kv-transfer-config",
                  json.dumps({"kv_connector": VLLM_KV_CONNECTOR, "kv_role": kv_role}, separators=(",", ":"))]
    else:
        a = ["python", "-m", "sglang.launch_server", "--model-path", ckpt, "--host", "0.0.0.0",
             "--port", str(SGLANG_PORT), "--tp-size", str(gpus)]
        if pp > 1:
            a += ["--pp-size", str(pp)]
        if layout == "dp+ep":
            a += ["--dp-size", str(gpus), "--enable-dp-attention", "--ep-size", str(gpus)]
        elif layout == "tp+ep":
            a += ["--ep-size", str(gpus)]
        a += ["--context-length", str(ctx), "--mem-fraction-static", mem]
        if quant:
            a += ["--quantization", quant]
        if kv:
            a += ["--kv-cache-dtype", kv]
        if batch:
            a += ["--max-running-requests", str(batch)]
        if chunk:
            a += ["--chunked-prefill-size", str(chunk)]
            notes.append("SGLang runs prefill and decode steps apart by default (fastsim --policy sglang "
                         + ("simulates it without pipeline parallelism" if pp > 1 else "simulates it")
                         + "); the analytic plan puts the chunk on top of the decodes")
        why = R.sglang_refusal(max_running_requests=batch or None, chunked_prefill_size=chunk or None,
                               context_length=ctx, model_context_length=int(model.max_context_tokens),
                               kv_tokens=rank_kv, kv_cache_dtype=kv or "auto")
        if gamma:
            if plan.spec_draft == "mtp":
                a += ["--speculative-algorithm", "EAGLE"]
            else:
                a += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", spec_ckpt]
                dq = _quantization(engine, plan, wname, spec_wfmt, spec_ckpt)
                if dq:
                    a += ["--speculative-draft-model-quantization", dq]
            a += ["--speculative-num-steps", str(gamma), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(gamma + 1)]
        if role in ("prefill", "decode"):
            a += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND]
            if role == "prefill":
                a += ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT)]
    if why is not None:                  # a rule the values above were sized to keep: a defect if it fires
        raise _refuse(engine, plan, f"settings {engine} starts with ({role}): {why}")
    if pp > 1 and batch:
        notes.append(f"{pp} pipeline stages of TP{gpus}: the plan's batch of {batch} running requests is spread over "
                     f"the {pp} micro-batches in flight (about {math.ceil(batch / pp)} each); the cap counts them all")
    if not batch:
        notes.append("the plan sizes no decode batch for this role: the engine's default running-request "
                     "cap applies" + ("; prefill instances serve whole prompts (fastsim's M/D/1 prefill "
                                      "server), the engine's default token budget applies" if role == "prefill" else ""))
    elif role == "decode" and engine == "vllm" and budget is None:
        notes.append("decode instances run the decodes only: vLLM's default token budget applies")
    if quant == "fp8" and wfmt is None:
        notes.append(f"--quantization fp8 assumes {ckpt} holds BF16 weights (drop it for an FP8 checkpoint)")
    if wname in ("NVFP4", "MXFP4") and wfmt is None:
        notes.append(f"{precision.name} needs a checkpoint already quantized to it; the engine reads its format "
                     "from the checkpoint's config")
    return a, notes


def _multinode(engine, plan, argv, *, gpus, gpn, layout):
    """One argv per node of an instance of ``gpus`` GPUs on nodes of ``gpn`` GPUs."""
    if gpus <= gpn:
        return [argv], []
    if gpus % gpn:
        raise _refuse(engine, plan, f"an instance whose {gpus} GPUs fill whole nodes of {gpn} GPUs")
    n = gpus // gpn
    out = []
    for r in range(n):
        a = list(argv)
        if engine == "sglang":
            a += ["--nnodes", str(n), "--node-rank", str(r), "--dist-init-addr", f"{HEAD_ADDR}:{SGLANG_DIST_PORT}"]
        elif layout == "dp+ep":
            a += ["--data-parallel-size-local", str(gpn), "--data-parallel-address", HEAD_ADDR,
                  "--data-parallel-rpc-port", str(VLLM_DP_RPC_PORT)]
            if r:
                a += ["--headless", "--data-parallel-start-rank", str(r * gpn)]
        else:
            a += ["--nnodes", str(n), "--node-rank", str(r), "--master-addr", HEAD_ADDR]
            if r:
                a += ["--headless"]
        out.append(a)
    note = (f"one instance spans {n} nodes of {gpn} GPUs: run one command per node, {HEAD_ADDR} = the "
            "address of its node 0" + ("" if engine == "sglang" or layout == "dp+ep"
                                       else " (vLLM multi-node multiprocessing; or Ray with "
                                            "--distributed-executor-backend ray)"))
    return out, [note]


def _pipeline_nodes(engine, plan, argv, *, tp, pp, gpn):
    """The per-node commands of a pipelined instance of ``pp`` stages of ``tp`` GPUs on nodes of ``gpn``.

    ``[(node rank, argv, notes)]`` in the order they are to be run, and the node count. One node:
    the command as is. vLLM over N nodes: a Ray cluster, ``ray start --head`` on node 0, ``ray start
    --address ... --block`` on the others, then ``vllm serve`` on node 0 with
    ``--distributed-executor-backend ray`` (vLLM's ``docs/serving/parallelism_scaling.md`` and
    ``examples/online_serving/multi-node-serving.sh``). SGLang over N nodes: the command on every
    node with ``--nnodes N --node-rank r --dist-init-addr`` (``_launch_subprocesses`` of
    ``python/sglang/srt/entrypoints/engine.py`` runs ``pp // N`` stages a node: ``pp`` must be a
    multiple of N).
    """
    from .layouts import nodes_of
    n = nodes_of(tp * pp, gpn)
    if n == 1:
        return [(0, list(argv), [])], 1
    if engine == "sglang":
        if pp % n:
            raise _refuse(engine, plan, f"pipeline stages that split evenly over the instance's {n} nodes: SGLang "
                                        f"runs pp_size / nnodes stages on each node (python/sglang/srt/entrypoints/"
                                        f"engine.py, _launch_subprocesses), and PP{pp} over {n} nodes does not")
        note = (f"one instance of TP{tp} x PP{pp} spans {n} nodes of {gpn} GPUs ({pp // n} stage"
                f"{'s' if pp // n > 1 else ''} a node): run this command on each node, {HEAD_ADDR} = the address "
                "of its node 0")
        return [(r, list(argv) + ["--nnodes", str(n), "--node-rank", str(r), "--dist-init-addr",
                                  f"{HEAD_ADDR}:{SGLANG_DIST_PORT}"], [note]) for r in range(n)], n
    head = ["ray", "start", "--head", f"--port={RAY_PORT}"]
    worker = ["ray", "start", f"--address={HEAD_ADDR}:{RAY_PORT}", "--block"]
    out = [(0, head, [f"node 0 of the instance's {n}: start Ray's head first"])]
    out += [(r, list(worker), [f"node {r}: join the Ray cluster of node 0 ({HEAD_ADDR}) before vllm serve starts"])
            for r in range(1, n)]
    out.append((0, list(argv) + ["--distributed-executor-backend", "ray"],
                [f"one instance of TP{tp} x PP{pp} spans {n} nodes of {gpn} GPUs: vllm serve runs on node 0 once "
                 f"every node has joined the Ray cluster (ray status lists {n} nodes), and places the stages on "
                 "their GPUs"]))
    return out, n


def launch_commands(plan, engine: str, catalog: Catalog | None = None, model=None, *,
                    checkpoint: str | None = None, constants: StepConstants | None = None) -> list:
    """Launch commands of every instance of a plan, and its router, for vLLM or SGLang.

    Parameters
    ----------
    plan : fastsim.analytic.Plan
        A plan of :func:`fastsim.planner.plan_deployment` (its final, repaired plan) or of the
        analytic screen.
    engine : {"vllm", "sglang"}
    catalog : Catalog, optional
        Where the plan's model, GPU (``gpus_per_node``) and precision (KV bytes) are looked up;
        default :func:`fastsim.catalog.default_catalog`.
    model : Model or str, optional
        The model the plan serves when ``plan.model`` is not a catalog name (a plan made from a
        ``config.json``): the :class:`~fastsim.catalog.Model` the planner was given, or a catalog
        name or ``config.json`` path. Default: ``catalog.model(plan.model)``.
    checkpoint : str, optional
        The checkpoint to serve (a Hugging Face repo id or a directory). Default: the
        instruction-tuned release of a built-in model (:data:`HF_CHECKPOINTS`), or the directory
        of the ``config.json`` the model was read from.
    constants : StepConstants, optional
        Gives ``memory_utilization`` (the memory fraction of both engines; default 0.9).

    Returns
    -------
    list of dict
        One dict per command, instance roles first (``colocated``, or ``prefill`` then ``decode``),
        then the ``router`` when the plan has more than one instance: ``role`` (str),
        ``instances`` (how many instances run this command, int), ``gpus_per_instance`` (int,
        ``tp x pp``; 0 for the router), ``nodes_per_instance`` (int), ``node_rank`` (int: an
        instance that spans nodes has one command per node; a pipelined vLLM instance over
        several nodes has its Ray commands first, ``ray start --head`` on node 0 and ``ray start
        --address`` on the others, then ``vllm serve`` on node 0), ``command`` (argv, list of str; empty when the engine
        has no router of its own) and ``notes`` (list of str). Placeholders in angle brackets
        (``<head-node-ip>``, ``<decode-0>``) stand for addresses; every instance of a role runs
        the same command on its own GPUs (``CUDA_VISIBLE_DEVICES``) and host or port.

    Raises
    ------
    FastsimInputError
        ``engine`` is not one of :data:`ENGINES` (field ``--emit``); or the plan cannot be run as
        planned by the engine (field ``--emit``, the value naming the engine and the plan): a
        precision the checkpoint is not in and the engine cannot quantize to, a KV cache other
        than 1 or 2 bytes, an MTP draft on a model without an MTP layer, an instance whose GPUs
        do not fill whole nodes (TP over nodes), an SGLang pipeline whose stages do not split
        evenly over its nodes, a model with no known checkpoint and none given, an instance
        whose KV cache holds no whole block (vLLM: none beside the null block), or a setting the
        engine's start-up rules refuse (:mod:`fastsim.engine_rules`, the engine's reason quoted).
    """
    if engine not in ENGINES:
        raise FastsimInputError("--emit", engine, " or ".join(ENGINES))
    cat = catalog or default_catalog()
    m = _resolve_model(plan, cat, model)
    gpu = cat.gpu(plan.gpu)
    precision = cat.precision(plan.precision)
    if constants is None:
        from .stepmodel import StepConstants
        constants = StepConstants()
    consts = constants
    if getattr(plan, "heterogeneous", False):
        raise _refuse(engine, plan, "one GPU type and precision for both sides: commands for a heterogeneous "
                                    "disaggregated plan (prefill and decode on different GPUs or precisions) are not "
                                    "written yet")
    ckpt, wfmt = _checkpoint(m, checkpoint)
    if ckpt is None:
        raise _refuse(engine, plan, f"a model with a known checkpoint: {m.name} has none; give one "
                                    "(launch_commands(checkpoint=...)) or read the model from its config.json")
    spec_ckpt = spec_wfmt = None
    if plan.spec_gamma:
        if plan.spec_draft == "mtp":
            if m.name.lower() not in MTP_MODELS:
                raise _refuse(engine, plan, f"an MTP draft on a checkpoint with an MTP layer ({', '.join(sorted(MTP_MODELS))}); "
                                            f"{m.name} has none: choose a draft model (--spec-draft)")
        else:
            draft = _resolve_model(plan, cat, plan.spec_draft)
            spec_ckpt, spec_wfmt = _checkpoint(draft, None)
            if spec_ckpt is None:
                raise _refuse(engine, plan, f"a draft model with a known checkpoint: {draft.name} has none")
    if plan.mode == "disaggregated":
        roles = [("prefill", plan.prefill_instances, plan.prefill_tp, 0, 0),
                 ("decode", plan.decode_instances, plan.decode_tp, int(plan.batch), 0)]
    else:
        roles = [("colocated", plan.instances, plan.tp, int(plan.batch), int(plan.chunk_tokens))]
    out = []
    urls = {}
    pp = int(getattr(plan, "pp", 1))
    for role, count, gpus, batch, chunk in roles:
        argv, notes = _instance_args(engine, plan, role=role, gpus=gpus, batch=batch, chunk=chunk, model=m,
                                     ckpt=ckpt, wfmt=wfmt, precision=precision, gpu=gpu, constants=consts,
                                     spec_ckpt=spec_ckpt, spec_wfmt=spec_wfmt, pp=pp)
        if pp > 1:
            steps, n_nodes = _pipeline_nodes(engine, plan, argv, tp=gpus, pp=pp, gpn=gpu.gpus_per_node)
            if count > 1:
                notes = notes + [f"run {count} instances of these commands, each on its own "
                                 f"{gpus * pp} GPUs and hosts or --port"]
            for r, a, own in steps:
                serve = a[0] != "ray"
                out.append({"role": role, "instances": int(count), "gpus_per_instance": int(gpus * pp),
                            "nodes_per_instance": n_nodes, "node_rank": r, "command": a,
                            "notes": (notes if serve else []) + own})
            port = VLLM_PORT if engine == "vllm" else SGLANG_PORT
            urls[role] = [f"http://<{role}-{i}>:{port}" for i in range(count)]
            continue
        per_node, more = _multinode(engine, plan, argv, gpus=gpus, gpn=gpu.gpus_per_node, layout=plan.layout)
        if engine == "vllm" and role in ("prefill", "decode"):
            more.append("each NixlConnector instance on a host needs its own VLLM_NIXL_SIDE_CHANNEL_PORT")
        if count > 1:
            more.append(f"run {count} instances of this command, each on its own "
                        f"{'GPU' if gpus == 1 else str(gpus) + ' GPUs'} and host or --port")
        for r, a in enumerate(per_node):
            out.append({"role": role, "instances": int(count), "gpus_per_instance": int(gpus),
                        "nodes_per_instance": len(per_node), "node_rank": r, "command": a,
                        "notes": notes + more})
        port = VLLM_PORT if engine == "vllm" else SGLANG_PORT
        urls[role] = [f"http://<{role}-{i}>:{port}" for i in range(count)]
    total = sum(c for _, c, *_ in roles)
    if plan.mode == "colocated" and total == 1:
        serve = next(e for e in out if e["command"][:1] != ["ray"])
        serve["notes"].append("one instance: clients talk to it directly, no router")
        return out
    if engine == "sglang":
        cmd = ["python", "-m", "sglang_router.launch_router"]
        if plan.mode == "disaggregated":
            cmd += ["--pd-disaggregation"]
            for u in urls["prefill"]:
                cmd += ["--prefill", u, str(SGLANG_BOOTSTRAP_PORT)]
            for u in urls["decode"]:
                cmd += ["--decode", u]
        else:
            cmd += ["--worker-urls", *urls["colocated"]]
        cmd += ["--policy", "cache_aware", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
        rnotes = ["<role-i> = the host of instance i of that role; cache_aware sends a request to the "
                  "instance holding most of its prefix unless the load is unbalanced"]
    else:
        cmd = []
        if plan.mode == "disaggregated":
            rnotes = ["vLLM has no router for separate prefill and decode instances: put a P/D proxy in "
                      "front (a request goes to a prefill instance with max_tokens 1, then to a decode "
                      "instance that pulls its KV through the NixlConnector), e.g. llm-d or vLLM's "
                      "disaggregated-serving proxy example; prefill "
                      + " ".join(urls["prefill"]) + "; decode " + " ".join(urls["decode"])]
        else:
            rnotes = ["vLLM has no router across separate instances: put an HTTP load balancer "
                      "(least outstanding requests, or prefix-aware) in front of "
                      + " ".join(urls["colocated"])]
    out.append({"role": "router", "instances": 1, "gpus_per_instance": 0, "nodes_per_instance": 1,
                "node_rank": 0, "command": cmd, "notes": rnotes})
    return out


def format_launch(entries: list, plan_number: int | None = None) -> str:
    """The commands of :func:`launch_commands` as shell text, one block per command.

    Parameters
    ----------
    entries : list of dict
        The result of :func:`launch_commands`.
    plan_number : int, optional
        The plan's rank, printed in each block's heading.

    Returns
    -------
    str
        Lines ``# plan N, role (instances x GPUs[, node r of n])``, the command (arguments quoted
        for a POSIX shell) and ``#   note`` lines.
    """
    lines = []
    for e in entries:
        head = f"# {'plan ' + str(plan_number) + ', ' if plan_number is not None else ''}{e['role']}"
        if e["role"] != "router":
            head += f" ({e['instances']} x {e['gpus_per_instance']} GPU{'s' if e['gpus_per_instance'] > 1 else ''}"
            if e["nodes_per_instance"] > 1:
                head += f", node {e['node_rank']} of {e['nodes_per_instance']}"
            head += ")"
        lines.append(head)
        if e["command"]:
            lines.append(" ".join(shlex.quote(a) for a in e["command"]))
        lines.extend("#   " + n for n in e["notes"])
    return "\n".join(lines)
