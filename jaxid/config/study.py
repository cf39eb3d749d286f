"""Experiment configuration: a TOML file of named settings, validated with helpful messages.

An experiment file has these tables::

    [experiment]            # name, description, seed, trials, chunk, plots
    [arm]                   # optional: the user's arm (jaxid.model.description), model = "arm"
    [defaults]              # keys shared by all settings
    [settings.<name>]       # one table per setting; its keys override the defaults

A setting is resolved as ``SETTING_DEFAULTS`` ← ``[defaults]`` ← ``[settings.<name>]``. Every key
is checked against the allowed keys (a typo gets a suggestion) and every value against its
allowed values. The ``[arm]`` table is read by ``resolve_description`` when the file is loaded
(a ``parameters`` file in it is relative to the experiment file): with it, ``model = "arm"`` is
the default, and the settings that use it start from that arm (``parameters`` and ``sample``
apply on top). See ``experiments/README.md`` for the keys and the shipped experiments.

The pieces every runner's configuration shares (``ConfigError``, ``read_toml``, the ``[experiment]``
table's keys, ``Experiment`` and ``Setting``) live in ``jaxid.config.common`` and are re-exported here.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from ..model import PARAMETER_NAMES
from ..model.description import resolve_description
from ..types import did_you_mean
from .common import EXPERIMENT_KEYS, ConfigError, Experiment, Setting, check_experiment_table, read_toml

__all__ = ["ConfigError", "Experiment", "Setting", "load_experiment", "parse_experiment", "SETTING_DEFAULTS"]


#: Default value of every setting key; also the list of allowed keys.
SETTING_DEFAULTS: dict[str, Any] = {
    "model": "point_mass",  # arm: point_mass | table1 | arm (the [arm] table; the default when there is one)
    "parameters": {},  # overrides of the nominal arm's parameters, e.g. {m2 = 2.0, fv1 = 3.0}
    "sample": {},  # sampled parameters: {m2 = {dist = "uniform", width = 0.1}} (relative)
    "parameter_sets": 1,  # distinct sampled parameter sets (each simulated once)
    "unknowns": ["m1", "m2", "fv1", "fv2"],
    "lines": "same",  # same | split
    "scale": 1.0,
    "phases": "zero",  # zero | schroeder | random
    "q0": [0.0, 0.0],
    "simulator": "nonlinear",  # nonlinear | linear (the linearised arm)
    "solver": "rk4",  # rk4 | tsit5 | adaptive
    "substeps": 1,
    "sample_step": 0.01,
    "discard_periods": "auto",  # int or "auto" (from the slowest decay rate)
    "measured_periods": 1,
    "noise": "uniform",  # uniform (paper: level*rand()) | gaussian (std = level)
    "noise_level": 0.1,
    "noise_mean_known": True,  # pass the noise mean as measurement_offset to estimators that take it
    "noise_path": "time",  # time (noise on every sample) | spectral (noisy lines drawn directly; Gaussian)
    "estimators": ["paper", "equation_error", "ml"],
    "estimator_options": {},  # {estimator_name = {option = value}}
    "trials": None,  # per-setting trial count (else the experiment's)
    "label": None,  # free text shown in tables/plots
}

_CHOICES = {
    "model": ("point_mass", "table1", "arm"),
    "lines": ("same", "split"),
    "phases": ("zero", "schroeder", "random"),
    "simulator": ("nonlinear", "linear"),
    "solver": ("rk4", "tsit5", "adaptive"),
    "noise": ("uniform", "gaussian"),
    "noise_path": ("time", "spectral"),
}

#: Estimators that see a record only through its spectrum: the ones the spectral noise path runs.
SPECTRAL_ESTIMATORS = ("equation_error", "ml")
_DISTRIBUTIONS = {"fixed": (), "uniform": ("width",), "normal": ("std",)}
PLOTS = ("coefficients", "estimates", "rmse_vs_noise", "rmse_vs_scale", "rmse_vs_periods", "estimators", "convergence")


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file (``ConfigError``, one line, on any problem).

    An ``[arm]`` table is checked here, before anything runs; a ``parameters`` file it names is
    read relative to the experiment file's folder. A ``preset`` named in it builds that arm, which
    needs float64 (``jax_enable_x64``), as every arm does.
    """
    path = Path(path)
    return parse_experiment(read_toml(path), source=str(path), default_name=path.stem)


