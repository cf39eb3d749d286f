"""The ``jaxid fit`` configuration: sections, defaults, validation (see ``jaxid.fit``).

The ``[arm]`` table describes either a two-link arm (``jaxid.model.description.arm_from_description``:
a preset, a parameter file or the geometry itself) or, with ``urdf = "robot.urdf"``, an ``n``-joint
serial arm read by ``jaxid.model.urdf.load_arm`` (``URDF_KEYS``: the file, relative to the config,
and ``load_arm``'s options ``fixed_joints``, ``armature``, ``offset``, ``gravity``, ``coulomb_slope``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..estimate import check_options, names_for
from ..types import did_you_mean

__all__ = ["ESTIMATOR_NAMES", "URDF_KEYS", "FitConfig", "parse_fit_config", "load_fit_config", "config_error"]

#: The estimators a fit can use: every class of ``jaxid.estimate`` that takes logs.
ESTIMATOR_NAMES = tuple(names_for("log"))

_SECTIONS: dict[str, dict[str, Any]] = {
    "fit": {
        "name": None,
        "description": "",
        "data": ".",
        "reference": "",
        "compare": [],
        "unknowns": "base",
        "fixed": {},
    },
    "log": {
        # Columns by name, 0-based index or prefix (None: the format's default, jaxid.measure.log_formats: a CSV's
        # pos_meas1 … pos_measn, tau_meas…, time; an .npz archive's positions, torques, times; a bag's
        # JointState position, effort and header stamps).
        "angles": None,
        "torques": None,
        "velocities": None,
        "time": None,
        "header": None,  # CSV: whether the first line names the columns (None: the header rule)
        "torque_gain": 1.0,  # [N m per unit of the torque column] a number or one per joint
        "topic": None,  # ROS bag: the JointState topic (None: the only one)
        "joints": None,  # ROS bag: the joint names to pick (None: a URDF arm's joints, else the messages')
        "sample_step": None,
        "window": None,
        "angle_unit": "rad",
    },
    "split": {"rule": "", "train": None, "test": []},
    "filter": {
        "method": "butterworth",
        "order": None,
        "cutoff_hz": "auto",
        "candidates": "auto",
        "excitation_hz": "auto",
        "trim_s": 0.1,
        "velocities": "differentiate",  # or "measured": the log's velocities (log.velocities), filtered
    },
    "estimators": {"use": ["idim_ls", "idim_ls_bounded", "idim_iv", "output_error", "ekf"]},
    "validation": {"horizons_s": [0.5, 1.0, 2.0], "start_every_s": 1.0, "headline": "auto", "band_hz": 10.0},
    "frequency": {"harmonics": 5, "min_share": 0.5},
}

#: The table of the arm (``jaxid.model.description.arm_from_description``): checked there.
_ARM = "arm"

#: The keys of an ``[arm]`` table that reads a URDF (``jaxid.model.urdf.load_arm``): the file [relative
#: to the config], joints locked at 0 (names), armature [kg m²] and torque offset [N m] per joint (a
#: number or ``n`` numbers: a URDF holds neither), gravity ``[gx, gy, gz]`` [m/s²] in the base frame
#: (default ``[0, 0, -9.81]``), the Coulomb slope [s/rad] (default 100). Viscous and Coulomb friction
#: are the URDF's ``<dynamics damping friction>``.
URDF_KEYS = ("urdf", "mjcf", "fixed_joints", "armature", "offset", "gravity", "coulomb_slope")
#: The robot-description keys of ``[arm]``: a URDF, or an MJCF model (read through MuJoCo's compiler).
ROBOT_FILES = {"urdf": (".urdf",), "mjcf": (".xml", ".mjcf")}


def config_error(message: str) -> Exception:
    from .study import ConfigError

    return ConfigError(message)


@dataclass(frozen=True)
class FitConfig:
    """A validated fit configuration (see the ``jaxid.fit`` docstring); ``raw`` is the resolved dict."""

    name: str
    path: Path | None
    data: Path
    raw: dict[str, Any] = field(repr=False)
    arm: Any = field(default=None, repr=False)
    reference: Any = field(default=None, repr=False)
    #: Further published parameter sets (``fit.compare``), ``{label: arm}``, through the same metrics.
    compare: dict[str, Any] = field(default_factory=dict, repr=False)

    def section(self, name: str) -> dict[str, Any]:
        return self.raw[name]

    @property
    def train(self) -> list[str]:
        return list(self.raw["split"]["train"])

    @property
    def test(self) -> list[str]:
        return list(self.raw["split"]["test"])

    @property
    def estimators(self) -> list[str]:
        return list(self.raw["estimators"]["use"])

    def estimator_options(self, name: str) -> dict[str, Any]:
        return dict(self.raw["estimators"].get(name, {}))


def parse_fit_config(raw: dict[str, Any], *, path: Path | None = None, data: str | Path | None = None) -> FitConfig:
    """Validate a fit config dict; raise ``ConfigError`` naming the bad key or value."""
    allowed_sections = [_ARM, *_SECTIONS]
    unknown = [k for k in raw if k not in allowed_sections]
    if unknown:
        raise config_error(
            f"unknown section [{unknown[0]}]; allowed: {allowed_sections}.{did_you_mean(unknown[0], allowed_sections)}"
        )
    if isinstance(raw.get("fit"), dict) and "model" in raw["fit"]:
        raise config_error(
            f'fit.model is replaced by the [arm] table: write [arm] preset = "{raw["fit"]["model"]}" (or describe '
            "your arm there; see experiments/fits/README.md)."
        )
    resolved: dict[str, Any] = {}
    for section, defaults in _SECTIONS.items():
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise config_error(f"[{section}] must be a table.")
        out = dict(defaults)
        for key, value in given.items():
            if section == "estimators" and key in ESTIMATOR_NAMES:
                # The options of the estimator's class on logs (jaxid.estimate), checked as its constructor's.
                if not isinstance(value, dict):
                    raise config_error(f"estimators.{key} must be a table of options.")
                for option, setting in value.items():
                    try:
                        check_options(key, {option: setting}, data="log")
                    except ValueError as err:
                        raise config_error(f"estimators.{key}.{option}: {err}") from None
                out[key] = dict(value)
                continue
            if key not in defaults:
                allowed = list(defaults) + (list(ESTIMATOR_NAMES) if section == "estimators" else [])
                raise config_error(f"unknown key '{section}.{key}'; allowed: {allowed}.{did_you_mean(key, allowed)}")
            out[key] = value
        resolved[section] = out
    _check_numbers(resolved)
    fit = resolved["fit"]
    if not fit["name"] or not isinstance(fit["name"], str):
        raise config_error("fit.name is required (the results go to results/<name>/).")
    split = resolved["split"]
    if not split["train"]:
        raise config_error("split.train must list at least one log (file stem, e.g. 'trajectory_03').")
    for key in ("train", "test"):
        if not isinstance(split[key], list) or not all(isinstance(s, str) for s in split[key]):
            raise config_error(f"split.{key} must be a list of log names (file stems).")
    both = set(split["train"]) & set(split["test"])
    if both:
        raise config_error(f"split: {sorted(both)} are in both train and test; a held-out run must not be fitted.")
    use = resolved["estimators"]["use"]
    if not isinstance(use, list) or not use:
        raise config_error(f"estimators.use must be a non-empty list of {list(ESTIMATOR_NAMES)}.")
    for name in use:
        if name not in ESTIMATOR_NAMES:
            raise config_error(
                f"unknown estimator {name!r} in estimators.use; allowed: {list(ESTIMATOR_NAMES)}.{did_you_mean(name, ESTIMATOR_NAMES)}"
            )
        resolved["estimators"].setdefault(name, {})
    if "idim_ls" not in use:
        use.insert(0, "idim_ls")  # every other estimator starts from it
    flt = resolved["filter"]
    from ..measure.filters import FILTER_METHODS

    if flt["method"] not in FILTER_METHODS:
        raise config_error(f"filter.method {flt['method']!r}: use one of {list(FILTER_METHODS)}.")
    for key in ("cutoff_hz", "excitation_hz"):
        v = flt[key]
        if v != "auto" and not (isinstance(v, int | float) and v > 0):
            raise config_error(f'filter.{key} must be "auto" or a positive number [Hz], got {v!r}.')
    cands = flt["candidates"]
    if cands != "auto" and not (
        isinstance(cands, list)
        and cands
        and all(isinstance(c, int | float) and not isinstance(c, bool) and c > 0 for c in cands)
    ):
        raise config_error(
            f'filter.candidates must be "auto" or a non-empty list of positive multiples of the excitation '
            f"frequency, got {cands!r}."
        )
    val = resolved["validation"]
    if val["headline"] != "auto" and val["headline"] not in use:
        raise config_error(
            f'validation.headline {val["headline"]!r} must be "auto" (chosen on the training runs) or one of '
            f"estimators.use {use}."
        )
    if not val["horizons_s"] or any(not (isinstance(h, int | float) and h > 0) for h in val["horizons_s"]):
        raise config_error("validation.horizons_s must be a list of positive durations [s].")
    if resolved["log"]["angle_unit"] not in ("rad", "deg"):
        raise config_error(f'log.angle_unit must be "rad" or "deg", got {resolved["log"]["angle_unit"]!r}.')
    base_dir = path.parent if path is not None else Path.cwd()
    data_dir = Path(data) if data is not None else (base_dir / fit["data"])
    arm, reference = _arms(raw, fit["reference"], base_dir)
    compare = fit["compare"]
    if not isinstance(compare, list) or not all(isinstance(c, str) and c for c in compare):
        raise config_error(
            "fit.compare must be a list of further reference files (like fit.reference: robot or parameter "
            f"files, relative to this file), got {compare!r}."
        )
    others = {}
    for entry in compare:
        label = Path(entry).name.split(".")[0]
        if label in others or label in ("nominal", "reference") or label in use:
            raise config_error(
                f"fit.compare: {entry!r} gives the label {label!r} twice or a reserved one; rename the file."
            )
        others[label] = _arms(raw, entry, base_dir)[1]
    _check_log(resolved["log"], flt, arm.dof)
    _check_consistent(resolved, arm)
    resolved[_ARM] = dict(raw.get(_ARM, {}))
    return FitConfig(fit["name"], path, data_dir, resolved, arm, reference, others)


def _check_log(log: dict[str, Any], flt: dict[str, Any], joints: int) -> None:
    """The ``[log]`` keys of the formats (``jaxid.measure.log_formats``) and ``filter.velocities``, for an arm of ``joints``."""
    from ..measure.log_formats import check_torque_gain

    def column(v):
        return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)

    if log["time"] is not None and not column(log["time"]):
        raise config_error(f"log.time must be a column name or a 0-based column index, got {log['time']!r}.")
    for key in ("angles", "torques", "velocities"):
        v = log[key]
        if v is None or isinstance(v, str):
            continue
        if not (isinstance(v, list) and all(column(c) for c in v)):
            raise config_error(
                f"log.{key} must be a prefix, a name of an .npz array, or a list of {joints} column names or 0-based "
                f"indices (one per joint), got {v!r}."
            )
    if log["header"] is not None and not isinstance(log["header"], bool):
        raise config_error(
            f"log.header must be true or false (leave it out for the header rule), got {log['header']!r}."
        )
    try:
        check_torque_gain(log["torque_gain"], joints, "log.torque_gain")
    except ValueError as err:
        raise config_error(str(err)) from None
    if log["topic"] is not None and not (isinstance(log["topic"], str) and log["topic"]):
        raise config_error(f'log.topic must be a topic name such as "/joint_states", got {log["topic"]!r}.')
    names = log["joints"]
    if names is not None and not (
        isinstance(names, list)
        and len(names) == joints
        and all(isinstance(j, str) for j in names)
        and len(set(names)) == joints
    ):
        raise config_error(
            f"log.joints must be {joints} distinct joint names (the arm's joints, in order), got {names!r}."
        )
    if flt["velocities"] not in ("differentiate", "measured"):
        raise config_error(f'filter.velocities must be "differentiate" or "measured", got {flt["velocities"]!r}.')
    if flt["velocities"] == "measured" and log["velocities"] is None:
        raise config_error(
            'filter.velocities = "measured" needs the logs\' velocities: set log.velocities (the velocity columns, '
            'e.g. "vel_meas", or "velocities" in an .npz archive, "velocity" in a ROS bag).'
        )


def _check_consistent(resolved: dict[str, Any], arm) -> None:
    """The physically consistent fit needs an arm of standard parameters (a URDF) with every base parameter free."""
    from ..estimate import estimator_class
    from ..model import SerialArm

    est = resolved["estimators"]

    def consistent(name):
        field = estimator_class(name).__dataclass_fields__.get("constraint")
        return est.get(name, {}).get("constraint", field.default if field else "none") == "consistent"

    wanted = [n for n in est["use"] if consistent(n)]
    fit = resolved["fit"]
    if wanted and (not isinstance(arm, SerialArm) or fit["fixed"] or fit["unknowns"] != "base"):
        raise config_error(
            f"estimators {wanted}: the consistent fit needs an [arm] urdf (its links' standard parameters) and "
            'fit.unknowns = "base" with nothing in fit.fixed; drop them or use idim_ls_bounded.'
        )


def _arms(raw: dict[str, Any], reference: Any, base_dir: Path):
    """The arm of ``[arm]`` and the reference arm of ``fit.reference`` (same known geometry), checked."""
    from ..model import PRESETS, arm_from_description, load_parameters

    table = raw.get(_ARM)
    if table is None:
        raise config_error(
            'the [arm] table is missing: describe the arm (e.g. [arm] preset = "double_pendulum", or '
            'parameters = "my_arm.yml", or its lengths and constants; see experiments/fits/README.md).'
        )
    if not isinstance(table, dict):
        raise config_error("[arm] must be a table.")
    if any(k in table for k in ROBOT_FILES):
        return _urdf_arms(table, reference, base_dir)
    try:
        arm = arm_from_description(table, base_dir=base_dir, where="arm")
    except ValueError as err:
        raise config_error(str(err)) from None
    if reference in ("", None, False):
        return arm, None
    if not isinstance(reference, str):
        raise config_error(f"fit.reference must be a preset name or a parameter file path, got {reference!r}.")
    if reference.lower().endswith(".urdf"):
        raise config_error(
            f"fit.reference {reference!r} is a URDF but [arm] describes a two-link arm: a URDF reference needs "
            '[arm] urdf = "..." (the same kind of description); give a preset or a parameter file.'
        )
    try:
        if reference in PRESETS:
            ref = PRESETS[reference]()
        elif reference.lower().endswith((".yml", ".yaml", ".toml")):
            ref = load_parameters(base_dir / reference)
        else:
            raise config_error(
                f"fit.reference {reference!r} is neither a preset ({list(PRESETS)}) nor a parameter file "
                '(.yml, .yaml, .toml); give one, or "" for none.'
            )
    except ValueError as err:
        raise config_error(f"fit.reference: {err}") from None
    import numpy as np

    for name, a, b in (
        ("l1", arm.lengths[0], ref.lengths[0]),
        ("g", arm.gravity, ref.gravity),
        ("gear_ratio", arm.gear_ratio, ref.gear_ratio),
        ("coulomb_slope", arm.coulomb_slope, ref.coulomb_slope),
    ):
        if not np.isclose(float(a), float(b), rtol=1e-9, atol=0.0):
            raise config_error(
                f"fit.reference {reference!r} has {name} = {float(b):.6g} but [arm] has {float(a):.6g}: a reference "
                "must describe the same build (the same known geometry); fix one of them."
            )
    return arm, ref


def _urdf_options(table: dict[str, Any]) -> dict[str, Any]:
    """``load_arm``'s keyword arguments from an ``[arm]`` table with ``urdf`` (all but the file), checked."""
    unknown = [k for k in table if k not in URDF_KEYS]
    if unknown:
        raise config_error(
            f"unknown key 'arm.{unknown[0]}' next to a robot file (it describes the whole arm); allowed: "
            f"{list(URDF_KEYS)}.{did_you_mean(unknown[0], URDF_KEYS)}"
        )
    _robot_file(table)
    options: dict[str, Any] = {}
    fixed = table.get("fixed_joints", [])
    if not isinstance(fixed, list) or not all(isinstance(j, str) for j in fixed):
        raise config_error(f"arm.fixed_joints must be a list of joint names, got {fixed!r}.")
    options["fixed_joints"] = tuple(fixed)
    for key in ("armature", "offset"):
        if key in table:
            value = table[key]
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise config_error(f"arm.{key} must be a number or a list of numbers (one per joint), got {value!r}.")
            options[key] = value
    if "gravity" in table:
        g = table["gravity"]
        if not (isinstance(g, list) and len(g) == 3 and all(isinstance(v, int | float) for v in g)):
            raise config_error(f"arm.gravity must be [gx, gy, gz] [m/s²] in the base frame, got {g!r}.")
        options["gravity"] = tuple(float(v) for v in g)
    if "coulomb_slope" in table:
        slope = table["coulomb_slope"]
        if not (isinstance(slope, int | float) and not isinstance(slope, bool) and slope > 0):
            raise config_error(f"arm.coulomb_slope must be a positive number [s/rad], got {slope!r}.")
        options["coulomb_slope"] = float(slope)
    return options


