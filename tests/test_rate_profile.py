"""Time-varying arrivals: rate profiles, non-homogeneous Poisson / gamma draws, gaps, --profile."""
import gzip
import json
import math

import numpy as np
import pytest

from fastsim import workload as W
from fastsim.errors import FastsimInputError

from cliutil import run


def _csv(tmp_path, rows, name="p.csv", header="window_start_s,rate_req_per_s"):
    f = tmp_path / name
    f.write_text(header + "\n" + "\n".join(rows) + "\n")
    return f


@pytest.mark.parametrize("arrival,cv", [("poisson", 1.0), ("gamma", 2.5)])
@pytest.mark.parametrize("window_s", [None, 600.0, 7.0])
def test_constant_profile_is_synthesize_bit_for_bit(arrival, cv, window_s):
    prof = W.RateProfile.constant(3.7, 1800.0, window_s=window_s)
    for seed in (0, 11, W.seeds_for(5, 2)[1]):
        a = W.synthesize("chat", 3.7, 1800.0, seed, arrival=arrival, cv=cv)
        b = W.synthesize_profile("chat", prof, seed, arrival=arrival, cv=cv)
        assert a.n == b.n > 6000
        assert np.array_equal(a.arrival_s, b.arrival_s)
        assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
        assert np.array_equal(a.output_tokens, b.output_tokens)
        assert b.horizon_s == a.horizon_s == 1800.0


def test_constant_csv_profile_and_rate_scale_match_synthesize(tmp_path):
    f = _csv(tmp_path, [f"{600 * i},2" for i in range(4)])
    b = W.synthesize_profile("coding-agent", str(f), 3, rate_scale=2.5, horizon_s=2000.0)
    a = W.synthesize("coding-agent", 5.0, 2000.0, 3)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)


def test_lengths_are_synthesize_draws_on_any_profile():
    prof = W.RateProfile.from_arrays("x", [0, 100, 200], [1.0, 9.0, 0.5])
    b = W.synthesize_profile("chat", prof, 4)
    a = W.synthesize("chat", 1.0, 5000.0, 4)
    assert a.n > b.n > 0
    assert np.array_equal(a.prompt_tokens[:b.n], b.prompt_tokens)
    assert np.array_equal(a.output_tokens[:b.n], b.output_tokens)


def test_counts_per_window_follow_the_rate():
    rng = np.random.default_rng(12)
    rates = rng.uniform(0.5, 8.0, 400)
    rates[rng.random(400) < 0.1] = 0.0
    prof = W.RateProfile.from_arrays("long", np.arange(400) * 60.0, rates)
    wl = W.synthesize_profile("chat", prof, 2)
    counts = np.bincount(np.searchsorted(prof.window_start_s, wl.arrival_s, side="right") - 1, minlength=400)
    expect = rates * 60.0
    assert np.all(counts[rates == 0.0] == 0)
    pos = expect > 0
    chi2 = float(np.sum((counts[pos] - expect[pos]) ** 2 / expect[pos]))
    dof = int(pos.sum())
    # chi-square with dof degrees of freedom: mean dof, sd sqrt(2 dof); 4 sd is p < 1e-4
    assert abs(chi2 - dof) < 4.0 * math.sqrt(2.0 * dof), (chi2, dof)
    z = (counts.sum() - expect.sum()) / math.sqrt(expect.sum())
    assert abs(z) < 4.0
    assert np.all(np.diff(wl.arrival_s) >= 0) and wl.arrival_s[-1] < prof.span_s


def test_gaps_get_no_arrivals_and_are_reported():
    rates = [2, 0, 0, 3, 0, 5, 0]
    prof = W.RateProfile.from_arrays("g", np.arange(7) * 100.0, rates)
    g = prof.gaps
    assert g.count == 3 and g.total_s == 400.0 and g.longest_s == 200.0
    assert g.start_s.tolist() == [100.0, 400.0, 600.0] and g.end_s.tolist() == [300.0, 500.0, 700.0]
    assert "3 runs" in g.describe() and "gaps: 3 runs" in prof.describe()
    assert prof.trough_rate_req_per_s == 2.0 and prof.peak_rate_req_per_s == 5.0
    assert prof.mean_rate_req_per_s == pytest.approx(1000.0 / 300.0)
    for seed in range(5):
        for arrival, cv in (("poisson", 1.0), ("gamma", 3.0)):
            wl = W.synthesize_profile("chat", prof, seed, arrival=arrival, cv=cv)
            w = np.searchsorted(prof.window_start_s, wl.arrival_s, side="right") - 1
            assert np.all(prof.rate_req_per_s[w] > 0), (seed, arrival)
            assert wl.n > 500
    assert "gaps" in W.synthesize_profile("chat", prof, 0).source
    assert W.RateProfile.constant(1.0, 10.0).gaps.describe() == "none"


