"""Tests of fastsim.workload: trace readers, synthetic draws with common random numbers, quantiles."""
from __future__ import annotations

import math
import time
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsim.catalog import LengthDist, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.workload import (
    BUILTIN_TRACES, DRAW_BLOCK, UnitDraws, Workload, length_means, length_quantiles, read_trace,
    scenario_workload, seeds_for, synthesize, synthesize_from_trace, synthesize_many, unit_draws,
)

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROWS = ("2023-11-16 18:15:46.6805900,374,44\n"
             "2023-11-16 18:15:50.9951690,396,109\n")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------------
# Built-in traces: the figures of the data README
# ---------------------------------------------------------------------------------------------

def test_azure_conv_figures():
    w = read_trace("azure-conv")
    assert w.n == 19366
    assert w.arrival_s[0] == 0.0
    assert w.duration_s == pytest.approx(3501.7, abs=0.05)
    assert w.mean_rate_req_per_s == pytest.approx(5.53, abs=0.005)
    assert w.mean_prompt_tokens == pytest.approx(1154.7, abs=0.05)
    assert w.prompt_quantile(0.5) == 1020
    assert w.prompt_quantile(0.9) == pytest.approx(2734.5)
    assert w.prompt_quantile(0.99) == 4142
    assert w.mean_output_tokens == pytest.approx(211.1, abs=0.05)
    assert w.output_quantile(0.9) == 424
    assert int(w.output_tokens.max()) == 1000  # capped upstream
    assert length_quantiles(w) == (pytest.approx(2734.5), pytest.approx(424.0))
    assert w.arrival_s.dtype == np.float64 and w.prompt_tokens.dtype == np.int64
    assert np.all(np.diff(w.arrival_s) >= 0)
    assert "CC-BY-4.0" in w.source


def test_azure_code_figures():
    w = read_trace("Azure-Code")  # names are case-insensitive
    assert w.n == 8819
    assert w.duration_s == pytest.approx(3435.9, abs=0.05)
    assert w.mean_rate_req_per_s == pytest.approx(2.57, abs=0.005)
    assert w.prompt_quantile(0.9) == pytest.approx(5187.6, abs=0.01)
    assert w.output_quantile(0.9) == 55
    assert w.interarrival_cv == pytest.approx(13, abs=0.5)  # very bursty


def test_builtin_trace_is_cached_and_read_only():
    w = read_trace("azure-conv")
    assert read_trace("azure-conv") is w
    with pytest.raises(ValueError):
        w.prompt_tokens[0] = 1


def test_azure_conv_reads_fast():
    path = Path(str(resources.files("fastsim").joinpath("data", "traces", BUILTIN_TRACES["azure-conv"][0])))
    t0 = time.perf_counter()
    w = read_trace(path)  # a path: not cached
    elapsed = time.perf_counter() - t0
    assert w.n == 19366
    assert elapsed < 1.0


@pytest.mark.skipif(not MOONCAKE.exists(), reason="Mooncake trace not present beside the repository")
def test_mooncake_trace():
    w = read_trace(MOONCAKE)
    assert w.n == 12031
    assert w.duration_s == pytest.approx(3537.0, abs=0.05)
    assert w.mean_prompt_tokens == pytest.approx(12035, abs=0.5)
    assert w.prompt_quantile(0.9) == 27367
    assert w.output_quantile(0.9) == 597
    # Llama-3.1's 131,072-token window holds every request (largest P + O is 126,527) ...
    assert w.exceeding_context(131072) == 0
    assert int(w.total_tokens().max()) == 126527
    # ... but an 8K-context model cannot serve 46% of them: they are counted, not truncated.
    assert w.exceeding_context(8192) == 5570
    assert w.exceeding_context(8192) / w.n == pytest.approx(0.463, abs=0.001)


# ---------------------------------------------------------------------------------------------
# Readers on small files: formats, sorting, errors naming the line
# ---------------------------------------------------------------------------------------------

