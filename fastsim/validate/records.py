"""The measurement schema as a record type, and its reader (``fastsim/data/measurements/README.md``).

One row of ``measurements.csv`` is one published figure of a real engine on real GPUs: its
benchmark (``offline``, ``online``, ``trace`` or ``step``), metric and statistic, the deployment
and the engine settings the run used. :func:`read_measurements` reads a file into
:class:`Measurement` records and checks every field before anything is simulated: bad input is
one :class:`~fastsim.errors.FastsimInputError` whose field names the file, the row id and the
column. Whether fastsim can *express* a valid row (pipeline parallelism, a policy it lacks, a
statistic it does not simulate) is decided when the row is run (:mod:`fastsim.validate.run`).
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import NamedTuple

from ..engine_rules import engine_runtime
from ..errors import FastsimInputError
from ..layouts import LAYOUTS

__all__ = ["Measurement", "read_measurements", "ENGINES", "BENCHMARKS", "METRICS", "STATS", "COLUMNS", "OPTIONAL_COLUMNS", "KV_CACHE_DTYPES",
           "SHIPPED_MEASUREMENTS", "SHIPPED_CATALOG", "SHIPPED_CALIBRATIONS", "fitted_calibrations", "is_shipped_set"]

#: Engines of the schema, each simulated on the fastsim policy of its name (:mod:`fastsim.sim.policy`).
ENGINES = ("trtllm", "vllm", "sglang")
#: Benchmarks of the schema (README of the measurement set).
BENCHMARKS = ("offline", "online", "trace", "step")
#: Metrics of the schema and the statistics each may carry.
METRICS = {"output_tokens_per_s": ("total",), "ttft_s": ("mean", "p50", "p90", "p99"),
           "itl_s": ("mean", "p50", "p90", "p99"), "tpot_s": ("mean", "p50", "p90", "p99"),
           "e2e_s": ("mean", "p50", "p90", "p99"), "step_s": ("mean", "p50", "p90", "p99")}
#: Every statistic of the schema.
STATS = ("total", "mean", "p50", "p90", "p99")
#: The columns of ``measurements.csv``, in the schema's order.
COLUMNS = ("id", "engine", "engine_version", "benchmark", "metric", "stat", "value", "model", "gpu", "precision",
           "tp", "pp", "layout", "instances", "input_tokens", "output_tokens", "num_requests", "rate_req_per_s",
           "trace", "max_batch", "max_num_batched_tokens", "max_num_seqs", "shared_prefix_tokens", "batch",
           "context_tokens", "source", "note", "kv_cache_dtype")
#: Columns a file may leave out (each then blank in every row).
OPTIONAL_COLUMNS = ("engine_version", "source", "note", "kv_cache_dtype")
#: ``kv_cache_dtype`` spellings (the engines' flag values) and what each means: ``""`` / ``auto`` the
#: engine's default for the row's precision (:func:`fastsim.validate.run.engine_kv_dtype`).
KV_CACHE_DTYPES = {"": "", "auto": "", "bf16": "bf16", "bfloat16": "bf16", "fp16": "bf16", "float16": "bf16",
                   "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
_DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
#: The measurement set shipped with fastsim, and the user GPU entries its rows need.
SHIPPED_MEASUREMENTS = _DATA / "measurements.csv"
SHIPPED_CATALOG = _DATA / "gpus_custom.toml"
#: The calibrations fitted to the shipped set (one engine-tagged file per engine: ``fastsim calibrate
#: --measurements``), which ``fastsim validate`` and the planning commands use by default (``--constants
#: fitted``, :func:`fastsim.constants.choose_step_constants`); see the folder's README.
SHIPPED_CALIBRATIONS = _DATA.parent / "calibrations"     # = fastsim.constants.SHIPPED_CALIBRATIONS


def fitted_calibrations(folder=None, catalog=None) -> tuple:
    """The engine-tagged calibrations fitted to the shipped measurement set.

    Parameters
    ----------
    folder : str or os.PathLike, optional
        Default :data:`SHIPPED_CALIBRATIONS`.
    catalog : Catalog, optional
        Checks the files' GPU names (default: the built-in catalog plus the shipped set's GPUs).

    Returns
    -------
    tuple of fastsim.constants.Calibration
        One per ``*.toml`` file, in name order, each tagged with its engine.

    Raises
    ------
    FastsimInputError
        No calibration file in the folder, a file without an ``engine`` tag, or a file
        :func:`fastsim.constants.load_calibration` refuses.
    """
    from ..catalog import load_catalog
    from ..constants import load_calibration
    folder = Path(folder) if folder is not None else SHIPPED_CALIBRATIONS
    cat = catalog if catalog is not None else load_catalog([str(SHIPPED_CATALOG)])
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise FastsimInputError("--constants", "fitted", f"calibration files in {folder.name}/ (none there)")
    out = []
    for f in files:
        cal = load_calibration(f, cat)
        if not cal.engine:
            raise FastsimInputError(f"{f.name}: engine", "", "an engine tag (trtllm, vllm or sglang)")
        out.append(cal)
    return tuple(out)


def is_shipped_set(path) -> bool:
    """Whether a measurement file is the set shipped with fastsim: the package's own file, or a copy of it.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
        True when ``path`` is :data:`SHIPPED_MEASUREMENTS` or has the same bytes (a copy, such as the
        repository's ``fastsim/data/measurements/measurements.csv`` beside an installed fastsim), so
        that its rows are read with :data:`SHIPPED_CATALOG`, the user GPU entries they need. A
        missing or unreadable file is not the shipped set (the reader then names it).
    """
    p = Path(path)
    try:
        if p.resolve() == SHIPPED_MEASUREMENTS.resolve():
            return True
        if not p.is_file() or p.stat().st_size != SHIPPED_MEASUREMENTS.stat().st_size:
            return False
        return p.read_bytes() == SHIPPED_MEASUREMENTS.read_bytes()
    except OSError:
        return False


class Measurement(NamedTuple):
    """One row of a measurement file: a published figure and the run that produced it.

    Attributes
    ----------
    id, engine, engine_version, benchmark, metric, stat : str
        As the schema names them (``engine`` in :data:`ENGINES`, ``benchmark`` in
        :data:`BENCHMARKS`, ``metric`` and ``stat`` a pair of :data:`METRICS`).
    value : float
        The published figure (s, or output tokens/s), > 0.
    model : str
        A catalog name, or the absolute path of a ``config.json`` (a relative path in the file
        is resolved against the file's directory).
    gpu, precision, layout : str
        Catalog names, and one of :data:`fastsim.layouts.LAYOUTS`.
    tp, pp, instances : int
        GPUs per pipeline stage of one instance, pipeline stages, instances (each >= 1).
    input_tokens, output_tokens, num_requests : int or None
        Fixed lengths and request count, where the benchmark fixes them.
    rate_req_per_s : float or None
        Poisson rate of an ``online`` row.
    trace : str or None
        Absolute path of a ``trace`` row's JSONL file.
    max_batch, max_num_batched_tokens, max_num_seqs, shared_prefix_tokens : int or None
        The engine settings the run used, where published.
    batch, context_tokens : int or None
        A ``step`` row's decode batch and context per request.
    source, note : str
        Where the figure comes from, and what its mapping assumes.
    kv_cache_dtype : str
        ``"bf16"`` or ``"fp8"`` where the run set the KV cache's dtype (vLLM and SGLang
        ``--kv-cache-dtype``, TensorRT-LLM ``kv_cache_config.dtype``); ``""``: the engine's default
        for the precision (:func:`fastsim.validate.run.engine_kv_dtype`).
    """

    id: str
    engine: str
    engine_version: str
    benchmark: str
    metric: str
    stat: str
    value: float
    model: str
    gpu: str
    precision: str
    tp: int
    pp: int
    layout: str
    instances: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    num_requests: int | None = None
    rate_req_per_s: float | None = None
    trace: str | None = None
    max_batch: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    shared_prefix_tokens: int | None = None
    batch: int | None = None
    context_tokens: int | None = None
    source: str = ""
    note: str = ""
    kv_cache_dtype: str = ""

    @property
    def family(self) -> str:
        """The source family: a starter id's letters (``T01`` -> ``T``, ``B1-ttft`` -> ``B``, ``L1-ttft-p90``
        -> ``L``), else the id up to its first ``-`` (``T17-l70-...`` -> ``T17``, ``G-dsv3-...`` -> ``G``).

        Returns
        -------
        str
        """
        m = _STARTER_ID.fullmatch(self.id)
        return m.group(1) if m else self.id.split("-", 1)[0]

    @property
    def runtime(self) -> str:
        """The engine's runtime the row ran on (:func:`fastsim.engine_rules.engine_runtime`): TensorRT-LLM's
        ``"pytorch"`` or ``"tensorrt"``, ``""`` for an engine with one.

        Returns
        -------
        str
        """
        return engine_runtime(self.engine, self.engine_version)


_STARTER_ID = re.compile(r"([A-Z]+)\d+(?:-(?:ttft|itl|tpot|e2e)(?:-[a-z0-9]+)?)?")
_REQUIRED = {
    "offline": ("input_tokens", "output_tokens", "num_requests"),
    "online": ("input_tokens", "output_tokens", "rate_req_per_s"),
    "trace": ("trace",),
    "step": ("batch", "context_tokens"),
}
_FORBIDDEN = {
    "offline": ("rate_req_per_s", "trace", "batch", "context_tokens"),
    "online": ("trace", "batch", "context_tokens"),
    "trace": ("input_tokens", "output_tokens", "num_requests", "rate_req_per_s", "batch", "context_tokens"),
    "step": ("num_requests", "rate_req_per_s", "trace"),
}
_INTS = ("tp", "pp", "instances", "input_tokens", "output_tokens", "num_requests", "max_batch",
         "max_num_batched_tokens", "max_num_seqs", "batch", "context_tokens")


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == ""


def read_measurements(path, catalog=None) -> list:
    """Read and check a measurement file (the schema of the shipped set's README).

    Parameters
    ----------
    path : str or os.PathLike
        A CSV with the :data:`COLUMNS` (in any order; ``engine_version``, ``source`` and ``note``
        may be missing). Relative ``model`` and ``trace`` paths resolve against its directory.
    catalog : Catalog, optional
        Resolves models, GPUs and precisions (default: the built-in catalog).

    Returns
    -------
    list of Measurement
        In file order.

    Raises
    ------
    FastsimInputError
        One per file, at the first bad field, named ``FILE row ID, column C`` (``FILE line N,
        column id`` for a missing or repeated id): a missing file or column; an unknown
        engine, benchmark, metric, statistic (or a pair the schema does not have: ``total`` is
        throughput's only statistic, ``step_s`` the ``step`` benchmark's only metric) or layout;
        a required field that is empty, or a number that is not finite, not > 0 (``value``,
        ``rate_req_per_s``), not an integer >= 1 (counts; ``shared_prefix_tokens`` >= 0
        and below ``input_tokens``); a field the row's benchmark does not use (a rate of an
        offline run); a model, GPU or precision the catalog lacks, a missing ``config.json``
        or trace file.
    """
    import pandas as pd
    from ..catalog import default_catalog
    cat = catalog if catalog is not None else default_catalog()
    path = Path(path)
    if not path.is_file():
        raise FastsimInputError("measurements", str(path), "an existing CSV file (the schema of "
                                "fastsim/data/measurements/README.md)")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:   # noqa: BLE001  (pandas raises several kinds)
        raise FastsimInputError("measurements", str(path), f"a readable CSV ({exc})") from None
    missing = [c for c in COLUMNS if c not in df.columns and c not in OPTIONAL_COLUMNS]
    if missing:
        raise FastsimInputError(f"{path.name} columns", ", ".join(map(str, df.columns)),
                                f"every column of the schema; missing: {', '.join(missing)} (the schema, in any "
                                f"order: {', '.join(COLUMNS)}; {', '.join(OPTIONAL_COLUMNS)} may be left out)")
    base = path.parent
    out, seen = [], {}
    for line, rec in enumerate(df.to_dict(orient="records"), start=2):
        rid = rec["id"].strip()
        if not rid:
            raise FastsimInputError(f"{path.name} line {line}, column id", rec["id"], "a row id")
        if rid in seen:
            raise FastsimInputError(f"{path.name} line {line}, column id", rid,
                                    f"a unique row id (line {seen[rid]} has it)")
        seen[rid] = line
        out.append(_row(rec, rid, path.name, base, cat))
    if not out:
        raise FastsimInputError("measurements", str(path), "at least one row")
    return out


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _names(look) -> str:
    """What a catalog look-up allows (its error's ``allowed``, asked with an empty name)."""
    try:
        look("")
    except FastsimInputError as exc:
        return exc.allowed
    return "a catalog name"


def _catalog_hint(base: Path) -> str:
    """How to add a GPU: ``--catalog``, naming the ``gpus_custom.toml`` beside the measurements if there is one."""
    beside = base / "gpus_custom.toml"
    if beside.is_file():
        return f"add it with --catalog {beside}, which sits beside the measurements"
    return "add it with --catalog"


def _row(rec: dict, rid: str, fname: str, base: Path, cat) -> Measurement:
    def where(col):
        return f"{fname} row {rid}, column {col}"

    def choice(col, allowed):
        v = rec[col].strip()
        if v not in allowed:
            raise FastsimInputError(where(col), rec[col], ", ".join(allowed))
        return v
    engine = choice("engine", ENGINES)
    bench = choice("benchmark", BENCHMARKS)
    metric = choice("metric", tuple(METRICS))
    stat = choice("stat", STATS)
    if stat not in METRICS[metric]:
        raise FastsimInputError(where("stat"), stat, f"{' or '.join(METRICS[metric])} for {metric}")
    if (metric == "step_s") != (bench == "step"):
        raise FastsimInputError(where("metric"), metric, "step_s for a step row" if bench == "step"
                                else "output_tokens_per_s, ttft_s, itl_s, tpot_s or e2e_s (step_s is the step "
                                "benchmark's)")
    layout = choice("layout", LAYOUTS)
    kv_raw = rec.get("kv_cache_dtype", "").strip().lower()
    if kv_raw not in KV_CACHE_DTYPES:
        raise FastsimInputError(where("kv_cache_dtype"), rec.get("kv_cache_dtype"),
                                "empty or auto (the engine's default), " + ", ".join(k for k in KV_CACHE_DTYPES if k
                                                                                     and k != "auto"))

    def number(col, *, integer=False, minimum=1, required=False):
        raw = rec.get(col, "")
        if _blank(raw):
            if required:
                raise FastsimInputError(where(col), "", f"a value ({_article(bench)} {bench} row needs {col})")
            return None
        try:
            v = float(raw)
        except ValueError:
            v = math.nan
        if integer:
            if not math.isfinite(v) or v != int(v) or v < minimum:
                raise FastsimInputError(where(col), raw, f"an integer >= {minimum}")
            return int(v)
        if not math.isfinite(v):
            raise FastsimInputError(where(col), raw, "a finite number > 0")
        if not v > 0:
            raise FastsimInputError(where(col), raw, "a number > 0")
        return v
    for col in _FORBIDDEN[bench]:
        if not _blank(rec.get(col, "")):
            raise FastsimInputError(where(col), rec[col], f"empty for {_article(bench)} {bench} row (the benchmark "
                                    "does not use it)")
    need = set(_REQUIRED[bench])
    vals = {}
    for col in _INTS:
        vals[col] = number(col, integer=True, required=col in need or col in ("tp", "pp", "instances"))
    vals["shared_prefix_tokens"] = number("shared_prefix_tokens", integer=True, minimum=0)
    if vals["shared_prefix_tokens"] is not None and vals["input_tokens"] is not None \
            and vals["shared_prefix_tokens"] >= vals["input_tokens"]:
        raise FastsimInputError(where("shared_prefix_tokens"), rec["shared_prefix_tokens"],
                                f"fewer tokens than input_tokens ({vals['input_tokens']}): the shared prefix is "
                                "part of the prompt")
    if vals["shared_prefix_tokens"] is not None and bench not in ("online", "offline"):
        raise FastsimInputError(where("shared_prefix_tokens"), rec["shared_prefix_tokens"],
                                "empty for a trace or step row (synthetic prompts only)")
    value = number("value", required=True)
    rate = number("rate_req_per_s", required="rate_req_per_s" in need)
    for col in ("tp",):
        from ..errors import require_tp
        try:
            require_tp(col, vals[col])
        except FastsimInputError:
            raise FastsimInputError(where(col), rec[col], "a power of two from 1 to 64") from None
    model = rec["model"].strip()
    if not model:
        raise FastsimInputError(where("model"), "", "a catalog model name or a config.json path")
    if os.path.sep in model or "/" in model or model.endswith(".json"):
        mp = (base / model).resolve()
        if not mp.is_file():
            raise FastsimInputError(where("model"), model, f"a config.json that exists (relative paths resolve "
                                    f"against the CSV's directory, {base})")
        model = str(mp)
    if model.startswith(os.path.sep):
        import json
        try:
            json.loads(Path(model).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FastsimInputError(where("model"), rec["model"], f"a readable config.json ({exc})") from None
    else:
        try:
            cat.model(model)
        except FastsimInputError as exc:
            raise FastsimInputError(where("model"), rec["model"], exc.allowed + " or a config.json path (add "
                                    "models with --catalog)") from None
    for col, look in (("gpu", cat.gpu), ("precision", cat.precision)):
        if not rec[col].strip():
            raise FastsimInputError(where(col), rec[col], f"a value (the {col.upper() if col == 'gpu' else col} the "
                                    f"run used; the field is empty): {_names(look)}")
        try:
            look(rec[col].strip())
        except FastsimInputError as exc:
            raise FastsimInputError(where(col), rec[col], exc.allowed + (
                f" (a GPU fastsim does not ship: {_catalog_hint(base)})" if col == "gpu" else "")) from None
    trace = None
    if bench == "trace":
        tp_ = (base / rec["trace"].strip()).resolve()
        if not tp_.is_file():
            raise FastsimInputError(where("trace"), rec["trace"], "a JSONL file that exists (relative paths resolve "
                                    f"against the CSV's directory, {base})")
        trace = str(tp_)
    return Measurement(
        id=rid, engine=engine, engine_version=rec.get("engine_version", "").strip(), benchmark=bench, metric=metric,
        stat=stat, value=value, model=model, gpu=rec["gpu"].strip(), precision=rec["precision"].strip(),
        tp=vals["tp"], pp=vals["pp"], layout=layout, instances=vals["instances"],
        input_tokens=vals["input_tokens"], output_tokens=vals["output_tokens"], num_requests=vals["num_requests"],
        rate_req_per_s=rate, trace=trace, max_batch=vals["max_batch"],
        max_num_batched_tokens=vals["max_num_batched_tokens"], max_num_seqs=vals["max_num_seqs"],
        shared_prefix_tokens=vals["shared_prefix_tokens"], batch=vals["batch"], context_tokens=vals["context_tokens"],
        source=rec.get("source", "").strip(), note=rec.get("note", "").strip(), kv_cache_dtype=KV_CACHE_DTYPES[kv_raw])