def test_horizon_cuts_and_scaled():
    prof = W.RateProfile.from_arrays("h", [0, 100], [1.0, 4.0])
    assert prof.span_s == 200.0 and prof.expected_requests() == 500.0 and prof.expected_requests(150) == 300.0
    s = prof.scaled(2.0)
    assert s.rate_req_per_s.tolist() == [2.0, 8.0] and prof.scaled(1.0) is prof
    wl = W.synthesize_profile("chat", prof, 1, horizon_s=150.0)
    assert wl.horizon_s == 150.0 and wl.arrival_s[-1] < 150.0
    full = W.synthesize_profile("chat", prof, 1)
    assert np.array_equal(full.arrival_s[:wl.n], wl.arrival_s)
    with pytest.raises(FastsimInputError, match="span"):
        W.synthesize_profile("chat", prof, 1, horizon_s=201.0)
    with pytest.raises(FastsimInputError, match="rate_scale"):
        prof.scaled(0.0)


@pytest.mark.parametrize("name,rows,days,gaps", [("m-large", 2016, 14, 0), ("m-mid", 2016, 14, 8),
                                                 ("m-small", 2016, 14, 12), ("deepseek-r1", 144, 1, 0)])
def test_shipped_profiles(name, rows, days, gaps):
    prof = W.read_rate_profile(name)
    assert prof.n_windows == rows and prof.span_s == days * 86400.0
    assert np.all(prof.window_s == 600.0)
    assert prof.gaps.count == gaps
    assert "ServeGen" in prof.source and "Apache-2.0" in prof.source
    documented = {"m-large": (195.8, 583.0), "m-mid": (1790.1, 3444.8), "m-small": (1174.4, 3879.5),
                  "deepseek-r1": (16.0, 42.5)}[name]
    assert float(np.mean(prof.rate_req_per_s)) == pytest.approx(documented[0], abs=0.05)
    assert prof.peak_rate_req_per_s == pytest.approx(documented[1], abs=0.05)


def test_gzip_and_single_window(tmp_path):
    f = tmp_path / "g.csv.gz"
    f.write_bytes(gzip.compress(b"window_start_s,rate_req_per_s\n0,1.5\n60,2\n"))
    prof = W.read_rate_profile(f)
    assert prof.name == "g" and prof.span_s == 120.0
    one = _csv(tmp_path, ["0,3"], "one.csv")
    with pytest.raises(FastsimInputError, match="one window"):
        W.read_rate_profile(one)
    assert W.read_rate_profile(one, last_window_s=50.0).span_s == 50.0


@pytest.mark.parametrize("rows,line,col,what", [
    (["0,1", "600,-2"], 3, 2, "rate >= 0"),
    (["0,1", "600,abc"], 3, 2, "finite number"),
    (["0,1", "x,2"], 3, 1, "finite number"),
    (["0,1", "1200,2", "600,3"], 4, 1, "strictly ascending"),
    (["0,1", "0,2"], 3, 1, "strictly ascending"),
    (["5,1", "600,2"], 2, 1, "0 for the first window"),
    (["0,1", "600,nan"], 3, 2, "finite number"),
])
def test_errors_name_file_line_column(tmp_path, rows, line, col, what):
    f = _csv(tmp_path, rows)
    with pytest.raises(FastsimInputError) as exc:
        W.read_rate_profile(f)
    assert str(f) in exc.value.field and f"line {line}, column {col}" in exc.value.field
    assert what in exc.value.allowed


def test_other_errors(tmp_path):
    with pytest.raises(FastsimInputError, match="header"):
        W.read_rate_profile(_csv(tmp_path, ["0,1"], header="t,rate"))
    with pytest.raises(FastsimInputError, match="two comma-separated"):
        W.read_rate_profile(_csv(tmp_path, ["0,1,2"]))
    with pytest.raises(FastsimInputError, match="rate > 0"):
        W.read_rate_profile(_csv(tmp_path, ["0,0", "60,0"]))
    with pytest.raises(FastsimInputError, match="built-in profile name"):
        W.read_rate_profile(tmp_path / "missing.csv")
    with pytest.raises(FastsimInputError):
        W.RateProfile.from_arrays("x", [0, 10], [1.0, math.inf])


def test_cli_simulate_profile(tmp_path, capsys):
    f = _csv(tmp_path, ["0,2", "300,4", "600,0", "900,0", "1200,3"])
    argv = ["simulate", "--scenario", "chat", "--profile", str(f), "--rate-scale", "0.5", "--gpu", "H100",
            "--precision", "FP8", "--tp", "4", "--instances", "1"]
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    text = out + err
    assert "profile p (mean 1.5 req/s), 1500 s" in text
    assert "peak 2 req/s, mean 1.5, trough 1" in text and "1 run of zero-rate windows" in text
    assert "rates x 0.5" in text
    rc, out, err = run(capsys, *argv, "--horizon", "600", "--format", "json")
    assert rc == 0, err
    runs = json.loads(out)["runs"]
    wl = W.synthesize_profile("chat", W.read_rate_profile(f), W.seeds_for(0, 1)[0], rate_scale=0.5, horizon_s=600.0)
    assert runs[0]["horizon_s"] == 600.0 and runs[0]["requests"] == wl.n
    assert "cuts the profile's span" in err
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--rate-scale", "2", "--gpu", "H100",
                       "--precision", "FP8", "--tp", "4", "--instances", "1")
    assert rc == 2 and "--rate-scale" in err