def test_csv_roundtrip_and_crlf_bom(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(("\ufeff" + HEADER + GOOD_ROWS).replace("\n", "\r\n").encode("utf-8"))
    w = read_trace(str(p))
    assert w.n == 2 and w.name == "t"
    np.testing.assert_allclose(w.arrival_s, [0.0, 4.314579])
    assert w.prompt_tokens.tolist() == [374, 396]
    assert w.output_tokens.tolist() == [44, 109]


def test_csv_timestamps_that_go_back_are_refused_naming_the_first_row(tmp_path):
    """A trace lists requests in arrival order: a row earlier than the one before it is refused, not reordered."""
    p = write(tmp_path, "u.csv", HEADER
              + "2023-11-16 18:00:01.0,20,2\n"
              + "2023-11-16 18:00:02.5,10,1\n"
              + "2023-11-16 18:00:02.5,30,3\n"
              + "2023-11-16 18:00:01.0,40,4\n")
    with pytest.raises(FastsimInputError) as exc:
        read_trace(p)
    e = exc.value
    assert e.field == f"{p}, line 5, TIMESTAMP" and e.value == "2023-11-16 18:00:01.0"
    assert e.allowed.startswith("a time >= the previous row's (line 4: '2023-11-16 18:00:02.5')")
    assert str(e).count("\n") == 0
    # equal times are requests sent at once: kept, in file order
    w = read_trace(write(tmp_path, "eq.csv", HEADER + "2023-11-16 18:00:01.0,20,2\n"
                         + "2023-11-16 18:00:01.0,40,4\n" + "2023-11-16 18:00:02.5,10,1\n"))
    assert w.arrival_s.tolist() == [0.0, 0.0, 1.5] and w.prompt_tokens.tolist() == [20, 40, 10]


@pytest.mark.parametrize("rows, line, value, allowed", [
    ("-1.5,10,1\n0,20,2\n", 2, "-1.5", "a time >= 0 (seconds from the trace's start)"),
    ("3,10,1\n2.5,20,2\n", 3, "2.5", "a time >= the previous row's (line 2: '3')"),
])
def test_csv_numeric_timestamps_negative_or_backwards(tmp_path, rows, line, value, allowed):
    p = write(tmp_path, "n.csv", HEADER + rows)
    with pytest.raises(FastsimInputError) as exc:
        read_trace(p)
    assert exc.value.field == f"{p}, line {line}, TIMESTAMP" and exc.value.value == value
    assert exc.value.allowed.startswith(allowed)


def test_csv_numeric_seconds_and_column_order(tmp_path):
    p = write(tmp_path, "s.csv", "GeneratedTokens,TIMESTAMP,ContextTokens,extra\n5,10.5,100,x\n7,12.0,200,y\n")
    w = read_trace(p)
    assert w.arrival_s.tolist() == [0.0, 1.5]
    assert w.prompt_tokens.tolist() == [100, 200]
    assert w.output_tokens.tolist() == [5, 7]


def test_jsonl_by_content_and_extension(tmp_path):
    rows = ('{"timestamp": 0, "input_length": 20, "output_length": 1, "hash_ids": [1]}\n'
            '{"timestamp": 3000, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n')
    for name in ("m.jsonl", "m.log"):
        w = read_trace(write(tmp_path, name, rows))
        assert w.arrival_s.tolist() == [0.0, 3.0]
        assert w.prompt_tokens.tolist() == [20, 10]


def _err(path) -> str:
    with pytest.raises(FastsimInputError) as info:
        read_trace(path)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("body, line, words", [
    (HEADER + GOOD_ROWS + "2023-11-16 18:15:51.0,12\n", 4, "3 comma-separated fields"),
    (HEADER + GOOD_ROWS + "2023-11-16 18:15:51.0,12,0\n", 4, "GeneratedTokens"),
    (HEADER + "2023-11-16 18:15:51.0,-3,5\n", 2, "ContextTokens"),
    (HEADER + GOOD_ROWS + "2023-11-16 18:15:51.0,12,-1\n", 4, "GeneratedTokens"),
    (HEADER + GOOD_ROWS + "2023-11-16 18:15:51.0,12.5,3\n", 4, "ContextTokens"),
    (HEADER + GOOD_ROWS + "\n" + "yesterday,12,3\n", 5, "TIMESTAMP"),
    (HEADER + GOOD_ROWS + "2023-13-16 18:15:51.0,12,3\n", 4, "TIMESTAMP"),
    (HEADER + "NaT,12,3\n", 2, "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens\n" + "2023-11-16 18:15:51.0,12\n", 1, "header"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5,5\nlater,5,5\n", 3, "TIMESTAMP"),
])
def test_csv_errors_name_file_and_line(tmp_path, body, line, words):
    p = write(tmp_path, "bad.csv", body)
    msg = _err(p)
    assert f"line {line}" in msg
    assert "bad.csv" in msg
    assert words in msg


def test_zero_output_is_rejected_not_clipped(tmp_path):
    msg = _err(write(tmp_path, "z.csv", HEADER + GOOD_ROWS + "2023-11-16 18:15:51.0,12,0\n"))
    assert "line 4" in msg and "first token" in msg


@pytest.mark.parametrize("body, line, words", [
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}\n',
     2, "output_length missing"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 0}\n', 1, "output_length"),
    ('{"timestamp": 0, "input_length": -5, "output_length": 3}\n', 1, "input_length"),
    ('{"timestamp": 0, "input_length": 5.5, "output_length": 3}\n', 1, "input_length"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 3}\n\n{"timestamp": 0, "input_length": 5\n',
     3, "JSON"),
    ('[1, 2, 3]\n', 1, "JSON object"),
    ('{"timestamp": "soon", "input_length": 5, "output_length": 3}\n', 1, "timestamp"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, body, line, words):
    msg = _err(write(tmp_path, "bad.jsonl", body))
    assert f"line {line}" in msg and "bad.jsonl" in msg and words in msg


def test_missing_empty_and_header_only(tmp_path):
    assert "not found" in _err(tmp_path / "nope.csv")
    assert "empty file" in _err(write(tmp_path, "empty.csv", ""))
    assert "empty file" in _err(write(tmp_path, "blank.jsonl", "\n  \n"))
    assert "no rows" in _err(write(tmp_path, "hdr.csv", HEADER))
    assert "directory" in _err(tmp_path)


def test_unknown_builtin_lists_builtins():
    msg = _err("azure-chat")
    assert "azure-conv" in msg and "azure-code" in msg


def test_non_utf8_names_line(tmp_path):
    p = tmp_path / "latin.csv"
    p.write_bytes((HEADER + GOOD_ROWS).encode() + b"2023-11-16 18:15:51.0,1\xe9,3\n")
    assert "line 4" in _err(p)


# ---------------------------------------------------------------------------------------------
# The Workload object
# ---------------------------------------------------------------------------------------------

def test_workload_validation():
    with pytest.raises(FastsimInputError, match="equal length"):
        Workload("x", [0.0, 1.0], [1], [1, 1])
    with pytest.raises(FastsimInputError, match=r"arrival_s\[2\]"):
        Workload("x", [0.0, 2.0, 1.0], [1, 1, 1], [1, 1, 1])
    with pytest.raises(FastsimInputError, match=r"output_tokens\[1\]"):
        Workload("x", [0.0, 1.0], [1, 1], [1, 0])
    with pytest.raises(FastsimInputError, match="horizon"):
        Workload("x", [0.0, 5.0], [1, 1], [1, 1], horizon_s=4.0)


def test_workload_does_not_alias_caller_arrays():
    a = np.array([0.0, 1.0])
    w = Workload("x", a, [3, 4], [5, 6])
    a[1] = 99.0
    assert a.flags.writeable and w.arrival_s[1] == 1.0


def test_rescaled_and_exceeding_context():
    w = Workload("x", [0.0, 1.0, 3.0, 4.0], [10, 100, 1000, 5], [1, 2, 3, 4], "test")
    assert w.mean_rate_req_per_s == 1.0
    r = w.rescaled(4.0)
    assert r.mean_rate_req_per_s == pytest.approx(4.0)
    np.testing.assert_allclose(np.diff(r.arrival_s), np.diff(w.arrival_s) / 4.0)
    assert r.prompt_tokens is w.prompt_tokens
    assert w.exceeding_context(100) == 2 and w.exceeding_context(1003) == 0
    with pytest.raises(FastsimInputError):
        w.exceeding_context(0)
    with pytest.raises(FastsimInputError):
        w.rescaled(-1)
    with pytest.raises(FastsimInputError):
        Workload("one", [0.0], [1], [1]).rescaled(2.0)
    with pytest.raises(FastsimInputError):
        w.prompt_quantile(1.5)


def test_rescaled_trace_keeps_burstiness():
    w = read_trace("azure-code")
    r = w.rescaled(10.0)
    assert r.mean_rate_req_per_s == pytest.approx(10.0, rel=1e-12)
    assert r.interarrival_cv == pytest.approx(w.interarrival_cv, rel=1e-9)
    assert r.n == w.n


@given(rate=st.floats(0.01, 1e4), scale=st.floats(1e-3, 1e3))
@settings(max_examples=50, deadline=None)
def test_rescaled_hits_any_target(rate, scale):
    w = Workload("x", np.cumsum(np.linspace(0.1, 2.0, 50)), np.ones(50), np.ones(50))
    r = w.rescaled(rate).rescaled(rate * scale)
    assert r.mean_rate_req_per_s == pytest.approx(rate * scale, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Length figures (exercise 5)
# ---------------------------------------------------------------------------------------------

def test_exercise_5_p90():
    p90, _ = length_quantiles(default_catalog().scenario("coding-agent"), 0.9)
    assert abs(p90 - 16195) <= 1.0
    assert length_quantiles((LengthDist("lognormal", 8000, 0.8), LengthDist("fixed", 64)))[0] == \
        pytest.approx(p90)
    assert length_quantiles("coding-agent", 0.9)[1] == pytest.approx(809.73, abs=0.01)
    assert length_quantiles((LengthDist("fixed", 100), LengthDist("fixed", 7)), 0.9) == (100.0, 7.0)
    assert length_means("chat") == (1000.0, 250.0)
    with pytest.raises(FastsimInputError):
        length_quantiles("chat", 2.0)
    with pytest.raises(FastsimInputError):
        length_quantiles(42)


# ---------------------------------------------------------------------------------------------
# Synthetic draws: common random numbers, distributions, determinism
# ---------------------------------------------------------------------------------------------

CHAT = default_catalog().scenario("chat")


def test_unit_draws_shape_and_prefix():
    a = unit_draws(7, 3 * DRAW_BLOCK + 5)
    b = unit_draws(7, 17)
    assert isinstance(a, UnitDraws) and a.n == 3 * DRAW_BLOCK + 5 and b.n == 17
    for f in ("gaps", "prompt_z", "output_z", "pick_u"):
        assert getattr(a, f).dtype == np.float64
        np.testing.assert_array_equal(getattr(a, f)[:17], getattr(b, f))
    assert unit_draws(7, 0).gaps.shape == (0,)
    assert not np.array_equal(unit_draws(8, 17).gaps, b.gaps)


def test_unit_gaps_mean_one():
    ud = unit_draws(1, 200_000)
    assert ud.gaps.mean() == pytest.approx(1.0, abs=0.01)
    assert ud.gaps.std() == pytest.approx(1.0, abs=0.01)
    g = unit_draws(1, 200_000, arrival="gamma", cv=3.0).gaps
    assert g.mean() == pytest.approx(1.0, abs=0.03)
    assert g.std() / g.mean() == pytest.approx(3.0, rel=0.05)
    assert 0.0 <= ud.pick_u.min() and ud.pick_u.max() < 1.0


def test_crn_two_rates_same_requests():
    lo = synthesize(CHAT, 10.0, 600.0, seed=3)
    hi = synthesize(CHAT, 20.0, 600.0, seed=3)
    k = lo.n
    assert 0 < k < hi.n
    # same requests by index, lengths identical
    np.testing.assert_array_equal(lo.prompt_tokens, hi.prompt_tokens[:k])
    np.testing.assert_array_equal(lo.output_tokens, hi.output_tokens[:k])
    # arrival times exactly proportional to 1 / rate (a power-of-two ratio is exact in binary)
    np.testing.assert_array_equal(lo.arrival_s, hi.arrival_s[:k] * 2.0)
    # and, at any ratio, both are the unit-rate cumsum divided by the rate
    ud = unit_draws(3, hi.n)
    np.testing.assert_array_equal(hi.arrival_s, np.cumsum(ud.gaps) / 20.0)
    third = synthesize(CHAT, 30.0, 600.0, seed=3)
    np.testing.assert_allclose(third.arrival_s[:k] * 30.0, lo.arrival_s * 10.0, rtol=1e-14)


@given(seed=st.integers(0, 2**32), r1=st.floats(0.5, 50.0), r2=st.floats(0.5, 50.0),
       horizon=st.floats(1.0, 200.0))
@settings(max_examples=30, deadline=None)
def test_crn_property(seed, r1, r2, horizon):
    a = synthesize(CHAT, r1, horizon, seed)
    b = synthesize(CHAT, r2, horizon, seed)
    k = min(a.n, b.n)
    np.testing.assert_array_equal(a.prompt_tokens[:k], b.prompt_tokens[:k])
    np.testing.assert_array_equal(a.output_tokens[:k], b.output_tokens[:k])
    np.testing.assert_allclose(a.arrival_s[:k] * r1, b.arrival_s[:k] * r2, rtol=1e-13)
    for w in (a, b):
        assert w.horizon_s == horizon
        assert np.all(w.arrival_s < horizon) and np.all(np.diff(w.arrival_s) >= 0)
        assert np.all(w.prompt_tokens >= 1) and np.all(w.output_tokens >= 1)
    # the window is full: the next arrival (one more draw) falls at or past the horizon
    ud = unit_draws(seed, a.n + 1)
    assert np.cumsum(ud.gaps)[-1] / r1 >= horizon


def test_window_never_cut_short_for_bursty_gamma():
    w = synthesize(CHAT, 2.5, 3600.0, seed=11, arrival="gamma", cv=13.0)  # Azure code's burstiness
    ud = unit_draws(11, w.n + 1, arrival="gamma", cv=13.0)
    assert np.cumsum(ud.gaps)[-1] / 2.5 >= 3600.0
    np.testing.assert_array_equal(w.arrival_s, (np.cumsum(ud.gaps) / 2.5)[:w.n])


def test_short_first_draw_is_extended_not_cut(monkeypatch):
    from fastsim import workload as wl
    full = synthesize(CHAT, 20.0, 600.0, seed=4)
    monkeypatch.setattr(wl, "_initial_draws", lambda expect, cv: 1)  # far too few: must draw more
    short = synthesize(CHAT, 20.0, 600.0, seed=4)
    assert short.n == full.n
    np.testing.assert_array_equal(short.arrival_s, full.arrival_s)
    np.testing.assert_array_equal(short.output_tokens, full.output_tokens)


def test_lognormal_sample_means():
    ws = synthesize_many(CHAT, 50.0, 600.0, seed=0, n_seeds=4)
    p = np.concatenate([w.prompt_tokens for w in ws])
    o = np.concatenate([w.output_tokens for w in ws])
    assert p.size > 100_000
    assert p.mean() == pytest.approx(1000.0, rel=0.02)
    assert o.mean() == pytest.approx(250.0, rel=0.02)
    # the log of the lengths has the scenario's sigma
    assert np.log(p).std() == pytest.approx(0.8, abs=0.01)
    np.testing.assert_allclose(np.quantile(p, 0.9), CHAT.prompt.quantile(0.9), rtol=0.02)
    assert np.mean([w.n for w in ws]) == pytest.approx(30000, rel=0.01)


def test_fixed_lengths_and_pair_input():
    w = synthesize((LengthDist("fixed", 128.4), LengthDist("fixed", 0.2)), 5.0, 60.0, seed=1)
    assert set(w.prompt_tokens.tolist()) == {128} and set(w.output_tokens.tolist()) == {1}


def test_determinism_and_seed_forms():
    a = synthesize("chat", 20.0, 60.0, seed=5)
    b = synthesize(CHAT, 20.0, 60.0, seed=np.random.SeedSequence(5))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    s1, s2 = seeds_for(5, 3), seeds_for(5, 3)
    assert [s.spawn_key for s in s1] == [(0,), (1,), (2,)]
    many = synthesize_many(CHAT, 20.0, 60.0, seed=5, n_seeds=3)
    assert len(many) == 3
    for s, w in zip(s2, many):
        np.testing.assert_array_equal(synthesize(CHAT, 20.0, 60.0, seed=s).arrival_s, w.arrival_s)
    assert not np.array_equal(many[0].prompt_tokens[:50], many[1].prompt_tokens[:50])
    # a SeedSequence given to seeds_for is not consumed
    root = np.random.SeedSequence(9)
    assert [c.spawn_key for c in seeds_for(root, 2)] == [c.spawn_key for c in seeds_for(root, 2)]


def test_scenario_workload_uses_its_rate():
    w = scenario_workload("chat", horizon_s=600.0, seed=0)
    assert w.name == "chat" and w.duration_s == 600.0
    assert w.mean_rate_req_per_s == pytest.approx(CHAT.rate_req_per_s, rel=0.05)
    np.testing.assert_array_equal(w.prompt_tokens, synthesize(CHAT, 20.0, 600.0, 0).prompt_tokens)
    assert "seed 0" in w.source


def test_synthesize_from_trace():
    tr = read_trace("azure-conv")
    w = synthesize_from_trace(tr, 20.0, 600.0, seed=2)
    assert w.mean_rate_req_per_s == pytest.approx(20.0, rel=0.05)
    pairs = set(zip(tr.prompt_tokens.tolist(), tr.output_tokens.tolist()))
    assert all(pq in pairs for pq in zip(w.prompt_tokens.tolist(), w.output_tokens.tolist()))
    w2 = synthesize_from_trace(tr, 40.0, 600.0, seed=2)
    np.testing.assert_array_equal(w.prompt_tokens, w2.prompt_tokens[:w.n])
    np.testing.assert_array_equal(w.arrival_s, synthesize(CHAT, 20.0, 600.0, 2).arrival_s)
    big = synthesize_from_trace(tr, 100.0, 600.0, seed=2)
    assert big.mean_prompt_tokens == pytest.approx(tr.mean_prompt_tokens, rel=0.03)


@pytest.mark.parametrize("kwargs, field", [
    (dict(rate_req_per_s=0.0), "rate_req_per_s"),
    (dict(rate_req_per_s=float("inf")), "rate_req_per_s"),
    (dict(horizon_s=-1.0), "horizon_s"),
    (dict(seed=-1), "seed"),
    (dict(seed=1.5), "seed"),
    (dict(arrival="uniform"), "arrival"),
    (dict(arrival="gamma", cv=0.0), "cv"),
    (dict(cv=2.0), "cv"),
    (dict(rate_req_per_s=1e6, horizon_s=1e6), "rate_req_per_s x horizon_s"),
])
def test_synthesize_errors(kwargs, field):
    args = dict(rate_req_per_s=10.0, horizon_s=60.0, seed=0)
    args.update(kwargs)
    with pytest.raises(FastsimInputError) as info:
        synthesize(CHAT, **args)
    assert info.value.field == field


def test_synthesize_bad_dists():
    with pytest.raises(FastsimInputError):
        synthesize((LengthDist("pareto", 10, 1), LengthDist("fixed", 1)), 1.0, 10.0)
    with pytest.raises(FastsimInputError):
        synthesize((LengthDist("lognormal", -10, 1), LengthDist("fixed", 1)), 1.0, 10.0)
    with pytest.raises(FastsimInputError):
        synthesize("no-such-scenario", 1.0, 10.0)
    with pytest.raises(FastsimInputError):
        synthesize_from_trace("azure-conv", 1.0, 10.0)


def test_tiny_window_may_be_empty():
    w = synthesize(CHAT, 1e-3, 1.0, seed=0)
    assert w.n == 0 and w.duration_s == 1.0 and w.mean_rate_req_per_s == 0.0
    assert math.isnan(w.mean_prompt_tokens)
    with pytest.raises(FastsimInputError):
        w.prompt_quantile(0.9)


# ---------------------------------------------------------------------------------------------
# A timestamp column mixing date-times and plain numbers is refused
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows, line, value, kind", [
    # the user's file: a date-time first, a plain number second (was read as a 7.2e9-s span)
    ("2023-11-16 18:15:46.6805900,374,44\n1700000000,396,109\n", 3, "1700000000", "a date-time"),
    (GOOD_ROWS + "\n12.5,10,1\n", 5, "12.5", "a date-time"),
    (GOOD_ROWS + "2023,10,1\n", 4, "2023", "a date-time"),
    (GOOD_ROWS + "1.7e9,10,1\n", 4, "1.7e9", "a date-time"),
    ("12.5,374,44\n2023-11-16 18:15:46.6805900,396,109\n", 3, "2023-11-16 18:15:46.6805900", "a finite number"),
    ("0,374,44\n1,1,1\n2023-11-16,396,109\n", 4, "2023-11-16", "a finite number"),
])
def test_csv_mixed_timestamp_column_is_refused(tmp_path, rows, line, value, kind):
    p = write(tmp_path, "mixed.csv", HEADER + rows)
    with pytest.raises(FastsimInputError) as info:
        read_trace(p)
    e = info.value
    msg = str(e)
    assert "\n" not in msg
    assert e.field == f"{p}, line {line}, TIMESTAMP"
    assert e.value == value
    assert kind + " like the first row's" in msg and "all date-times or all numbers" in msg


def test_csv_mixed_timestamp_line_counts_blank_lines(tmp_path):
    p = write(tmp_path, "m.csv", HEADER + GOOD_ROWS + "\n\n42,1,1\n")
    msg = _err(p)
    assert "m.csv, line 6, TIMESTAMP" in msg and "'42'" in msg and "all date-times or all numbers" in msg


def test_csv_all_date_times_or_all_numbers_still_read(tmp_path):
    assert read_trace(write(tmp_path, "d.csv", HEADER + GOOD_ROWS)).n == 2
    w = read_trace(write(tmp_path, "n.csv", HEADER + "1700000000,1,1\n1.7e9,3,3\n1700000002.5,2,2\n"))
    assert w.arrival_s.tolist() == [0.0, 0.0, 2.5]
