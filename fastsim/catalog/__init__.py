"""The catalog: GPUs, precisions, models and scenarios (SPEC sections 2, 9 and 10).

Entries are frozen dataclasses loaded from TOML files shipped inside the package
(``catalog/data``). A user file (TOML or JSON, same layout) adds entries or overrides fields of
existing ones; a model can also be loaded from a Hugging Face ``config.json`` on disk.

Paths inside a user catalog file (a scenario's ``model = "../cfg/config.json"``) are resolved
against the directory of that catalog file, not the working directory; absolute paths and
model names are used as given.

Modules: :mod:`~fastsim.catalog.gpus` (:class:`GPU`), :mod:`~fastsim.catalog.precisions`
(:class:`Precision`), :mod:`~fastsim.catalog.models` (:class:`Model`),
:mod:`~fastsim.catalog.scenarios` (:class:`LengthDist`, :class:`Scenario`),
:mod:`~fastsim.catalog.hfconfig` (:func:`model_from_hf_config`); this one holds
:class:`Catalog`, :func:`load_catalog` and :func:`default_catalog`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Mapping

from ..errors import FastsimInputError
from .gpus import GPU
from .hfconfig import model_from_hf_config
from .models import Model
from .precisions import Precision
from .scenarios import LengthDist, Scenario, _scenario

__all__ = [
    "GPU", "Precision", "Model", "LengthDist", "Scenario", "Catalog",
    "load_catalog", "default_catalog", "model_from_hf_config",
]


def _norm(name: str) -> str:
    return str(name).strip().lower()


@dataclass
class Catalog:
    """Named GPUs, precisions, models and scenarios; lookups are case-insensitive.

    Attributes
    ----------
    gpus : dict[str, GPU]
    precisions : dict[str, Precision]
    models : dict[str, Model]
    scenarios : dict[str, Scenario]
        Entries keyed by name, in load order.
    """

    gpus: dict = field(default_factory=dict)
    precisions: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    scenarios: dict = field(default_factory=dict)

    def _get(self, table: dict, kind: str, name: str):
        key = _norm(name)
        for k, v in table.items():
            if _norm(k) == key:
                return v
        raise FastsimInputError(kind, name, "one of " + ", ".join(sorted(table)))

    def default_gpus(self) -> list:
        """Names of the GPUs of the default planning grid (``default_grid`` true), in catalog order.

        The built-in default grid is the lecture's {H100, H200, B200}; the other built-in GPUs
        (``gpus_extra.toml``) are chosen by name.

        Returns
        -------
        list of str
        """
        return [k for k, g in self.gpus.items() if g.default_grid]

    def default_precisions(self) -> list:
        """Names of the precisions of the default planning grid (``default_grid`` true), in catalog order.

        The built-in default grid is the lecture's {BF16, FP8}; NVFP4 and MXFP4 are chosen by name.

        Returns
        -------
        list of str
        """
        return [k for k, p in self.precisions.items() if p.default_grid]

    def gpu(self, name: str) -> GPU:
        """Look up a GPU by name (case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        GPU

        Raises
        ------
        FastsimInputError
            No GPU has that name; the message lists the known ones.
        """
        return self._get(self.gpus, "gpu", name)

    def precision(self, name: str) -> Precision:
        """Look up a precision (``BF16``, ``FP8``, ``NVFP4``, ``MXFP4``; case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        Precision

        Raises
        ------
        FastsimInputError
            No precision has that name; the message lists the known ones.
        """
        return self._get(self.precisions, "precision", name)

    def model(self, name_or_path: str) -> Model:
        """Look up a model by name, or load it from a Hugging Face ``config.json`` path.

        Parameters
        ----------
        name_or_path : str
            A catalog name (case-insensitive), or a path: anything containing a path separator
            or ending in ``.json`` is read with :func:`model_from_hf_config`.

        Returns
        -------
        Model

        Raises
        ------
        FastsimInputError
            No model has that name, or the config file is missing or malformed.
        """
        if os.path.sep in str(name_or_path) or str(name_or_path).endswith(".json"):
            return model_from_hf_config(name_or_path)
        return self._get(self.models, "model", name_or_path)

    def scenario(self, name: str) -> Scenario:
        """Look up a built-in or user scenario (case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        Scenario

        Raises
        ------
        FastsimInputError
            No scenario has that name; the message lists the known ones.
        """
        return self._get(self.scenarios, "scenario", name)

    def with_prices(self, prices_usd_per_hour: Mapping[str, float]) -> "Catalog":
        """A copy with some GPU prices replaced (what-if studies, SPEC §8).

        Parameters
        ----------
        prices_usd_per_hour : mapping of str to float
            GPU name -> new price per GPU (US dollars per hour).

        Returns
        -------
        Catalog
            A new catalog; ``self`` is unchanged.

        Raises
        ------
        FastsimInputError
            A GPU name is unknown, or a price is not a finite number > 0.
        """
        new = dataclasses.replace(self, gpus=dict(self.gpus))
        for name, price in prices_usd_per_hour.items():
            g = self.gpu(name)
            new.gpus[g.name] = dataclasses.replace(g, price_usd_per_hour=float(price))
        return new


_GPU_KEYS = {f.name for f in dataclasses.fields(GPU)} - {"name"}
_MODEL_KEYS = {f.name for f in dataclasses.fields(Model)} - {"name"}
_PREC_KEYS = {f.name for f in dataclasses.fields(Precision)} - {"name"}


def _read_table(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise FastsimInputError("catalog file", path, f"a readable TOML or JSON file ({exc.strerror})") from None
    try:
        if str(path).endswith(".json"):
            return json.loads(raw)
        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FastsimInputError("catalog file", path, f"valid TOML/JSON ({exc})") from None


_OPTIONAL = {f.name for cls in (GPU, Precision, Model) for f in dataclasses.fields(cls)
             if f.default is not dataclasses.MISSING}


def _merge(table: dict, entries: dict, factory, keys: set, kind: str, source: str) -> None:
    if not isinstance(entries, dict):
        raise FastsimInputError(f"{kind} table in {source}", entries, "a table of named entries")
    for name, fields_ in entries.items():
        if not isinstance(fields_, dict):
            raise FastsimInputError(f"{kind}.{name}", fields_, "a table of fields")
        unknown = set(fields_) - keys
        if unknown:
            raise FastsimInputError(f"{kind}.{name}", sorted(unknown), "fields among " + ", ".join(sorted(keys)))
        existing = next((v for k, v in table.items() if _norm(k) == _norm(name)), None)
        if existing is not None:
            merged = {k: ({**getattr(existing, k), **v} if isinstance(v, dict) and isinstance(getattr(existing, k), Mapping)
                          else v) for k, v in fields_.items()}
            table[existing.name] = dataclasses.replace(existing, **merged)
        else:
            try:
                table[name] = factory(name=name, **fields_)
            except TypeError:
                missing = sorted(keys - set(fields_) - _OPTIONAL)
                raise FastsimInputError(f"{kind}.{name} in {source}", sorted(fields_),
                                        "all required fields; missing " + ", ".join(missing)) from None


def _data(name: str) -> dict:
    return tomllib.loads(resources.files(__package__).joinpath("data", name).read_text("utf-8"))


def load_catalog(user_files=()) -> Catalog:
    """Load the built-in catalog, then apply user files in order.

    Parameters
    ----------
    user_files : sequence of str
        TOML or JSON files with any of the top-level tables ``gpus``, ``precisions``, ``models``,
        ``scenarios``; each entry adds a new item or overrides fields of an existing one. A
        scenario's relative ``config.json`` path is resolved against the file's directory.

    Returns
    -------
    Catalog

    Raises
    ------
    FastsimInputError
        A missing or malformed file, or an unknown field.
    """
    cat = Catalog()
    _merge(cat.gpus, _data("gpus.toml"), GPU, _GPU_KEYS, "gpu", "built-in")
    _merge(cat.gpus, _data("gpus_extra.toml"), GPU, _GPU_KEYS, "gpu", "built-in")
    _merge(cat.precisions, _data("precisions.toml"), Precision, _PREC_KEYS, "precision", "built-in")
    _merge(cat.models, _data("models.toml"), Model, _MODEL_KEYS, "model", "built-in")
    for name, d in _data("scenarios.toml").items():
        cat.scenarios[name] = _scenario(name, d)
    for path in user_files:
        t = _read_table(path)
        unknown = set(t) - {"gpus", "precisions", "models", "scenarios"}
        if unknown:
            raise FastsimInputError(f"catalog file {path}", sorted(unknown), "tables gpus, precisions, models, scenarios")
        _merge(cat.gpus, t.get("gpus", {}), GPU, _GPU_KEYS, "gpu", path)
        _merge(cat.precisions, t.get("precisions", {}), Precision, _PREC_KEYS, "precision", path)
        _merge(cat.models, t.get("models", {}), Model, _MODEL_KEYS, "model", path)
        scen = t.get("scenarios", {})
        if not isinstance(scen, dict):
            raise FastsimInputError(f"scenarios table in {path}", scen, "a table of named scenarios")
        for name, d in scen.items():
            cat.scenarios[name] = _relative_model(_scenario(name, d), path)
    return cat


def _is_path(name_or_path) -> bool:
    """True when :meth:`Catalog.model` reads ``name_or_path`` as a config.json path."""
    s = str(name_or_path)
    return os.path.sep in s or (os.path.altsep is not None and os.path.altsep in s) or s.endswith(".json")


def _relative_model(scenario: Scenario, catalog_path) -> Scenario:
    """``scenario`` with a relative config.json path resolved against the catalog file's directory."""
    m = scenario.model
    if not _is_path(m) or os.path.isabs(os.path.expanduser(m)):
        return scenario
    base = os.path.dirname(os.path.abspath(os.fspath(catalog_path)))
    return dataclasses.replace(scenario, model=os.path.normpath(os.path.join(base, m)))


_DEFAULT: Catalog | None = None


def default_catalog() -> Catalog:
    """The built-in catalog, loaded once and cached (SPEC §2 and §9 entries).

    Returns
    -------
    Catalog
        The shared instance; treat it as read-only (use :meth:`Catalog.with_prices` or
        :func:`load_catalog` for a modified copy).
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_catalog()
    return _DEFAULT