def _robot_file(table: dict[str, Any]) -> tuple[str, str]:
    """``(key, path)`` of the ``[arm]`` table's robot description: ``urdf`` or ``mjcf``, exactly one."""
    given = [k for k in ROBOT_FILES if k in table]
    if len(given) != 1:
        raise config_error('[arm]: give one robot description, urdf = "....urdf" or mjcf = "....xml", not both.')
    key = given[0]
    path = table[key]
    if not isinstance(path, str) or not path.lower().endswith(ROBOT_FILES[key]):
        raise config_error(
            f"arm.{key} must be the path of a {' or '.join(ROBOT_FILES[key])} file (relative to the config), got {path!r}."
        )
    return key, path


def _load_urdf(path: Path, options: dict[str, Any], where: str):
    from ..model.urdf import load_arm

    if not path.is_file():
        raise config_error(
            f"{where}: the robot file {str(path)!r} does not exist; give its path relative to the config."
        )
    try:
        return load_arm(path, **options)
    except ValueError as err:
        raise config_error(f"{where}: {err}") from None


def _urdf_arms(table: dict[str, Any], reference: Any, base_dir: Path):
    """The ``SerialArm`` of ``[arm] urdf = ...`` and the reference: another URDF read with the same
    ``[arm]`` options (only the file differs), which must have the same kinematic structure."""
    options = _urdf_options(table)
    key, path = _robot_file(table)
    arm = _load_urdf(base_dir / path, options, f"arm.{key}")
    if reference in ("", None, False):
        return arm, None
    suffixes = sum(ROBOT_FILES.values(), ())
    if not (isinstance(reference, str) and reference.lower().endswith(suffixes)):
        raise config_error(
            f"fit.reference {reference!r}: with [arm] {key} the reference must be a robot file (.urdf or MJCF .xml, "
            'relative to this file, read with the same [arm] options), or "" for none.'
        )
    ref = _load_urdf(base_dir / reference, options, "fit.reference")
    import numpy as np

    same = arm.dof == ref.dof and arm.joint_types == ref.joint_types
    for name in ("axes", "parent_rotations"):
        same = same and np.allclose(np.asarray(getattr(arm, name)), np.asarray(getattr(ref, name)), rtol=0, atol=1e-9)
    # Where the first joint sits on the base does not change the dynamics of a fixed-base arm under uniform
    # gravity (published files place the same arm on different stands); the joints after it must agree.
    shift = np.abs(np.asarray(arm.parent_translations)[1:] - np.asarray(ref.parent_translations)[1:]) if same else None
    if not same or float(shift.max(initial=0.0)) > REFERENCE_ORIGIN_TOLERANCE:
        raise config_error(
            f"fit.reference {reference!r} does not have the kinematic structure of arm.{key} ({arm.dof} joints, "
            f"their types, axes and origins within {REFERENCE_ORIGIN_TOLERANCE * 1000:g} mm): a reference must "
            "describe the same arm; fix one of them."
        )
    if float(shift.max(initial=0.0)) > 1e-9:
        import warnings

        joint = int(np.argmax(shift.max(axis=1))) + 1
        warnings.warn(
            f"fit.reference {reference!r}: the origin of joint {joint + 1} differs from arm.{key}'s by "
            f"{float(shift.max()) * 1000:.3g} mm; its parameters are evaluated on the [arm]'s kinematics.",
            UserWarning,
            stacklevel=3,
        )
    return arm, ref