def parse_experiment(
    raw: dict, source: str | None = None, default_name: str = "experiment", base_dir: str | Path | None = None
) -> Experiment:
    """Validate an experiment given as a dict (the parsed TOML); see the module docstring.

    ``base_dir``: the folder an ``[arm]`` table's ``parameters`` file is relative to (default: the
    folder of ``source`` if given, else the working directory). Raises ``ConfigError`` (one line).
    """
    where = f"{source}: " if source else ""
    tables = ("experiment", "arm", "defaults", "settings")
    for key in raw:
        if key not in tables:
            raise ConfigError(
                f"{where}unknown top-level table [{key}]; use [experiment], [arm], [defaults] and [settings.<name>].{did_you_mean(key, tables)}"
            )
    kind = raw.get("experiment", {}).get("kind", "study") if isinstance(raw.get("experiment"), dict) else "study"
    if kind != "study":
        raise ConfigError(
            f"{where}experiment.kind = {kind!r}: this reader takes studies (kind = 'study'); a benchmark "
            "(kind = 'benchmark') is read by jaxid.load_config or jaxid.benchmark.load_benchmark (`jaxid run` does it)."
        )
    arm = None
    if "arm" in raw:
        if base_dir is None and source is not None:
            base_dir = Path(source).parent
        if not isinstance(raw["arm"], dict):
            raise ConfigError(
                f'{where}arm must be a table ([arm], with keys such as preset = "double_pendulum"), got {raw["arm"]!r}.'
            )
        try:
            arm = resolve_description(raw["arm"], base_dir=base_dir, where=f"{where}arm")
        except ValueError as err:
            raise ConfigError(str(err)) from None
    exp = raw.get("experiment", {})
    check_experiment_table(exp, EXPERIMENT_KEYS, where)
    trials = exp.get("trials", 100)
    chunk = exp.get("chunk", 256)
    for key in ("trials", "chunk", "full_trials"):
        if key in exp and exp[key] < 1:
            raise ConfigError(f"{where}experiment.{key} must be a positive integer, got {exp[key]!r}.")
    plots = tuple(exp.get("plots", []))
    for p in plots:
        if p not in PLOTS:
            raise ConfigError(
                f"{where}unknown plot {p!r} in experiment.plots; allowed: {list(PLOTS)}.{did_you_mean(p, PLOTS)}"
            )
    defaults = raw.get("defaults", {})
    _check_keys(defaults, f"{where}[defaults]")
    settings_raw = raw.get("settings", {})
    if not settings_raw:
        raise ConfigError(f"{where}no settings: add at least one [settings.<name>] table.")
    settings = []
    for name, table in settings_raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{where}settings.{name} must be a table ([settings.{name}]).")
        _check_keys(table, f"{where}[settings.{name}]")
        values = copy.deepcopy(SETTING_DEFAULTS)
        if arm is not None:
            values["model"] = "arm"
        values.update(copy.deepcopy(defaults))
        values.update(copy.deepcopy(table))
        if values["model"] == "arm" and arm is None:
            raise ConfigError(
                f'{where}settings.{name}.model = "arm" needs a top-level [arm] table describing the arm (keys in '
                'experiments/README.md, e.g. preset = "double_pendulum" or parameters = "arm.yml"); add one or '
                'choose model = "point_mass" or "table1".'
            )
        values = _validate_setting(values, f"{where}settings.{name}")
        n = values.pop("trials") or trials
        values["trials"] = None
        settings.append(Setting(name, values, int(n), arm if values["model"] == "arm" else None))
    return Experiment(
        name=exp.get("name", default_name),
        description=exp.get("description", ""),
        seed=exp.get("seed", 0),
        trials=trials,
        chunk=chunk,
        plots=plots,
        settings=tuple(settings),
        full_trials=exp.get("full_trials"),
        source=source,
        raw=raw,
        arm=arm,
    )


def _check_keys(table: dict, where: str) -> None:
    for key in table:
        if key not in SETTING_DEFAULTS:
            raise ConfigError(
                f"{where}: unknown key {key!r}; allowed keys: {sorted(SETTING_DEFAULTS)}.{did_you_mean(key, SETTING_DEFAULTS)}"
            )


