"""`plan --emit` writes each plan's own engine settings, so a verification under other settings is refused."""
from __future__ import annotations

import pytest

from cliutil import run

BASE = ["plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--mode", "colocated",
        "--policy", "vllm", "--top-k", "1", "--seeds", "1", "--horizon", "30"]


@pytest.mark.parametrize("flags, named", [
    (["--max-num-seqs", "8"], "--max-num-seqs"),
    (["--max-num-batched-tokens", "4096"], "--max-num-batched-tokens"),
])
@pytest.mark.parametrize("emit", ["vllm", "sglang"])
def test_an_override_that_the_emitted_command_would_not_carry_is_refused(capsys, flags, named, emit):
    code, out, err = run(capsys, *BASE, *flags, "--emit", emit)
    assert code == 2 and out == ""
    assert f"{named}: got" in err and f"not with --emit {emit}" in err
