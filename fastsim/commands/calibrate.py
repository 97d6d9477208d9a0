"""``fastsim calibrate``: fit the step model's constants and write a calibration file (:mod:`fastsim.calibrate`)."""
from __future__ import annotations

from .._command_helpers import _add_common, _pos_int, _tp


def add_parser(sub):
    """Add the ``calibrate`` sub-command to ``sub`` (implemented in :func:`fastsim.calibrate.cli_calibrate`)."""
    sp = sub.add_parser("calibrate", help="fit the step model's constants to measured steps and/or "
                        "per-operation profiles (least squares), or through the simulator to a serving "
                        "benchmark, and write a calibration file")
    sp.add_argument("--steps", metavar="FILE.csv", help="measured steps: gpu, precision, tp, model, decode_tokens, "
                    "prefill_tokens, kv_tokens, step_s (see README)")
    sp.add_argument("--profiles", action="append", metavar="NAME|PATH",
                    help="Vidur per-operation profiles: vidur-h100 (shipped), a CSV or a directory (repeatable)")
    sp.add_argument("--serving", nargs="+", metavar="FILE.json",
                    help="serving-benchmark results (`vllm bench serve --save-result` JSON, one file per request "
                    "rate or several results per file): fits eta_compute and eta_bw through the simulator")
    sp.add_argument("--gpu", default="H100", help="GPU the profiles or the benchmark were measured on (default H100)")
    sp.add_argument("--precision", default="BF16",
                    help="precision the profile constants apply to, or the benchmark served (default BF16; '*' = "
                    "every precision, profiles only)")
    sp.add_argument("--model", help="--serving: the served model (catalog name or config.json)")
    sp.add_argument("--tp", type=_tp, default=1, help="--serving: GPUs per instance (default 1)")
    sp.add_argument("--instances", type=_pos_int("--instances"), default=1,
                    help="--serving: instances behind the benchmark's endpoint (default 1)")
    sp.add_argument("--policy", choices=("vllm", "sglang", "lecture"), default="vllm",
                    help="--serving: scheduler simulated (default vllm: the simulator's model of vLLM V1)")
    sp.add_argument("--max-num-batched-tokens", type=_pos_int("--max-num-batched-tokens"),
                    help="--serving: the server's token budget per step (default: the engine's)")
    sp.add_argument("--max-num-seqs", type=_pos_int("--max-num-seqs"),
                    help="--serving: the server's most running requests (default: the engine's)")
    sp.add_argument("--input-tokens", type=_pos_int("--input-tokens"),
                    help="--serving: prompt tokens per request when the JSON has no random_input_len "
                    "(default: the measured mean)")
    sp.add_argument("--output-tokens", type=_pos_int("--output-tokens"),
                    help="--serving: output tokens per request when the JSON has no random_output_len "
                    "(default: the measured mean)")
    sp.add_argument("--fit-overhead", action="store_true", help="--serving: also fit overhead_s (per step)")
    sp.add_argument("--replications", type=_pos_int("--replications"), default=2,
                    help="--serving: request draws simulated per rate (default 2)")
    sp.add_argument("--seed", type=int, default=0, help="--serving: seed of the simulated requests (default 0)")
    sp.add_argument("--out", metavar="FILE.toml", help="write the calibration file here")
    sp.add_argument("--plot", metavar="FILE.png", help="measured vs modelled times")
    sp.add_argument("--detail", action="store_true",
                    help="also fit each profiled model x TP and each all-reduce size on its own")
    _add_common(sp)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim calibrate`` (:func:`fastsim.calibrate.cli_calibrate`); the exit status."""
    from ..calibrate import cli_calibrate
    return cli_calibrate(args)
