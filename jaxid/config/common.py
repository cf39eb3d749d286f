"""What every runner's configuration shares: TOML reading, ``ConfigError``, the ``[experiment]``
table and the resolved experiment (``Experiment`` of named ``Setting``s).

A study (``jaxid.config``), a benchmark (``jaxid.config.benchmark``) and a fit (``jaxid.config.fit``)
are TOML files read by ``read_toml``; every problem is one ``ConfigError`` line that says what to
change. Studies and benchmarks share the ``[experiment]`` table (``EXPERIMENT_KEYS``, checked by
``check_experiment_table``) and resolve to an ``Experiment``: a named set of ``Setting``s, each with
its trial count, and the seed (a benchmark's ``Benchmark`` extends it).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..types import did_you_mean

__all__ = ["ConfigError", "Experiment", "Setting", "read_toml", "check_experiment_table", "EXPERIMENT_KEYS"]


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message says what to change."""


EXPERIMENT_KEYS = {
    "kind": str,  # "study" (jaxid.config; the default) or "benchmark" (jaxid.benchmark)
    "name": str,
    "description": str,
    "seed": int,
    "trials": int,
    "full_trials": int,
    "chunk": int,
    "plots": list,
}


@dataclass(frozen=True)
class Setting:
    """One resolved setting (all keys of ``SETTING_DEFAULTS`` present and validated; a benchmark's:
    ``BENCHMARK_DEFAULTS``).

    ``arm``: for ``model = "arm"``, the experiment's resolved ``[arm]`` table (every parameter
    explicit, ``jaxid.model.description.resolve_description``); ``None`` for the presets.
    """

    name: str
    values: dict[str, Any]
    trials: int
    arm: dict[str, Any] | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def digest(self) -> str:
        """A short hash of the resolved values and arm (a resumed run must match it)."""
        extra = {"arm": self.arm} if self.arm is not None else {}
        blob = json.dumps(
            {"name": self.name, "trials": self.trials, **self.values, **extra}, sort_keys=True, default=str
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    seed: int
    trials: int
    chunk: int
    plots: tuple[str, ...]
    settings: tuple[Setting, ...]
    full_trials: int | None = None
    source: str | None = None
    raw: dict = field(default_factory=dict, repr=False)
    #: The resolved ``[arm]`` table (every parameter explicit), or ``None`` without one.
    arm: dict[str, Any] | None = None

    def setting(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        raise ConfigError(
            f"No setting {name!r} in experiment {self.name!r}; settings are {[s.name for s in self.settings]}.{did_you_mean(name, [s.name for s in self.settings])}"
        )

    def select(self, names: list[str] | None, trials: int | None = None) -> Experiment:
        """A copy keeping only the settings ``names``, with ``trials`` overriding counts.

        ``names=None`` keeps every setting except ``smoke`` (the CI check), which runs only when
        named.
        """
        if names:
            settings = tuple(self.setting(n) for n in names)
        else:
            settings = tuple(s for s in self.settings if s.name != "smoke") or self.settings
        if trials is not None:
            if trials < 1:
                raise ConfigError(f"--trials must be >= 1, got {trials}.")
            settings = tuple(Setting(s.name, s.values, trials, s.arm) for s in settings)
        return Experiment(
            self.name,
            self.description,
            self.seed,
            self.trials,
            self.chunk,
            self.plots,
            settings,
            self.full_trials,
            self.source,
            self.raw,
            self.arm,
        )

    def resolved(self) -> dict:
        """The fully resolved configuration (written next to the results); the ``[arm]`` table, if
        any, with every parameter explicit (``parse_experiment`` reads it back as the same arm)."""
        return {
            "experiment": {
                "name": self.name,
                "description": self.description,
                "seed": self.seed,
                "trials": self.trials,
                "chunk": self.chunk,
                "plots": list(self.plots),
                **({"full_trials": self.full_trials} if self.full_trials else {}),
            },
            **({"arm": dict(self.arm)} if self.arm is not None else {}),
            "settings": {s.name: {**s.values, "trials": s.trials} for s in self.settings},
        }


def check_experiment_table(exp: dict, allowed: dict[str, type], where: str, label: str = "") -> None:
    """Every key of an ``[experiment]`` table known (``allowed``: key -> type) and of its type; a
    ``ConfigError`` naming the key otherwise (``label``, e.g. " in a benchmark", after "allowed")."""
    for key, value in exp.items():
        if key not in allowed:
            raise ConfigError(
                f"{where}unknown key experiment.{key}; allowed{label}: {sorted(allowed)}.{did_you_mean(key, allowed)}"
            )
        if not isinstance(value, allowed[key]) or isinstance(value, bool):
            kind = {int: "an integer", str: "a string", list: "a list"}[allowed[key]]
            raise ConfigError(f"{where}experiment.{key} must be {kind}, got {value!r}.")


def read_toml(path: str | Path, missing: str | None = None) -> dict:
    """The parsed TOML file ``path`` (experiments, benchmarks and fits alike); ``ConfigError`` (one
    line) when it does not exist (``missing``: the message, default the experiments') or is not TOML."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(
            missing or f"Config file {str(path)!r} does not exist; `jaxid list` shows the shipped experiments."
        )
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
