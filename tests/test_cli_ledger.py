"""``fastsim ledger``, ``fastsim ladder`` and ``fastsim whatif``: output formats and one-line errors."""
import json

import pytest

from cliutil import run




@pytest.mark.parametrize("argv, needle", [
    (["ledger", "--model", "llama-9b"], "model"),
    (["ledger", "--gpu", "X100"], "gpu"),
    (["ledger", "--precision", "FP4"], "precision"),
    (["ledger", "--tp", "3"], "--tp"),
    (["ledger", "--tp", "0"], "--tp"),
    (["ledger", "--batch", "0"], "--batch"),
    (["ledger", "--batch", "1", "-4"], "--batch"),
    (["ledger", "--context", "-5"], "--context"),
    (["ledger", "--prefill", "x"], "--prefill"),
    (["ledger", "--kernels-per-layer", "-1"], "--kernels-per-layer"),
    (["ledger", "--launch-us", "0"], "--launch-us"),
    (["ledger", "--rate", "-1"], "--rate"),
    (["ledger", "--price", "B200=-2"], "--price"),
    (["ladder", "--gpu", "X100"], "gpu"),
    (["ladder", "--tp", "6"], "--tp"),
    (["ladder", "--acceptance", "1.5"], "acceptance"),
    (["ladder", "--gamma", "0"], "--gamma"),
    (["ladder", "--draft-model", "nope"], "model"),
    (["ladder", "--power-w", "0"], "--power-w"),
    (["ladder", "--gpu", "A100"], "levels 4 and 5 run in FP8 and A100"),
    (["ladder", "--context", "10000000"], "--context"),
    (["ledger", "--context", "4096", "131073"], "--context"),
    (["ledger", "--prefill", "0", "200000"], "--prefill"),
    (["whatif", "--study", "nope"], "--study"),
    (["whatif", "--study", "all", "--study", "nope"], "--study"),
    (["whatif", "--study", "fp8", "--format", "xml"], "--format"),
    (["whatif", "--seed", "-1"], "--seed"),
    (["whatif", "--seed", "x"], "--seed"),
    (["whatif", "--seeds", "1.5"], "--seeds"),
    (["whatif", "--horizon", "inf"], "--horizon"),
    (["whatif", "--price", "H100=abc"], "--price"),
    (["whatif", "--no-verify", "--study", "fp8", "--catalog", "/nonexistent/cat.toml"], "catalog"),
    (["whatif", "--no-verify", "--study", "fp8", "--plot", "/proc/nonexistent/dir"], "--plot"),
    (["whatif", "--seeds", "0"], "--seeds"),
    (["whatif", "--horizon", "-1"], "--horizon"),
    (["whatif", "--top-k", "0"], "--top-k"),
    (["whatif", "--no-verify", "--price", "X100=3"], "X100"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
    assert "allowed" in lines[0] or "choice" in lines[0]


def test_ledger_table_json_csv(capsys, tmp_path):
    rc, out, _ = run(capsys, "ledger")
    assert rc == 0 and "8.481" in out and "13.181" in out        # batch 1 / batch 64 steps (ms)
    rc, out, _ = run(capsys, "ledger", "--batch", "1", "--prefill", "0", "2048", "--format", "json")
    rec = json.loads(out)["rows"]
    assert rc == 0 and len(rec) == 2
    assert rec[1]["compute_s"] == pytest.approx(61.13e-3, rel=1e-3)
    assert rec[0]["queue_wait_s"] is None                         # no rate given
    rc, out, _ = run(capsys, "ledger", "--batch", "64", "--rate", "50", "--output-tokens", "250", "--format", "csv")
    assert rc == 0 and out.splitlines()[0].startswith("gpu,precision,tp,batch")
    png = tmp_path / "ledger.png"
    rc, _, _ = run(capsys, "ledger", "--batch", "1", "64", "--prefill", "0", "2048", "--plot", str(png))
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ladder_outputs(capsys):
    rc, out, _ = run(capsys, "ladder")
    assert rc == 0 and "+ speculative decoding" in out
    rc, out, _ = run(capsys, "ladder", "--format", "json")
    rec = json.loads(out)["levels"]
    assert [r["level"] for r in rec] == [0, 1, 2, 3, 4, 5, 5]
    assert [r["control"] for r in rec] == [False] * 6 + [True]
    assert all(r["fits"] for r in rec)
    assert rec[3]["batch"] == 64
    rc, out, _ = run(capsys, "ladder", "--format", "csv")
    assert rc == 0 and len(out.strip().splitlines()) == 8
    head, *rows = [line.split(",") for line in out.strip().splitlines()]
    keys = [(r[head.index("level")], r[head.index("control")]) for r in rows]
    assert len(set(keys)) == len(keys)                                   # (level, control) names a row


def test_ladder_control_row_labelled_in_table(capsys):
    rc, out, _ = run(capsys, "ladder")
    levels = [line.split("  ")[0].strip() for line in out.splitlines()[3:]]
    assert rc == 0 and levels == ["0", "1", "2", "3", "4", "5", "5 control"]


def test_ladder_that_does_not_fit_says_so(capsys):
    rc, out, err = run(capsys, "ladder", "--model", "llama-3.1-405b")
    assert rc == 0
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 2
    assert "levels 0, 1, 2 (BF16, batch 1) do not fit in memory" in notes[0]
    assert "72.0 GB usable (0.9 x 80 GB of H100)" in notes[0] and "29.7 GB over" in notes[0]
    assert "level 3 (BF16, batch 64) does not fit" in notes[1]
    rc, out, err = run(capsys, "ladder", "--model", "llama-3.1-405b", "--format", "json")
    rec = json.loads(out)["levels"]
    assert [r["fits"] for r in rec] == [False] * 4 + [True] * 3
    assert rec[0]["memory_per_gpu_bytes"] - rec[0]["memory_limit_per_gpu_bytes"] == pytest.approx(29.7e9, rel=2e-3)
    assert "do not fit" in err                                           # notes on stderr beside JSON


#: The ledger's note on its step constants (it models no engine's scheduler: SPEC §3's).
NOTE = "step constants: SPEC §3's (this command models no engine's scheduler)"


def test_ledger_that_does_not_fit_says_so(capsys):
    rc, out, err = run(capsys, "ledger", "--model", "llama-3.1-405b", "--tp", "1", "--batch", "1")
    assert rc == 0 and err == ""
    assert "NO" in out.splitlines()[3].split()
    assert "note: batch 1, decode ctx 4096 does not fit in memory: 813.8 GB per GPU" in out
    assert "741.8 GB over" in out
    rc, out, err = run(capsys, "ledger", "--model", "llama-3.1-405b", "--tp", "1", "--batch", "1", "--format", "json")
    (rec,) = json.loads(out)["rows"]
    assert rec["fits"] is False and rec["memory_limit_per_gpu_bytes"] == 72e9
    assert rec["memory_per_gpu_bytes"] == pytest.approx(813.8e9, rel=1e-4)
    assert "does not fit" in err
    rc, out, err = run(capsys, "ledger", "--format", "json")
    # the one note: which step constants the ledger used
    assert all(r["fits"] for r in json.loads(out)["rows"]) and err == f"note: {NOTE}\n"


def test_ledger_overload_is_named(capsys):
    rc, out, _ = run(capsys, "ledger", "--batch", "1", "--prefill", "2048", "--rate", "20")
    assert rc == 0
    row = out.splitlines()[3]
    assert "1.75" in row and "unstable" in row
    assert ("note: batch 1, prefill 2048: the load of 20 req/s exceeds the step's service rate of "
            "11.4 prompts/s (utilization 1.75 >= 1)") in out
    rc, out, _ = run(capsys, "ledger", "--batch", "1", "--prefill", "2048", "--rate", "5")
    assert rc == 0 and "unstable" not in out
    assert [ln for ln in out.splitlines() if "note" in ln] == [f"note: {NOTE}"]


def test_ledger_prefill_rows_not_repeated_per_context(capsys):
    rc, out, _ = run(capsys, "ledger", "--batch", "1", "64", "--context", "1024", "4096", "--prefill", "0", "2048",
                     "--format", "json")
    rec = json.loads(out)["rows"]
    keys = [(r["batch"], r["context_tokens"], r["prefill_tokens"]) for r in rec]
    assert keys == [(1, 1024, 0), (1, 4096, 0), (1, 0, 2048), (64, 1024, 0), (64, 4096, 0), (64, 0, 2048)]


def test_whatif_outputs(capsys, tmp_path):
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "traffic", "--study", "fp8", "--format", "json")
    rec = json.loads(out)["studies"]
    assert rc == 0 and list(rec) == ["traffic", "fp8"]
    assert rec["traffic"][0]["usd_per_million_output_tokens"] == pytest.approx(0.5778, abs=1e-4)
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "model-size", "--plot", str(tmp_path))
    assert rc == 0 and "405b" in out and "analytic screen" in out
    assert (tmp_path / "whatif_model-size.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "prices", "--format", "csv")
    assert rc == 0 and "study" in out.splitlines()[0]


def test_ladder_drafts_as_plan_and_simulate_do_and_names_the_draft(capsys):
    """Level 5 drafted with llama-3.1-8b whatever the target (another vocabulary for DeepSeek-V3)."""
    rc, out, err = run(capsys, "ladder", "--model", "deepseek-v3", "--gpu", "H200")
    assert rc == 0, err
    assert out.splitlines()[0].endswith("; speculative draft mtp")
    rc, out, err = run(capsys, "ladder")
    assert rc == 0 and out.splitlines()[0].endswith("; speculative draft llama-3.1-8b"), err
    rc, out, err = run(capsys, "ladder", "--model", "deepseek-v3", "--gpu", "H200", "--draft-model", "llama-3.1-8b")
    assert rc == 2 and "--draft-model" in err and "vocabulary" in err


def test_ladder_errors_name_the_flags(capsys):
    for argv, start in ((["--draft-model", "nosuch"], "--draft-model: got 'nosuch'"),
                        (["--draft-model", "llama-3.1-70b"], "--draft-model: got 'llama-3.1-70b'"),
                        (["--acceptance", "1"], "--acceptance: got 1.0")):
        rc, out, err = run(capsys, "ladder", *argv)
        assert rc == 2 and err.startswith(f"fastsim ladder: error: {start}"), err


def test_ledger_pp_rows_per_stage_and_the_round(capsys):
    rc, out, err = run(capsys, *["ledger", "--model", "llama-3.1-405b", "--precision", "FP8", "--tp", "8", "--pp", "2",
                                "--batch", "64", "--format", "json"])
    assert rc == 0
    recs = json.loads(out)["rows"]
    assert [r["stage"] for r in recs] == [0, 1] and all(r["pp"] == 2 for r in recs)
    assert recs[0]["p2p_s"] > 0 and recs[1]["p2p_s"] == 0
    rc, out, err = run(capsys, *["ledger", "--model", "llama-3.1-405b", "--precision", "FP8", "--tp", "8", "--pp", "2",
                                "--batch", "64"])
    assert "stage send ms" in out and "TP8 x PP2, batch 64" in out + err and "2 micro-batches of 32" in out + err


def test_ledger_pp_errors_name_the_flag(capsys):
    rc, out, err = run(capsys, *["ledger", "--model", "llama-3.1-405b", "--tp", "16", "--pp", "2"])
    assert rc == 2 and "tp" in err and "node" in err
    rc, out, err = run(capsys, *["ledger", "--model", "llama-3.1-70b", "--tp", "8", "--pp", "81"])
    assert rc == 2 and "pp" in err


def test_ledger_shows_a_calibrations_host_time_per_sequence(capsys, tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry
    from fastsim.stepmodel import StepConstants
    path = tmp_path / "host.toml"
    Calibration((CalibrationEntry("*", "*", StepConstants(overhead_per_seq_s=2.5e-5), ("overhead_per_seq_s",)),)
                ).write(path)
    rc, out, _ = run(capsys, "ledger", "--model", "llama-3.1-8b", "--tp", "1", "--batch", "64",
                     "--calibration", str(path))
    assert rc == 0
    head = out.splitlines()[0]
    # the step's formula names the column it adds
    assert head.endswith("step = max(weight + KV, compute) + all-reduce + launch + host (the host time of the "
                         "step's sequences)")
    assert "host ms" in out.splitlines()[1]
    # 64 sequences x 25 us = 1.600 ms
    assert " 1.600 " in out.splitlines()[3]
    assert "its host time per sequence (25 us, the host column)" in out
    rc, out, _ = run(capsys, "ledger", "--model", "llama-3.1-8b", "--tp", "1", "--batch", "64")
    assert "host" not in out.splitlines()[0] and "host" not in out.splitlines()[1]
    rc, out, _ = run(capsys, "ledger", "--model", "llama-3.1-8b", "--tp", "1", "--batch", "64", "--format", "json",
                     "--calibration", str(path))
    assert json.loads(out)["rows"][0]["host_s"] == pytest.approx(64 * 2.5e-5, rel=1e-12)