def _validate_setting(v: dict, where: str) -> dict:
    from ..estimate import ESTIMATORS, names_for

    for key, choices in _CHOICES.items():
        if v[key] not in choices:
            raise ConfigError(
                f"{where}.{key} = {v[key]!r} is not allowed; choose one of {list(choices)}.{did_you_mean(str(v[key]), choices)}"
            )
    for key in ("scale", "noise_level", "sample_step"):
        val = v[key]
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise ConfigError(f"{where}.{key} must be a finite number, got {val!r}.")
        v[key] = float(val)
    for key, ok, rule in (
        ("sample_step", v["sample_step"] > 0, "> 0 [s]"),
        ("noise_level", v["noise_level"] >= 0, ">= 0 [rad]"),
        ("scale", v["scale"] > 0, "> 0 (0 applies no excitation)"),
    ):
        if not ok:
            raise ConfigError(f"{where}.{key} must be {rule}, got {v[key]!r}.")
    if not isinstance(v["noise_mean_known"], bool):
        raise ConfigError(f"{where}.noise_mean_known must be true or false, got {v['noise_mean_known']!r}.")
    for key in ("measured_periods", "substeps", "parameter_sets"):
        if isinstance(v[key], bool) or not isinstance(v[key], int) or v[key] < 1:
            raise ConfigError(f"{where}.{key} must be a positive integer, got {v[key]!r}.")
    d = v["discard_periods"]
    if not (d == "auto" or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)):
        raise ConfigError(f'{where}.discard_periods must be "auto" or a non-negative integer, got {d!r}.')
    trials = v["trials"]
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ConfigError(f"{where}.trials must be a positive integer, got {v['trials']!r}.")
    q0 = v["q0"]
    if not (
        isinstance(q0, list)
        and len(q0) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in q0)
    ):
        raise ConfigError(f"{where}.q0 must be a list of two finite angles in rad, e.g. [0.0, 0.0], got {q0!r}.")
    unknowns = v["unknowns"]
    if isinstance(unknowns, str):
        unknowns = [unknowns]
    from ..estimate import resolve_unknowns

    try:
        resolve_unknowns(unknowns)
    except ValueError as err:
        raise ConfigError(f"{where}.unknowns: {err}") from None
    v["unknowns"] = list(unknowns)
    for name, value in v["parameters"].items():
        if name not in PARAMETER_NAMES:
            raise ConfigError(
                f"{where}.parameters: unknown parameter {name!r}; allowed: {list(PARAMETER_NAMES)}.{did_you_mean(name, PARAMETER_NAMES)}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}.parameters.{name} must be a number (SI units), got {value!r}.")
    for name, spec in v["sample"].items():
        if name not in PARAMETER_NAMES:
            raise ConfigError(
                f"{where}.sample: unknown parameter {name!r}; allowed: {list(PARAMETER_NAMES)}.{did_you_mean(name, PARAMETER_NAMES)}"
            )
        if not isinstance(spec, dict) or spec.get("dist") not in _DISTRIBUTIONS:
            raise ConfigError(
                f'{where}.sample.{name} must be a table with dist = one of {list(_DISTRIBUTIONS)}, e.g. {{dist = "uniform", width = 0.1}} (relative half-width).'
            )
        need = _DISTRIBUTIONS[spec["dist"]]
        extra = set(spec) - {"dist", *need}
        if extra or any(k not in spec for k in need):
            raise ConfigError(
                f"{where}.sample.{name}: dist = {spec['dist']!r} takes exactly {list(need)} (relative to the nominal value)."
            )
    names = v["estimators"]
    if isinstance(names, str):
        names = [names]
    if not names:
        raise ConfigError(f"{where}.estimators is empty; choose some of {sorted(ESTIMATORS)}.")
    for name in names:
        if name not in ESTIMATORS:
            raise ConfigError(
                f"{where}.estimators: unknown estimator {name!r}; available: {sorted(ESTIMATORS)}.{did_you_mean(name, ESTIMATORS)}"
            )
        if "record" not in ESTIMATORS[name].accepts():
            raise ConfigError(
                f"{where}.estimators: {name!r} fits measured logs (jaxid fit, benchmarks), not a study's simulated "
                f"records; use one of {names_for('record')}."
            )
    v["estimators"] = list(names)
    for name, options in v["estimator_options"].items():
        if name not in names:
            raise ConfigError(
                f"{where}.estimator_options.{name}: {name!r} is not among this setting's estimators {names}."
            )
        check_estimator_options(name, options, f"{where}.estimator_options.{name}")
    if v["noise_path"] == "spectral":
        _check_spectral_path(v, where)
    return v


def _check_spectral_path(v: dict, where: str) -> None:
    """``noise_path = "spectral"`` is exact only for Gaussian noise and spectrum-only estimators."""
    if v["noise"] != "gaussian":
        raise ConfigError(
            f'{where}: noise_path = "spectral" is exact for Gaussian noise only; set noise = "gaussian" '
            f'or noise_path = "time".'
        )
    other = [name for name in v["estimators"] if name not in SPECTRAL_ESTIMATORS]
    if other:
        raise ConfigError(
            f'{where}: noise_path = "spectral" runs only {list(SPECTRAL_ESTIMATORS)} (they use the spectrum '
            f'alone); {other} need the noisy record: use noise_path = "time".'
        )
    for name in v["estimators"]:
        method = v["estimator_options"].get(name, {}).get("method", "projection")
        if method != "projection":
            raise ConfigError(
                f"{where}.estimator_options.{name}.method = {method!r}: the spectral noise path draws the "
                f'projection spectrum (eq. 48); drop the option or use noise_path = "time".'
            )


#: Arguments every estimator receives from the study runner, never from ``estimator_options``.
RUNNER_ARGUMENTS = ("record", "excitation", "nominal", "unknowns", "q0", "noise_std")


def check_estimator_options(name: str, options: Any, where: str, data: str = "record") -> None:
    """Check an ``estimator_options.<name>`` table before anything runs (``ConfigError``, one line).

    The names and values are checked as constructor arguments of the estimator's class
    (``jaxid.estimate.check_options``), without building it, each an option it takes on ``data``
    (``"record"``: a study's; ``"log"``: a benchmark's).
    """
    if not isinstance(options, dict):
        raise ConfigError(f"{where} must be a table of options, e.g. {{forgetting = 0.999}}, got {options!r}.")
    from ..estimate import check_options

    for key in options:
        if key in RUNNER_ARGUMENTS:
            raise ConfigError(f"{where}.{key}: set by the study from the setting, not an estimator option.")
    try:
        check_options(name, options, data=data)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
