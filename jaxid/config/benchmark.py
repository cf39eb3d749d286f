"""The N-joint benchmark's configuration: ``[experiment] kind = "benchmark"`` with an ``[arm] urdf`` table.

A benchmark file has the tables of any experiment (``jaxid.config``)::

    [experiment]            # kind = "benchmark", name, description, seed, trials, full_trials, chunk
    [arm]                   # urdf = "...", relative to the file (+ load_arm's options: jaxid.config.fit_arm.URDF_KEYS)
    [defaults]              # keys shared by all settings (BENCHMARK_DEFAULTS)
    [settings.<name>]       # one table per setting

A setting is resolved as ``BENCHMARK_DEFAULTS`` ← ``[defaults]`` ← ``[settings.<name>]``; every key
is checked (a typo gets a suggestion), every value against its type and range, the URDF is read
(a missing file is a one-line error) — all when the file is loaded, before anything is written.
The keys are listed in ``experiments/README.md`` ("The N-joint benchmark").
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..estimate import names_for
from ..types import did_you_mean
from .study import EXPERIMENT_KEYS as STUDY_EXPERIMENT_KEYS
from .study import ConfigError, Experiment, Setting, check_estimator_options, check_experiment_table, read_toml

__all__ = [
    "BENCHMARK_DEFAULTS",
    "BENCHMARK_ESTIMATORS",
    "EXCITATIONS",
    "Benchmark",
    "is_benchmark",
    "load_benchmark",
    "parse_benchmark",
]

#: Estimators the benchmark can run on an N-joint log (``jaxid.benchmark.trial``): every class of
#: ``jaxid.estimate`` that takes logs, and ``didim`` (``jaxid.benchmark.didim``: it simulates the setting's controller).
BENCHMARK_ESTIMATORS = (*names_for("log"), "didim")
#: What each estimator is and what its reported std means (also in ``experiments/README.md``).
ESTIMATOR_DOC = {
    "idim_ls": "weighted least squares on the filtered inverse-dynamics regression (std: Newey-West sandwich "
    "(WᵀW)⁻¹ M (WᵀW)⁻¹ over one cut-off period of rows, whose residuals correlate)",
    "idim_iv": "instrumental variables from segment-wise simulations of the estimate, 3 passes from consistent LS "
    "(std: the IV Newey-West sandwich (ZᵀW)⁻¹ M (WᵀZ)⁻¹ over one cut-off period of rows)",
    "idim_ls_bounded": "IDIM-LS with the unmerged friction and armature parameters bounded at 0 (std: IDIM-LS's "
    "Newey-West sandwich at the bounded solution)",
    "idim_ls_consistent": "IDIM-LS's rows fitted over physically consistent standard parameters "
    "(log-Cholesky, jaxid.estimate.consistency; regularised towards a prior with prior_error); std: its own, least "
    "squares on the active constraint face with the same Newey-West sandwich",
    "rls": "recursive least squares over IDIM-LS's weighted rows (forgetting 1, start 0, P0 = 1e8 in scaled "
    "coordinates; std: IDIM-LS's Newey-West sandwich with the recursion's P_N for (WᵀW)⁻¹)",
    "output_error": "multiple-shooting output error on the measured angles, from consistent LS (std: first order, the "
    "torque reading's noise, the setting's torque_std, an error in the simulated input, jaxid.estimate.logs.shooting_inputs)",
    "ekf": "extended Kalman filter, state (q, q', θ), from consistent LS",
    "ukf": "unscented Kalman filter, state (q, q', θ), from consistent LS",
    "didim": "closed-loop output error (DIDIM): consistent LS of the logged torque on the regressor at the states "
    "of the model's closed loop, simulated noise-free with the setting's controller and reference, from consistent "
    "LS; a step is taken where it lowers the closed loop's torque error, else cut to a tenth, until no parameter "
    "would move by 1e-2 of its std (std: consistent LS's own on the last step's rows)",
}
#: ``excitation``: a random feasible Fourier trajectory, or one designed by ``jaxid.excitation.fourier_design``.
EXCITATIONS = ("random", "bound", "condition")
CONTROLLERS = ("pd", "computed_torque")

#: Default value of every setting key; also the list of allowed keys.
BENCHMARK_DEFAULTS: dict[str, Any] = {
    "excitation": "random",  # random | bound | condition (designed: jaxid.excitation.fourier_design)
    "harmonics": 5,  # Fourier harmonics L of the reference
    "period": 5.0,  # [s] period T of the reference
    "trajectory_seed": 0,  # key of the random reference (the experiment design, shared by all trials)
    "margin": 0.9,  # fraction of the joint limits the random reference reaches
    "measured_periods": 1,  # logged periods (the log starts on the reference at t = 0)
    "sample_step": 0.002,  # [s] log and controller period (zero-order hold)
    "substeps": 1,  # RK4 steps per sample
    "controller": "pd",  # pd (with model feed-forward) | computed_torque
    "controller_frequency": 10.0,  # [Hz] closed-loop natural frequency (critically damped)
    "angle_std": 1e-4,  # [rad] encoder noise (enters the loop and the estimators)
    "velocity_std": 1e-3,  # [rad/s] velocity noise (enters the loop only)
    "torque_std": 0.05,  # [N m] torque reading noise
    "true_viscous": 0.0,  # [N m s/rad] viscous friction added to the simulated arm (number or one per joint)
    "true_coulomb": 0.0,  # [N m] Coulomb friction added to the simulated arm (number or one per joint)
    "model_coulomb": True,  # whether the estimators' model has the Coulomb columns (false: a model error)
    "cutoff_hz": 10.0,  # [Hz] zero-phase filter of the angles and torque (jaxid.estimate.logs.filter_log)
    "trim_s": 0.25,  # [s] dropped at each end of the filtered log (the filter's edge transients)
    "estimators": ["idim_ls", "idim_iv", "idim_ls_consistent"],
    "estimator_trials": {},  # {estimator = n}: run a slow estimator on the first n trials only
    "estimator_options": {},  # {estimator = {option = value}}: as a study's (not the batched least-squares family)
    "full": True,  # whether `jaxid run --full` runs this setting (Benchmark.select_full)
    "full_estimator_trials": None,  # estimator_trials of a --full run (default: estimator_trials)
    "prior_error": 0.3,  # relative error of the prior (CAD) values the consistent fit is regularised towards
    "validation_seed": 1,  # key of the held-out validation reference (same harmonics and period)
    "trials": None,  # per-setting trial count (else the experiment's)
    "label": None,  # free text shown in tables
}

_CHOICES = {"excitation": EXCITATIONS, "controller": CONTROLLERS}
_POSITIVE = ("period", "sample_step", "controller_frequency", "cutoff_hz")
_NON_NEGATIVE = ("angle_std", "velocity_std", "torque_std", "prior_error", "trim_s")
_COUNTS = ("harmonics", "measured_periods", "substeps")
_SEEDS = ("trajectory_seed", "validation_seed")
#: A ``--full`` run's trials per chunk, at least (``Benchmark.select_full``): the batched closed loop and
#: estimators pay per call, not per trial (UR5 closed loop: 40 ms a trial at batch 10, 15 ms at 100).
FULL_CHUNK = 100
#: A study's ``[experiment]`` keys but ``plots`` (a benchmark draws its own figures).
EXPERIMENT_KEYS = {key: kind for key, kind in STUDY_EXPERIMENT_KEYS.items() if key != "plots"}


@dataclass(frozen=True)
class Benchmark(Experiment):
    """A validated benchmark: an ``Experiment`` whose settings hold ``BENCHMARK_DEFAULTS`` keys and whose
    ``arm`` is the ``[arm]`` table (``urdf`` resolved to an absolute path, ``options`` for ``load_arm``)."""

    #: The URDF's absolute path (``arm["urdf"]`` is as written in the file, relative to it).
    urdf_path: str = ""

    def select(self, names: list[str] | None, trials: int | None = None) -> Benchmark:
        """As ``Experiment.select`` (``smoke`` runs only when named)."""
        picked = Experiment.select(self, names, trials)
        return Benchmark(
            self.name,
            self.description,
            self.seed,
            self.trials,
            self.chunk,
            (),
            picked.settings,
            self.full_trials,
            self.source,
            self.raw,
            self.arm,
            self.urdf_path,
        )

    def select_full(self, names: list[str] | None = None) -> Benchmark:
        """The ``--full`` run: ``full_trials`` trials of the settings marked ``full = true`` (or of
        ``names``), each with its ``full_estimator_trials`` where given, in chunks of at least
        ``FULL_CHUNK``. Raises ``ConfigError`` without ``full_trials``."""
        if self.full_trials is None:
            raise ConfigError(f"{self.name} has no experiment.full_trials; give --trials N instead of --full.")
        if names is None:
            names = [s.name for s in self.settings if s["full"] and s.name != "smoke"]
        picked = self.select(names, self.full_trials)
        picked = dataclasses.replace(picked, chunk=max(picked.chunk, FULL_CHUNK))
        settings = []
        for s in picked.settings:
            values = dict(s.values)
            if values["full_estimator_trials"] is not None:
                values["estimator_trials"] = dict(values["full_estimator_trials"])
            settings.append(Setting(s.name, values, s.trials, s.arm))
        return dataclasses.replace(picked, settings=tuple(settings))

    def resolved(self) -> dict:
        out = Experiment.resolved(self)
        out["experiment"]["kind"] = "benchmark"
        out["experiment"].pop("plots", None)
        return out

    def load_arm(self):
        """The nominal ``SerialArm`` of the ``[arm]`` table (host-side; float64)."""
        from .fit_arm import _load_urdf

        return _load_urdf(Path(self.urdf_path), self.arm["options"], "arm.urdf")


#: The estimators a benchmark runs in one compiled program per chunk with their default options
#: (``jaxid.benchmark.batched.BATCHED``, and DIDIM: ``jaxid.benchmark.didim``): no ``estimator_options`` for them.
DEFAULT_ONLY = ("idim_ls", "rls", "idim_ls_consistent", "didim")


def _check_options(table, names: list[str], where: str) -> None:
    """``estimator_options`` (``ConfigError``, one line): a table per estimator of the setting, each option
    one its class takes on logs (``check_estimator_options``), none for the batched least-squares family."""
    key = f"{where}.estimator_options"
    if not isinstance(table, dict):
        raise ConfigError(f"{key} must be a table {{estimator = {{option = value}}}}, got {table!r}.")
    for name, options in table.items():
        if name not in names:
            raise ConfigError(f"{key}.{name}: {name!r} is not among this setting's estimators {names}.")
        if name in DEFAULT_ONLY:
            raise ConfigError(
                f"{key}.{name}: {', '.join(DEFAULT_ONLY)} run batched with their default options in a benchmark "
                "(one compiled program per chunk); drop this table (the setting's cutoff_hz and prior_error are theirs)."
            )
        check_estimator_options(name, options, f"{key}.{name}", data="log")


def is_benchmark(raw: dict) -> bool:
    """Whether a parsed TOML file is a benchmark (``[experiment] kind = "benchmark"``)."""
    exp = raw.get("experiment", {})
    return isinstance(exp, dict) and exp.get("kind") == "benchmark"


def load_benchmark(path: str | Path) -> Benchmark:
    """Read and validate a benchmark TOML file (``ConfigError``, one line, on any problem)."""
    path = Path(path)
    return parse_benchmark(read_toml(path), source=str(path), default_name=path.stem)


def parse_benchmark(
    raw: dict, source: str | None = None, default_name: str = "benchmark", base_dir: str | Path | None = None
) -> Benchmark:
    """Validate a benchmark given as a dict (the parsed TOML); see the module docstring.

    ``base_dir``: the folder ``arm.urdf`` is relative to (default: the folder of ``source``, else the
    working directory). Reads the URDF (a missing or invalid file is a ``ConfigError``) and needs
    float64 for that. Raises ``ConfigError`` (one line).
    """
    where = f"{source}: " if source else ""
    tables = ("experiment", "arm", "defaults", "settings")
    for key in raw:
        if key not in tables:
            raise ConfigError(
                f"{where}unknown top-level table [{key}]; use [experiment], [arm], [defaults] and [settings.<name>].{did_you_mean(key, tables)}"
            )
    exp = raw.get("experiment", {})
    check_experiment_table(exp, EXPERIMENT_KEYS, where, " in a benchmark")
    if exp.get("kind") != "benchmark":
        raise ConfigError(f'{where}experiment.kind must be "benchmark" here, got {exp.get("kind")!r}.')
    for key in ("trials", "chunk", "full_trials"):
        if key in exp and exp[key] < 1:
            raise ConfigError(f"{where}experiment.{key} must be a positive integer, got {exp[key]!r}.")
    arm, urdf_path = _arm_table(raw.get("arm"), source, base_dir, where)
    defaults = raw.get("defaults", {})
    _check_keys(defaults, f"{where}[defaults]")
    settings_raw = raw.get("settings", {})
    if not settings_raw:
        raise ConfigError(f"{where}no settings: add at least one [settings.<name>] table.")
    trials = exp.get("trials", 20)
    settings = []
    for name, table in settings_raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{where}settings.{name} must be a table ([settings.{name}]).")
        _check_keys(table, f"{where}[settings.{name}]")
        values = copy.deepcopy(BENCHMARK_DEFAULTS)
        values.update(copy.deepcopy(defaults))
        values.update(copy.deepcopy(table))
        values = _validate(values, f"{where}settings.{name}", arm["dof"])
        n = values.pop("trials") or trials
        values["trials"] = None
        settings.append(Setting(name, values, int(n), None))
    return Benchmark(
        name=exp.get("name", default_name),
        description=exp.get("description", ""),
        seed=exp.get("seed", 0),
        trials=trials,
        chunk=exp.get("chunk", 8),
        plots=(),
        settings=tuple(settings),
        full_trials=exp.get("full_trials"),
        source=source,
        raw=raw,
        arm=arm,
        urdf_path=urdf_path,
    )


def _arm_table(table: Any, source: str | None, base_dir, where: str) -> tuple[dict, str]:
    """``({"urdf": the robot file as written, "options": load_arm's keywords, "dof": n}, absolute path)``;
    the robot file (``urdf`` or ``mjcf``) is read here."""
    from .fit_arm import ROBOT_FILES, URDF_KEYS, _load_urdf, _robot_file, _urdf_options

    if not isinstance(table, dict) or not any(k in table for k in ROBOT_FILES):
        raise ConfigError(
            f'{where}a benchmark needs an [arm] table with urdf = "path/to/robot.urdf" (or mjcf = "robot.xml", '
            f"relative to the file), e.g. the shipped data/robots/ur5_robot.urdf; allowed keys {list(URDF_KEYS)}."
        )
    if base_dir is None:
        base_dir = Path(source).parent if source is not None else Path.cwd()
    try:
        options = _urdf_options(table)
        key, file = _robot_file(table)
        path = (Path(base_dir) / file).resolve()
        arm = _load_urdf(path, options, f"{where}arm.{key}")
    except ConfigError as err:
        message = str(err)
        raise ConfigError(message if message.startswith(where) else f"{where}{message}") from None
    return {"urdf": file, "options": options, "dof": int(arm.dof)}, str(path)


def _check_keys(table: dict, where: str) -> None:
    for key in table:
        if key not in BENCHMARK_DEFAULTS:
            raise ConfigError(
                f"{where}: unknown key {key!r}; allowed keys: {sorted(BENCHMARK_DEFAULTS)}.{did_you_mean(key, BENCHMARK_DEFAULTS)}"
            )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _validate(v: dict, where: str, dof: int) -> dict:
    for key, choices in _CHOICES.items():
        if v[key] not in choices:
            raise ConfigError(
                f"{where}.{key} = {v[key]!r} is not allowed; choose one of {list(choices)}.{did_you_mean(str(v[key]), choices)}"
            )
    for key in _POSITIVE + _NON_NEGATIVE:
        if not _number(v[key]):
            raise ConfigError(f"{where}.{key} must be a finite number, got {v[key]!r}.")
        v[key] = float(v[key])
    for key in _POSITIVE:
        if not v[key] > 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {v[key]!r}.")
    for key in _NON_NEGATIVE:
        if not v[key] >= 0:
            raise ConfigError(f"{where}.{key} must be >= 0, got {v[key]!r}.")
    if not (_number(v["margin"]) and 0 < v["margin"] <= 1):
        raise ConfigError(f"{where}.margin must be a number in (0, 1], got {v['margin']!r}.")
    v["margin"] = float(v["margin"])
    for key in _COUNTS:
        if isinstance(v[key], bool) or not isinstance(v[key], int) or v[key] < 1:
            raise ConfigError(f"{where}.{key} must be a positive integer, got {v[key]!r}.")
    for key in _SEEDS:
        if isinstance(v[key], bool) or not isinstance(v[key], int) or v[key] < 0:
            raise ConfigError(f"{where}.{key} must be a non-negative integer, got {v[key]!r}.")
    duration = v["period"] * v["measured_periods"]
    samples = duration / v["sample_step"]
    if abs(samples - round(samples)) > 1e-9 * max(1.0, samples):
        raise ConfigError(
            f"{where}.sample_step = {v['sample_step']:g} s does not divide the logged time {duration:g} s "
            "(period × measured_periods); choose a divisor."
        )
    if 2 * v["trim_s"] >= 0.5 * duration:
        raise ConfigError(
            f"{where}.trim_s = {v['trim_s']:g} s at each end leaves less than half of the logged {duration:g} s; "
            "lower it or log more periods."
        )
    if v["cutoff_hz"] >= 0.5 / v["sample_step"]:
        raise ConfigError(
            f"{where}.cutoff_hz = {v['cutoff_hz']:g} Hz is at or above the Nyquist frequency "
            f"{0.5 / v['sample_step']:g} Hz of sample_step; lower it."
        )
    for key, unit in (("true_viscous", "N m s/rad"), ("true_coulomb", "N m")):
        value = v[key]
        values = value if isinstance(value, list) else [value]
        if not (all(_number(c) and c >= 0 for c in values) and len(values) in (1, dof)):
            raise ConfigError(
                f"{where}.{key} must be a non-negative number or a list of {dof} (one per joint) [{unit}], got {value!r}."
            )
    if not isinstance(v["model_coulomb"], bool):
        raise ConfigError(f"{where}.model_coulomb must be true or false, got {v['model_coulomb']!r}.")
    names = v["estimators"]
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names:
        raise ConfigError(f"{where}.estimators must be a non-empty list; choose some of {list(BENCHMARK_ESTIMATORS)}.")
    for name in names:
        if name not in BENCHMARK_ESTIMATORS:
            raise ConfigError(
                f"{where}.estimators: unknown estimator {name!r}; available: {list(BENCHMARK_ESTIMATORS)}.{did_you_mean(str(name), BENCHMARK_ESTIMATORS)}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.estimators lists an estimator twice: {names}.")
    v["estimators"] = list(names)
    if not isinstance(v["full"], bool):
        raise ConfigError(f"{where}.full must be true or false, got {v['full']!r}.")
    for key in ("estimator_trials", "full_estimator_trials"):
        limits = v[key]
        if limits is None and key == "full_estimator_trials":
            continue
        if not isinstance(limits, dict):
            raise ConfigError(f"{where}.{key} must be a table {{estimator = trials}}, got {limits!r}.")
        for name, count in limits.items():
            if name not in names:
                raise ConfigError(f"{where}.{key}.{name}: {name!r} is not among this setting's estimators {names}.")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ConfigError(f"{where}.{key}.{name} must be a positive integer, got {count!r}.")
    _check_options(v["estimator_options"], names, where)
    trials = v["trials"]
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ConfigError(f"{where}.trials must be a positive integer, got {trials!r}.")
    if v["excitation"] != "random":
        try:
            from ..excitation.fourier_design import design_trajectory  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"{where}.excitation = {v['excitation']!r} needs jaxid.excitation.fourier_design, which this build lacks; "
                'use excitation = "random".'
            ) from None
    return v
