"""Fit the step model's constants to the shipped measurement set, per engine, and ship the fits that beat SPEC §3.

For each engine with rows from at least two source families, ``fastsim.validate.fit.fit_measurements``
fits the constants through the simulator (every row run as its benchmark ran) and cross-validates
them, leaving one source family out at a time. A fit is written to
``fastsim/data/calibrations/<engine>.toml`` (what ``fastsim validate --constants fitted`` uses)
**if and only if** its held-out median absolute error is below that of SPEC §3's constants on the
same held-out rows; every fit's figures, shipped or not, go to
``fastsim/data/calibrations/fit-report.json``, which ``tools/make_validation.py`` turns into a
section of ``docs/VALIDATION.md``. Never fitted to the rows its held-out figures report.

    python tools/make_fit.py [--engine trtllm --engine vllm] [--max-runs 120]

Takes some minutes on two cores (each fit evaluates the simulator over its rows tens of times).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastsim.catalog import load_catalog  # noqa: E402
from fastsim.validate import SHIPPED_CALIBRATIONS, SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements  # noqa: E402
from fastsim.validate.fit import fit_measurements  # noqa: E402
from fastsim.validate.run import unexpressible  # noqa: E402

REPORT = SHIPPED_CALIBRATIONS / "fit-report.json"


def _beats(fit) -> bool:
    h = fit.held_out
    a, b = h["start"]["median_abs_pct_error"], h["fitted"]["median_abs_pct_error"]
    return bool(fit.folds) and a is not None and b is not None and b < a


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", action="append", choices=("trtllm", "vllm", "sglang"))
    ap.add_argument("--max-runs", type=int, default=120)
    ap.add_argument("--max-nfev", type=int, default=40)
    args = ap.parse_args(argv)
    cat = load_catalog([str(SHIPPED_CATALOG)])
    ms = read_measurements(SHIPPED_MEASUREMENTS, cat)
    engines = args.engine or sorted({m.engine for m in ms})
    report = json.loads(REPORT.read_text(encoding="utf-8")) if REPORT.is_file() else {}
    for engine in engines:
        # the families with a row fastsim can express (a vLLM V0 run, for one, is not: its family makes no fold)
        families = sorted({m.family for m in ms if m.engine == engine and unexpressible(m) is None})
        if len(families) < 2:
            report[engine] = {"engine": engine, "shipped": False, "families": families,
                              "reason": "one source family: no held-out rows to judge a fit by"}
            (SHIPPED_CALIBRATIONS / f"{engine}.toml").unlink(missing_ok=True)
            continue
        fit = fit_measurements(ms, cat, engine=engine, max_runs=args.max_runs, max_nfev=args.max_nfev)
        ok = _beats(fit)
        doc = fit.to_dict()
        doc.update(shipped=ok, families=families, max_runs=args.max_runs, max_nfev=args.max_nfev,
                   reason=("its held-out error is below SPEC §3's on the same rows" if ok else
                           "its held-out error is not below SPEC §3's on the same rows"))
        report[engine] = doc
        path = SHIPPED_CALIBRATIONS / f"{engine}.toml"
        if ok:
            h = fit.held_out
            src = (f"tools/make_fit.py: fastsim.validate.fit.fit_measurements on the shipped set's {engine} rows; "
                   f"leave-one-source-out median error {h['fitted']['median_abs_pct_error']:.1f}% "
                   f"(SPEC §3's constants: {h['start']['median_abs_pct_error']:.1f}%) over "
                   f"{h['fitted']['rows']} held-out rows")
            fit.calibration(src).write(path)
        else:
            path.unlink(missing_ok=True)
        print(f"{engine}: held out {fit.held_out['fitted']['median_abs_pct_error']:.1f}% vs SPEC §3 "
              f"{fit.held_out['start']['median_abs_pct_error']:.1f}%: {'shipped' if ok else 'not shipped'}")
    REPORT.write_text(json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
