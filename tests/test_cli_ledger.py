"""``fastsim ledger``, ``fastsim ladder`` and ``fastsim whatif``: output formats and one-line errors."""
import json

import pytest

from fastsim.cli import main


def run(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


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
    (["whatif", "--study", "nope"], "--study"),
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
    rec = json.loads(out)
    assert rc == 0 and len(rec) == 2
    assert rec[1]["compute_s"] == pytest.approx(61.13e-3, rel=1e-3)
    assert rec[0]["queue_wait_s"] is None                         # no rate given
    rc, out, _ = run(capsys, "ledger", "--batch", "64", "--rate", "50", "--format", "csv")
    assert rc == 0 and out.splitlines()[0].startswith("gpu,precision,tp,batch")
    png = tmp_path / "ledger.png"
    rc, _, _ = run(capsys, "ledger", "--batch", "1", "64", "--prefill", "0", "2048", "--plot", str(png))
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ladder_outputs(capsys):
    rc, out, _ = run(capsys, "ladder")
    assert rc == 0 and "+ speculative decoding" in out
    rc, out, _ = run(capsys, "ladder", "--format", "json")
    rec = json.loads(out)
    assert [r["level"] for r in rec] == [0, 1, 2, 3, 4, 5, 5]
    assert rec[3]["batch"] == 64
    rc, out, _ = run(capsys, "ladder", "--format", "csv")
    assert rc == 0 and len(out.strip().splitlines()) == 8


def test_whatif_outputs(capsys, tmp_path):
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "traffic", "--study", "fp8", "--format", "json")
    rec = json.loads(out)
    assert rc == 0 and list(rec) == ["traffic", "fp8"]
    assert rec["traffic"][0]["usd_per_million_output_tokens"] == pytest.approx(0.5778, abs=1e-4)
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "model-size", "--plot", str(tmp_path))
    assert rc == 0 and "405b" in out and "analytic screen" in out
    assert (tmp_path / "whatif_model-size.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "prices", "--format", "csv")
    assert rc == 0 and "study" in out.splitlines()[0]
