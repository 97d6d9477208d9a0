"""``fastsim catalog``: what the catalog holds, and what fastsim read from a model's ``config.json``.

Without ``--model``: every GPU (peak FLOP/s per precision, HBM, bandwidths, price), precision
(weight and KV bytes per element), model (layers, parameters, attention, experts, context) and
scenario (model, lengths, rate, SLOs) of the catalog, ``--catalog`` files included. With
``--model NAME`` or ``--model path/config.json``: that model as fastsim reads it (the figures the
step model uses, SPEC §3): total and active parameters, weight bytes per precision, KV bytes per
token per precision, the attention and expert layout, the context.
"""
from __future__ import annotations

import sys

from .._command_helpers import _add_common, _command_catalog, _notes_out


def add_parser(sub):
    """Add the ``catalog`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("catalog", help="list the catalog's GPUs, precisions, models and scenarios, or what fastsim "
                                        "read from a model's config.json")
    _add_common(sp)
    sp.add_argument("--model", help="one model: a catalog name or a path to a Hugging Face config.json (its "
                                    "parameters, weight and KV bytes, attention and expert layout, context)")
    sp.set_defaults(func=run)


def _model_record(m, cat) -> dict:
    """One model's record: the figures the step model reads from it (bytes, parameters, tokens)."""
    precisions = [cat.precision(p) for p in cat.precisions]
    rec = {
        "kind": "model", "name": m.name, "source": m.source,
        "total_params": float(m.total_params), "active_params": float(m.active_params),
        "layers": int(m.layers), "hidden": int(m.hidden), "heads": int(m.heads), "kv_heads": int(m.kv_heads),
        "head_dim": int(m.head_dim), "attention": m.attention, "kv_lora_rank": int(m.kv_lora_rank),
        "sliding_window": int(m.sliding_window), "sliding_layers": int(m.sliding_layers),
        "moe": bool(m.is_moe), "n_experts": int(m.n_experts), "experts_per_token": int(m.experts_per_token),
        "moe_layers": int(m.moe_layers), "moe_ffn": int(m.moe_ffn), "shared_ffn": int(m.shared_ffn),
        "max_context_tokens": int(m.max_context_tokens), "vocab": int(m.vocab),
        # the weights every GPU set holds, and the KV of one full-context token, at each precision
        "weight_bytes": {p.name: float(m.total_params * p.weight_bytes) for p in precisions},
        "kv_bytes_per_token": {p.name: float(m.kv_bytes_per_token(p.kv_bytes)) for p in precisions},
    }
    return rec


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def run(args):
    """Run ``fastsim catalog``: the catalog's entries or one model's figures; the exit status."""
    from .._output import csv_frame, dumps
    cat = _command_catalog(args)
    notes = []
    if args.model is not None:
        m = cat.model(args.model)
        rec = _model_record(m, cat)
        if args.format == "json":
            sys.stdout.write(dumps(dict(rec, notes=notes)) + "\n")
        elif args.format == "csv":
            csv_frame([rec], notes).to_csv(sys.stdout, index=False)
        else:
            from tabulate import tabulate
            attn = (f"MLA (KV rank {rec['kv_lora_rank']}), {rec['heads']} heads" if rec["attention"] == "mla" else
                    f"{rec['attention'].upper()}, {rec['heads']} query / {rec['kv_heads']} KV heads of "
                    f"{rec['head_dim']}")
            if rec["sliding_window"]:
                attn += f"; {rec['sliding_layers']} layers slide over {rec['sliding_window']:,} tokens"
            experts = (f"{rec['n_experts']} experts, {rec['experts_per_token']} per token, on {rec['moe_layers']} "
                       f"of {rec['layers']} layers (expert FFN {rec['moe_ffn']:,}, shared {rec['shared_ffn']:,})"
                       if rec["moe"] else "dense (no experts)")
            rows = [["model", rec["name"]], ["read from", rec["source"]],
                    ["parameters", f"{rec['total_params'] / 1e9:,.2f} B total, {rec['active_params'] / 1e9:,.2f} B "
                                   "active per token"],
                    ["layers x hidden", f"{rec['layers']} x {rec['hidden']:,}"], ["attention", attn],
                    ["experts", experts], ["context", f"{rec['max_context_tokens']:,} tokens"]]
            rows += [[f"weights {k}", _gb(v)] for k, v in rec["weight_bytes"].items()]
            rows += [[f"KV per token {k}", f"{v / 1e3:,.1f} kB"] for k, v in rec["kv_bytes_per_token"].items()]
            print(tabulate(rows, headers=["field", "value"], disable_numparse=True))
        _notes_out(args, notes)
        return 0
    gpus = []
    for name in cat.gpus:
        g = cat.gpu(name)
        gpus.append({"kind": "gpu", "name": g.name, "peak_flops_per_s": dict(g.peak_flops_per_s),
                     "hbm_bytes": float(g.hbm_bytes), "hbm_bw_bytes_per_s": float(g.hbm_bw_bytes_per_s),
                     "nvlink_bw_bytes_per_s": float(g.nvlink_bw_bytes_per_s),
                     "network_bw_bytes_per_s": float(g.network_bw_bytes_per_s),
                     "price_usd_per_hour": float(g.price_usd_per_hour), "gpus_per_node": int(g.gpus_per_node),
                     "default_grid": bool(g.default_grid)})
    precs = []
    for name in cat.precisions:
        p = cat.precision(name)
        precs.append({"kind": "precision", "name": p.name, "weight_bytes": float(p.weight_bytes),
                      "kv_bytes": float(p.kv_bytes), "flops_key": p.flops_key, "default_grid": bool(p.default_grid)})
    models = [_model_record(cat.model(name), cat) for name in cat.models]
    scens = []
    for name in cat.scenarios:
        s = cat.scenario(name)
        scens.append({"kind": "scenario", "name": s.name, "model": s.model, "rate_req_per_s": float(s.rate_req_per_s),
                      "ttft_s": float(s.ttft_s), "tpot_s": float(s.tpot_s),
                      "mean_prompt_tokens": float(s.prompt.mean), "mean_output_tokens": float(s.output.mean)})
    if args.format == "json":
        sys.stdout.write(dumps({"gpus": gpus, "precisions": precs, "models": models, "scenarios": scens,
                                "notes": notes}) + "\n")
    elif args.format == "csv":
        csv_frame(gpus + precs + models + scens, notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate
        print(tabulate([[g["name"], ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in g["peak_flops_per_s"].items()),
                         f"{g['hbm_bytes'] / 1e9:,.0f}", f"{g['hbm_bw_bytes_per_s'] / 1e12:,.2f}",
                         f"{g['nvlink_bw_bytes_per_s'] / 1e9:,.0f}", f"{g['price_usd_per_hour']:.2f}"] for g in gpus],
                       headers=["GPU", "peak TFLOP/s", "HBM GB", "HBM TB/s", "NVLink GB/s", "$/hour"],
                       disable_numparse=True))
        print()
        print(tabulate([[p["name"], f"{p['weight_bytes']:g}", f"{p['kv_bytes']:g}", p["flops_key"]] for p in precs],
                       headers=["precision", "weight bytes", "KV bytes", "peak key"], disable_numparse=True))
        print()
        print(tabulate([[m["name"], f"{m['total_params'] / 1e9:,.1f}", f"{m['active_params'] / 1e9:,.1f}",
                         m["attention"], f"{m['n_experts']} / {m['experts_per_token']}" if m["moe"] else "dense",
                         f"{m['max_context_tokens']:,}"] for m in models],
                       headers=["model", "params B", "active B", "attention", "experts / per token", "context"],
                       disable_numparse=True))
        print()
        print(tabulate([[s["name"], s["model"], f"{s['rate_req_per_s']:g}", f"{s['ttft_s']:g}", f"{s['tpot_s']:g}",
                         f"{s['mean_prompt_tokens']:,.0f}", f"{s['mean_output_tokens']:,.0f}"] for s in scens],
                       headers=["scenario", "model", "req/s", "TTFT s", "TPOT s", "prompt mean", "output mean"],
                       disable_numparse=True))
    _notes_out(args, notes)
    return 0
