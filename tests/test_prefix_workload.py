"""Tests of prefix blocks on workloads: PrefixBlocks, Mooncake hash_ids, synthetic shared prefixes, reuse bound."""
from __future__ import annotations

import configparser
import fnmatch
import gzip
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsim.catalog import LengthDist
from fastsim.errors import FastsimInputError
from fastsim.workload import (
    BUILTIN_TRACES, MOONCAKE_BLOCK_TOKENS, SESSION_GAP_S, PrefixBlocks, Workload, prefix_reuse_bound,
    read_trace, scenario_workload, synthesize, synthesize_from_trace, synthesize_many, unit_draws,
)

REPO = Path(__file__).resolve().parents[1]
DISTS = (LengthDist("lognormal", 300.0, 0.8), LengthDist("lognormal", 60.0, 0.8))


def _err(fn, *a, **k) -> FastsimInputError:
    with pytest.raises(FastsimInputError) as exc:
        fn(*a, **k)
    return exc.value


def reference_bound(wl: Workload) -> float:
    """The reuse bound by its definition, one request and one block at a time.

    A block becomes available once full in the request that lists it: within the prompt, or with
    ``spans_output`` within the first P + O - 1 tokens (an earlier answer serves a later prompt).
    """
    pb = wl.prefix
    bt = pb.block_tokens
    seen, hit = set(), 0
    for i in range(wl.n):
        p = int(wl.prompt_tokens[i])
        kv = p + int(wl.output_tokens[i]) - 1 if pb.spans_output else p
        b = [int(x) for x in pb.ids[pb.offsets[i]:pb.offsets[i + 1]]]
        run = 0
        for j in range(min(len(b), (p - 1) // bt)):
            if b[j] not in seen:
                break
            run += 1
        hit += run * bt
        seen.update(x for j, x in enumerate(b) if (j + 1) * bt <= kv)
    return hit / int(wl.prompt_tokens.sum())


def blocks_of(wl: Workload) -> list:
    return [wl.prefix.blocks(i).tolist() for i in range(wl.n)]


# ---------------------------------------------------------------------------------------------
# PrefixBlocks and the reuse bound on hand-built workloads
# ---------------------------------------------------------------------------------------------

def four_requests() -> Workload:
    # block_tokens 4. r0: P 10, blocks 0, 1 full, 2 partial. r1: P 12, all full: hits 0, 1 (cap
    # floor(11/4) = 2). r2: P 13: 0, 1 hit; 2 was only a partial block in r0, so the run stops.
    # r3: P 16: 0, 1, 3 (full in r1) hit = 3 blocks = the cap floor(15/4); 6 never seen.
    pb = PrefixBlocks.from_lists(4, [[0, 1, 2], [0, 1, 3], [0, 1, 2, 5], [0, 1, 3, 6]])
    return Workload("four", [0.0, 1.0, 2.0, 3.0], [10, 12, 13, 16], [1, 1, 1, 1], prefix=pb)


def test_four_request_reuse_bound_exact():
    w = four_requests()
    assert w.prefix.offsets.tolist() == [0, 3, 6, 10, 14]
    assert w.prefix.blocks(2).tolist() == [0, 1, 2, 5]
    assert w.prefix.blocks(-1).tolist() == [0, 1, 3, 6]
    assert w.prefix.blocks_per_request().tolist() == [3, 3, 4, 4]
    assert w.prefix.n_requests == 4
    # hits 0 + 8 + 8 + 12 = 28 tokens of 10 + 12 + 13 + 16 = 51
    assert prefix_reuse_bound(w) == 28 / 51
    assert reference_bound(w) == 28 / 51
    s = w.summary()
    assert s["prefix_block_tokens"] == 4
    assert s["prefix_blocks_per_request_mean"] == 3.5
    assert s["prefix_reuse_bound"] == 28 / 51


def test_reuse_bound_cap_own_blocks_and_ties():
    # identical prompts of 8 tokens (2 full blocks): the second hits at most floor(7/4) = 1 block
    w = Workload("x", [0.0, 0.0, 0.0], [8, 8, 5], [1, 1, 1],
                 prefix=PrefixBlocks.from_lists(4, [[7, 9], [7, 9], [9, 7]]))
    # r2 lists 9 first: 9 was seen (full, in r0) so it hits 1 block (cap floor(4/4) = 1)
    assert prefix_reuse_bound(w) == (0 + 4 + 4) / 21
    # a request's own repeated blocks do not serve itself
    w1 = Workload("x", [0.0], [100], [1], prefix=PrefixBlocks.from_lists(4, [[3, 3, 3]]))
    assert prefix_reuse_bound(w1) == 0.0
    # requests without blocks count in the denominator
    w2 = Workload("x", [0.0, 1.0, 2.0], [9, 9, 30], [1, 1, 1],
                  prefix=PrefixBlocks.from_lists(4, [[1, 2], [1, 2], []]))
    assert prefix_reuse_bound(w2) == 8 / 48


def test_reuse_bound_errors_and_empty():
    assert "prefix" in _err(prefix_reuse_bound, Workload("x", [0.0], [5], [1])).field
    assert _err(prefix_reuse_bound, "chat").field == "workload"
    empty = Workload("e", [], [], [], prefix=PrefixBlocks(4, [0], []))
    assert math.isnan(prefix_reuse_bound(empty))
    assert math.isnan(empty.summary()["prefix_reuse_bound"])
    none = Workload("n", [0.0], [5], [1]).summary()
    assert none["prefix_block_tokens"] is None and math.isnan(none["prefix_reuse_bound"])


@pytest.mark.parametrize("prefix, field", [
    ("blocks", "Workload.prefix"),
    (PrefixBlocks(0, [0, 1, 1], [5]), "Workload.prefix.block_tokens"),
    (PrefixBlocks(True, [0, 1, 1], [5]), "Workload.prefix.block_tokens"),
    (PrefixBlocks(4.0, [0, 1, 1], [5]), "Workload.prefix.block_tokens"),
    (PrefixBlocks(4, [0, 1], [5]), "Workload.prefix.offsets"),
    (PrefixBlocks(4, [[0, 1, 1]], [5]), "Workload.prefix.offsets"),
    (PrefixBlocks(4, [1, 1, 1], [5]), "Workload.prefix.offsets[0]"),
    (PrefixBlocks(4, [0, 2, 1], [5, 6]), "Workload.prefix.offsets[2]"),
    (PrefixBlocks(4, [0, 1, 1], [5, 6]), "Workload.prefix.offsets[2]"),
    (PrefixBlocks(4, [0, 1, 2], [5, -1]), "Workload.prefix.ids[1]"),
    (PrefixBlocks(4, [0, 1, 2], [5, 1.5]), "Workload.prefix.ids[1]"),
    (PrefixBlocks(4, [0, 1, 2], ["a", "b"]), "Workload.prefix.ids"),
    (PrefixBlocks(4, [0, 2, 3], [5, 6, 7]), "Workload.prefix.offsets (request 0)"),  # P 4: 1 block at most
])
def test_validation_names_the_field(prefix, field):
    e = _err(Workload, "x", [0.0, 1.0], [4, 9], [1, 1], prefix=prefix)
    assert e.field == field


def test_prefix_stored_read_only_int64_and_partial_last_block_allowed():
    pb = PrefixBlocks(4, [0, 2, 5], np.array([1.0, 2.0, 1.0, 2.0, 3.0]))  # integral floats
    w = Workload("x", [0.0, 1.0], [5, 9], [1, 1], prefix=pb)  # ceil(5/4) = 2, ceil(9/4) = 3
    for a in (w.prefix.offsets, w.prefix.ids):
        assert a.dtype == np.int64 and a.flags.c_contiguous and not a.flags.writeable
    assert isinstance(w.prefix, PrefixBlocks) and type(w.prefix.block_tokens) is int
    with pytest.raises(ValueError):
        w.prefix.ids[0] = 7
    assert "blocks[1]" in _err(PrefixBlocks.from_lists, 4, [[1], [2, -3]]).field
    assert _err(w.prefix.blocks, 2).field == "request index"


# ---------------------------------------------------------------------------------------------
# Mooncake: hash_ids and the built-in trace
# ---------------------------------------------------------------------------------------------

def test_mooncake_conv_builtin():
    w = read_trace("mooncake-conv")
    assert read_trace("Mooncake-Conv") is w
    assert w.n == 12031 and w.time_unit == "ms"
    assert w.duration_s == pytest.approx(3537.0, abs=0.05)
    assert w.prefix.block_tokens == MOONCAKE_BLOCK_TOKENS == 512
    assert w.prompt_tokens[0] == 6758 and w.output_tokens[0] == 500
    assert w.prefix.blocks(0).tolist() == list(range(14))           # ceil(6758 / 512) = 14
    assert w.prefix.blocks(1).tolist() == [0] + list(range(14, 28))  # input_length 7322
    assert w.prefix.blocks(3).tolist() == [0, 42, 43, 44, 45]       # input_length 2290
    assert w.prefix.ids.shape == (288500,)
    # Mooncake lists every block, the partial last one included
    assert np.array_equal(w.prefix.blocks_per_request(), -(-w.prompt_tokens // 512))
    bound = prefix_reuse_bound(w)
    assert bound == pytest.approx(0.373380, abs=5e-7)
    assert w.summary()["prefix_reuse_bound"] == bound
    assert w.summary()["prefix_blocks_per_request_mean"] == pytest.approx(288500 / 12031)
    # time_unit: its own unit or None
    assert read_trace("mooncake-conv", time_unit="ms") is w
    assert _err(read_trace, "mooncake-conv", time_unit="s").field == "time_unit"
    assert "date-times" in str(_err(read_trace, "azure-conv", time_unit="ms"))


def test_mooncake_conv_reference_bound_on_a_slice():
    w = read_trace("mooncake-conv")
    k = 1500
    sub = Workload("head", w.arrival_s[:k], w.prompt_tokens[:k], w.output_tokens[:k],
                   prefix=PrefixBlocks(512, w.prefix.offsets[:k + 1], w.prefix.ids[:w.prefix.offsets[k]]))
    assert prefix_reuse_bound(sub) == pytest.approx(reference_bound(sub), abs=1e-15)
    assert blocks_of(sub)[4] == [0] + list(range(46, 59))


def test_builtin_data_files_are_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    globs = [g.strip() for g in cfg["options.package_data"]["fastsim"].split(",")]
    root = resources.files("fastsim")
    names = [BUILTIN_TRACES["mooncake-conv"][0], "Mooncake_LICENSE-APACHE.txt", "ATTRIBUTION.md"]
    for fname in names:
        rel = f"data/traces/{fname}"
        assert root.joinpath("data", "traces", fname).is_file()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
    assert "Apache License" in root.joinpath("data", "traces", "Mooncake_LICENSE-APACHE.txt").read_text()
    assert "mooncake_conversation_trace.jsonl.gz" in root.joinpath("data", "traces", "ATTRIBUTION.md").read_text()


def write_jsonl(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return p


def row(t, p, o, h=None):
    r = {"timestamp": t, "input_length": p, "output_length": o}
    if h is not None:
        r["hash_ids"] = h
    return r


def test_mooncake_rows_keep_their_blocks_and_rows_without_ids(tmp_path):
    p = write_jsonl(tmp_path, [row(0, 600, 3, [0, 2]), row(1000, 10, 4), row(2000, 1000, 5, [0, 1])])
    w = read_trace(p)
    assert w.arrival_s.tolist() == [0.0, 1.0, 2.0]
    assert w.prompt_tokens.tolist() == [600, 10, 1000]
    assert blocks_of(w) == [[0, 2], [], [0, 1]]
    # 1000 tokens: block 0 hits (cap floor(999/512) = 1); the others miss
    assert prefix_reuse_bound(w) == 512 / 1610
    assert read_trace(write_jsonl(tmp_path, [row(0, 5, 1), row(1, 6, 1)], "none.jsonl")).prefix is None
    assert blocks_of(read_trace(write_jsonl(tmp_path, [row(0, 5, 1, []), row(1, 6, 1)], "e.jsonl"))) == [[], []]


@pytest.mark.parametrize("ts, line, value, allowed", [
    ([0, 2000, 1000], 3, 1000, "a time >= the previous row's (line 2: 2000)"),
    ([-5, 0, 1], 1, -5, "a time >= 0 (milliseconds from the trace's start)"),
])
def test_mooncake_timestamps_negative_or_backwards_are_refused(tmp_path, ts, line, value, allowed):
    """The first row whose timestamp is negative or earlier than the previous row's is named, with its value."""
    p = write_jsonl(tmp_path, [row(t, 600, 3, [0]) for t in ts])
    e = _err(read_trace, p)
    assert e.field == f"{p}, line {line}, timestamp" and e.value == value
    assert e.allowed.startswith(allowed)


def test_mooncake_dropped_rows_keep_blocks_aligned(tmp_path):
    p = write_jsonl(tmp_path, [row(0, 600, 3, [0, 2]), row(1, 700, 0, [0, 3]), row(2, 513, 1, [0, 4])])
    w = read_trace(p, skip_invalid=True)
    assert w.dropped == ((2, "output_length 0"),)
    assert blocks_of(w) == [[0, 2], [0, 4]]


def test_gzip_trace_path(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}\n'))
    w = read_trace(p)
    assert w.name == "t" and blocks_of(w) == [[4, 5]]
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b not gzip")
    assert _err(read_trace, bad).field == "trace file"


@pytest.mark.parametrize("h, what", [
    ("[0, 1]", "a string"),
    ([0, -1], "negative"),
    ([0, 1.0], "a float"),
    ([0, True], "a bool"),
    ([0, "1"], "a string id"),
    (None, "null"),
    ([0, 1, 2], "3 ids for 1,025 tokens is fine"),
    ([0, 1, 2, 3], "too many: ceil(1025 / 512) = 3"),
    ([2 ** 63], "beyond int64"),
])
def test_bad_hash_ids_name_file_line_and_field(tmp_path, h, what):
    rows = [row(0, 1025, 1, [0]), {"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": h}]
    p = write_jsonl(tmp_path, rows)
    if what.endswith("is fine"):
        assert blocks_of(read_trace(p)) == [[0], h]
        return
    e = _err(read_trace, p)
    assert e.field == f"{p}, line 2, hash_ids", what


# ---------------------------------------------------------------------------------------------
# Derived workloads carry the blocks of their requests
# ---------------------------------------------------------------------------------------------

def tagged_trace(lengths) -> Workload:
    """Prompt lengths unique per row; row r's blocks encode r, so a block list names its row."""
    n = len(lengths)
    p = np.array(lengths, dtype=np.int64) * 1000 + np.arange(n)       # unique
    rows = [[r * 10_000 + j for j in range(min(3, -(-int(p[r]) // 512)))] if r % 3 else [] for r in range(n)]
    return Workload("tagged", np.arange(n, dtype=np.float64) * 0.5, p, np.arange(n) + 1,
                    prefix=PrefixBlocks.from_lists(512, rows))


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=2, max_size=40),
       rate=st.floats(0.5, 50.0), seed=st.integers(0, 2 ** 32))
def test_rescaled_and_resampled_keep_blocks_aligned(lengths, rate, seed):
    tr = tagged_trace(lengths)
    expect = {int(p): tr.prefix.blocks(r).tolist() for r, p in enumerate(tr.prompt_tokens)}
    rs = tr.rescaled(rate)
    assert rs.prefix is tr.prefix or blocks_of(rs) == blocks_of(tr)
    assert rs.mean_rate_req_per_s == pytest.approx(rate)
    syn = synthesize_from_trace(tr, rate, 20.0, seed)
    assert syn.prefix.block_tokens == 512 and syn.prefix.n_requests == syn.n
    for i in range(syn.n):
        assert syn.prefix.blocks(i).tolist() == expect[int(syn.prompt_tokens[i])]


def test_resampled_without_blocks_and_repeated_rows_share_blocks():
    tr = Workload("one", [0.0, 1.0], [2000, 3000], [5, 6], prefix=PrefixBlocks.from_lists(512, [[0, 1, 2, 3], [9]]))
    syn = synthesize_from_trace(tr, 5.0, 30.0, 3)
    assert syn.n > 20
    # a row drawn again is the same prompt again: row 0 then hits 3 blocks (cap floor(1999/512)),
    # row 1 its one listed block
    first = {int(p): i for i, p in reversed(list(enumerate(syn.prompt_tokens)))}
    hits = sum({2000: 1536, 3000: 512}[int(p)] for i, p in enumerate(syn.prompt_tokens) if first[int(p)] != i)
    assert syn.summary()["prefix_reuse_bound"] == hits / syn.prompt_tokens.sum()
    assert synthesize_from_trace(read_trace("azure-conv"), 5.0, 10.0, 3).prefix is None


# ---------------------------------------------------------------------------------------------
# Synthetic shared prefixes and sessions
# ---------------------------------------------------------------------------------------------

def reference_sessions(u, o, rate, n_sys, turns, bt, gap):
    """The documented rule, one request at a time: (P, list of block id lists).

    A row lists the blocks of the request's first P + O - 1 tokens (prompt, then the answer
    tokens that get KV); a later turn repeats every full one of the previous turn's.
    """
    n = len(u)
    s_slots = max(1, int(round(rate * gap))) if turns > 1 else 1
    k0 = n_sys // bt
    p, blocks, next_id = [], [], k0
    for i in range(n):
        s, k = i % s_slots, i // s_slots
        b = turns - s % turns
        turn = k if k < b else (k - b) % turns
        if turn == 0:
            pi, kept = n_sys + int(u[i]), list(range(k0))
        else:
            j = i - s_slots
            pi = p[j] + int(o[j]) + int(u[i])
            kept = blocks[j][:(p[j] + int(o[j]) - 1) // bt]
        nb = -(-(pi + int(o[i]) - 1) // bt)
        fresh = list(range(next_id, next_id + nb - len(kept)))
        next_id += len(fresh)
        p.append(pi)
        blocks.append(kept + fresh)
    return p, blocks


@settings(max_examples=30, deadline=None)
@given(rate=st.floats(0.2, 30.0), seed=st.integers(0, 2 ** 32), n_sys=st.integers(0, 700),
       turns=st.integers(1, 6), bt=st.sampled_from([1, 7, 16, 64]), gap=st.floats(0.5, 200.0))
def test_synthesize_prefix_matches_the_documented_rule(rate, seed, n_sys, turns, bt, gap):
    base = synthesize(DISTS, rate, 15.0, seed)
    w = synthesize(DISTS, rate, 15.0, seed, shared_prefix_tokens=n_sys, session_turns=turns,
                   prefix_block_tokens=bt, session_gap_s=gap)
    # common random numbers: arrivals, outputs and drawn message lengths unchanged
    assert np.array_equal(w.arrival_s, base.arrival_s) and np.array_equal(w.output_tokens, base.output_tokens)
    assert base.prefix is None and w.horizon_s == base.horizon_s
    if n_sys == 0 and turns == 1:
        assert w.prefix is None and np.array_equal(w.prompt_tokens, base.prompt_tokens)
        return
    p, blocks = reference_sessions(base.prompt_tokens, base.output_tokens, rate, n_sys, turns, bt, gap)
    assert w.prompt_tokens.tolist() == p
    assert w.prefix.block_tokens == bt and w.prefix.spans_output
    assert blocks_of(w) == blocks
    # an id names its whole prefix: one position and one predecessor per id
    where = {}
    for b in blocks:
        for j, x in enumerate(b):
            assert where.setdefault(x, (j, b[j - 1] if j else -1)) == (j, b[j - 1] if j else -1)
    if w.n:
        assert prefix_reuse_bound(w) == pytest.approx(reference_bound(w), abs=1e-15)
    # same seed, same workload
    w2 = synthesize(DISTS, rate, 15.0, seed, shared_prefix_tokens=n_sys, session_turns=turns,
                    prefix_block_tokens=bt, session_gap_s=gap)
    assert np.array_equal(w2.prompt_tokens, w.prompt_tokens) and np.array_equal(w2.prefix.ids, w.prefix.ids)


def test_shared_system_prompt_exact():
    base = synthesize(DISTS, 4.0, 30.0, 11)
    w = synthesize(DISTS, 4.0, 30.0, 11, shared_prefix_tokens=100, prefix_block_tokens=16)
    assert np.array_equal(w.prompt_tokens, base.prompt_tokens + 100)
    assert all(w.prefix.blocks(i)[:6].tolist() == list(range(6)) for i in range(w.n))   # floor(100/16) = 6
    # each row spans prompt and answer: the blocks of its first P + O - 1 tokens
    assert np.array_equal(w.prefix.blocks_per_request(), -(-(w.prompt_tokens + w.output_tokens - 1) // 16))
    # every request after the first hits the 6 system blocks (96 tokens), nothing more
    assert prefix_reuse_bound(w) == 96 * (w.n - 1) / w.prompt_tokens.sum()
    assert "100-token system prompt" in w.source and "blocks of 16 tokens" in w.source


def test_sessions_small_exact():
    # rate 0.05 req/s x 60 s = 3 slots, 2 turns: slot 0 turns 0,1,0,..; slot 1 starts with a 1-turn session
    d = (LengthDist("fixed", 10.0, 0.0), LengthDist("fixed", 3.0, 0.0))
    w = synthesize(d, 0.05, 400.0, 2, session_turns=2, prefix_block_tokens=4, session_gap_s=60.0)
    assert w.n >= 9
    # request: slot, turn -> P: 0:(0,0)10 1:(1,0)10 2:(2,0)10 3:(0,1)23 4:(1,0)10 5:(2,1)23 6:(0,0)10 7:(1,1)23
    assert w.prompt_tokens[:8].tolist() == [10, 10, 10, 23, 10, 23, 10, 23]
    # a first turn's 10 + 3 - 1 = 12 tokens with KV are 3 full blocks; turn 1 (23 + 3 - 1 = 25
    # tokens, 7 blocks) repeats all 3, the answer's included, and adds 4
    assert blocks_of(w)[:4] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 2, 9, 10, 11, 12]]
    assert blocks_of(w)[5] == [6, 7, 8] + list(range(16, 20))
    # turn 1 hits its previous turn's 12 tokens (the cap floor(22 / 4) = 5 blocks is not reached)
    assert set(w.prompt_tokens.tolist()) == {10, 23}
    assert prefix_reuse_bound(w) == 12 * int((w.prompt_tokens == 23).sum()) / int(w.prompt_tokens.sum())
    assert "2 turns" in w.source and "3 concurrent slots" in w.source


def test_defaults_are_bit_identical_and_options_pass_through():
    a = synthesize("chat", 5.0, 60.0, 4)
    b = synthesize("chat", 5.0, 60.0, 4, shared_prefix_tokens=0, session_turns=1, prefix_block_tokens=32)
    assert a.prefix is None and b.prefix is None and a.source == b.source
    for x, y in ((a.arrival_s, b.arrival_s), (a.prompt_tokens, b.prompt_tokens), (a.output_tokens, b.output_tokens)):
        assert np.array_equal(x, y)
    ud = unit_draws(4, a.n)
    assert np.array_equal(np.cumsum(ud.gaps) / 5.0, a.arrival_s)
    many = synthesize_many("chat", 5.0, 30.0, 4, n_seeds=2, shared_prefix_tokens=64, session_turns=3)
    assert all(m.prefix is not None and m.prefix.block_tokens == 16 for m in many)
    sw = scenario_workload("chat", 20.0, 1, shared_prefix_tokens=32)
    assert sw.prefix.blocks(0)[:2].tolist() == [0, 1]
    assert SESSION_GAP_S == 120.0


@pytest.mark.parametrize("kw, field", [
    ({"shared_prefix_tokens": -1}, "shared_prefix_tokens"),
    ({"shared_prefix_tokens": 1.5}, "shared_prefix_tokens"),
    ({"session_turns": 0}, "session_turns"),
    ({"session_turns": True}, "session_turns"),
    ({"prefix_block_tokens": 0}, "prefix_block_tokens"),
    ({"session_gap_s": 0.0}, "session_gap_s"),
    ({"session_gap_s": float("inf")}, "session_gap_s"),
])
def test_synthesize_prefix_option_errors(kw, field):
    assert _err(synthesize, "chat", 1.0, 10.0, 0, **kw).field == field
