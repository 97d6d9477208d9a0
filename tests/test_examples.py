"""The four example scripts run and print what the lecture's scripts print.

01 and 02 always run; 03 and 04 need the simulator and run with short simulations
(FASTSIM_EXAMPLE_SEEDS=1, FASTSIM_EXAMPLE_HORIZON=120) to stay fast.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastsim.whatif import simulator_available

ROOT = Path(__file__).resolve().parents[1]
sim = pytest.mark.skipif(not simulator_available(), reason="the simulator (fastsim.sim) is not available")


def run(name, *args):
    env = dict(os.environ, FASTSIM_EXAMPLE_SEEDS="1", FASTSIM_EXAMPLE_HORIZON="120", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_01_ledger_and_ladder(tmp_path):
    out = run("01_full_stack_ledger.py", "--plot", str(tmp_path / "l.png"))
    for s in ("6.48", "0.06", "4.01", "2.02", "8.64", "8.48", "61.13", "+ speculative decoding"):
        assert s in out
    assert (tmp_path / "l.png").exists()


def test_02_planner():
    out = run("02_deployment_planner.py")
    for s in ("chat", "coding-agent", "offline-batch", "low-latency-8b", "0.444", "1.389", "0.556", "0.139",
              "16.41 req/s", "colocated / disaggregated"):
        assert s in out


@sim
def test_03_verify():
    out = run("03_verify_with_simulation.py")
    assert "Lesson one" in out and "Lesson two" in out and "cheapest verified" in out


@sim
def test_04_what_if():
    out = run("04_what_if.py")
    for s in ("TPOT target", "FP8 forbidden", "GPU prices", "model size", "traffic"):
        assert s in out