#: How far [m] a reference's joint origins may lie from the ``[arm]``'s (beyond the first joint's):
#: a published parameter set of the same arm may come with its own CAD's millimetres.
REFERENCE_ORIGIN_TOLERANCE = 0.005


#: Numeric keys and their rule: "positive", "non-negative", "positive int", "fraction" (0 < x <= 1);
#: ``None`` is allowed where the default is ``None``.
_NUMERIC_RULES: dict[str, str] = {
    "log.sample_step": "positive",
    "filter.order": "positive int",
    "filter.trim_s": "non-negative",
    "validation.start_every_s": "positive",
    "validation.band_hz": "positive",
    "frequency.harmonics": "positive int",
    "frequency.min_share": "fraction",
    "decimate": "positive int",
    "iterations": "positive int",
    "max_iterations": "positive int",
    "stride": "positive int",
    "segment_s": "positive",
    "continuity_weight": "non-negative",
    "measurement_std": "positive",
    "velocity_process_std": "positive",
    "initial_relative_std": "positive",
    "forgetting": "fraction",
    "initial_covariance": "positive",
}


def _check_numbers(resolved: dict[str, Any]) -> None:
    """Every number finite (NaN/inf named by key), and the numeric keys of ``_NUMERIC_RULES`` in range."""

    def walk(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            raise config_error(f"{key} = {value!r}: give a finite number.")

    for section, table in resolved.items():
        walk(table, section)
    checks = [(f"{sec}.{k}", v) for sec, table in resolved.items() for k, v in table.items()]
    checks += [
        (f"estimators.{name}.{k}", v)
        for name in ESTIMATOR_NAMES
        for k, v in resolved["estimators"].get(name, {}).items()
    ]
    for key, value in checks:
        rule = _NUMERIC_RULES.get(key) or _NUMERIC_RULES.get(
            key.rsplit(".", 1)[-1] if key.startswith("estimators.") else ""
        )
        if rule is None or value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = number and {
            "positive": lambda x: x > 0,
            "non-negative": lambda x: x >= 0,
            "positive int": lambda x: isinstance(x, int) and x >= 1,
            "fraction": lambda x: 0 < x <= 1,
        }[rule](value)
        if not ok:
            what = {"fraction": "a number in (0, 1]"}.get(
                rule, f"a {rule} number" if "int" not in rule else "a positive integer"
            )
            raise config_error(f"{key} must be {what}, got {value!r}.")


def load_fit_config(path: str | Path, *, data: str | Path | None = None) -> FitConfig:
    """Read and validate a fit TOML file (``data`` overrides ``fit.data``)."""
    from .study import read_toml

    path = Path(path)
    return parse_fit_config(read_toml(path, f"fit config {str(path)!r} does not exist."), path=path, data=data)
