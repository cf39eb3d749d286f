"""The ``jaxid fit`` configuration: sections, defaults, validation (see ``jaxid.fit``).

Here: the sections and their defaults, ``FitConfig``, and ``parse_fit_config`` / ``load_fit_config``,
which resolve the sections and check their keys. The ``[arm]`` table (a two-link arm, or a robot
file and ``load_arm``'s options: ``URDF_KEYS``) and the reference arms are read in
``jaxid.config.fit_arm``; the values are checked in ``jaxid.config.fit_checks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..estimate import check_options
from ..types import did_you_mean
from .fit_arm import _ARM, _arms
from .fit_checks import ESTIMATOR_NAMES, _check_consistent, _check_log, _check_numbers, config_error

__all__ = ["FitConfig", "parse_fit_config", "load_fit_config"]

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
    # (an [arm] urdf/mjcf without estimators.use: SERIAL_ESTIMATORS)
    "validation": {"horizons_s": [0.5, 1.0, 2.0], "start_every_s": 1.0, "headline": "auto", "band_hz": 10.0},
    "frequency": {"harmonics": 5, "min_share": 0.5},
}


#: ``estimators.use`` for an arm read from a URDF or MJCF when the config does not give it: the physically
#: consistent least squares as well, so that IDIM-IV, output error and the EKF start from an arm that can be
#: simulated (IDIM-LS's own can have an indefinite mass matrix on a real six-joint arm: IDIM-IV's instruments
#: were then singular) and the written URDF/MJCF is a fitted arm, not a projection of one.
SERIAL_ESTIMATORS = ["idim_ls", "idim_ls_bounded", "idim_ls_consistent", "idim_iv", "output_error", "ekf"]


#: Estimator options whose default differs in a fit of measured logs from the estimator's own (which its
#: simulated benchmarks were validated at); a config's own value wins. Output error's continuity gaps
#: weighted like one angle sample (``continuity_weight = 1``), not as near-constraints (100): on a logged
#: arm the torque is an input with noise, whose effect over a 0.5-s segment is ~100 angle-noise stds, so the
#: gaps cannot close and, weighted 100, their large residuals leave Gauss–Newton's model wrong by 7-200× and
#: the fit crawls to its iteration limit (``jaxid.estimate.logs.output_error``'s docstring: the UR5
#: campaign of ``scripts/bench_fit_cost.py``: 645 s, ``max_iterations``; weighted 1: ``"ok"``). There plain output
#: error runs Gauss–Newton, which stops with a stationarity certificate (the estimator's own default is the
#: hybrid of Gauss–Newton and the trust region, for weight 100: ``jaxid.estimate.OutputError``). On the measured
#: double pendulum (its config sets weight 100) Gauss–Newton at weight 1, 10 and 100 and the hybrid at 100 all stop
#: at 30 passes (2026-12-07), the angle residuals 26-38 angle-noise stds: a misfit the weight does not remove.
FIT_OPTIONS: dict[str, dict[str, Any]] = {
    "output_error": {"continuity_weight": 1.0, "solver": "gauss_newton"},
    "output_error_consistent": {"continuity_weight": 1.0},
}


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
    arm_table = raw.get("arm", {})
    if "use" not in raw.get("estimators", {}) and isinstance(arm_table, dict) and {"urdf", "mjcf"} & set(arm_table):
        resolved["estimators"]["use"] = list(SERIAL_ESTIMATORS)
    if isinstance(resolved["estimators"]["use"], list):  # a copy: the default's list is never changed
        resolved["estimators"]["use"] = list(resolved["estimators"]["use"])
    use = resolved["estimators"]["use"]
    if not isinstance(use, list) or not use:
        raise config_error(f"estimators.use must be a non-empty list of {list(ESTIMATOR_NAMES)}.")
    for name in use:
        if name not in ESTIMATOR_NAMES:
            raise config_error(
                f"unknown estimator {name!r} in estimators.use; allowed: {list(ESTIMATOR_NAMES)}.{did_you_mean(name, ESTIMATOR_NAMES)}"
            )
        resolved["estimators"].setdefault(name, {})
        for option, value in FIT_OPTIONS.get(name, {}).items():
            resolved["estimators"][name].setdefault(option, value)
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


def load_fit_config(path: str | Path, *, data: str | Path | None = None) -> FitConfig:
    """Read and validate a fit TOML file (``data`` overrides ``fit.data``)."""
    from .study import read_toml

    path = Path(path)
    return parse_fit_config(read_toml(path, f"fit config {str(path)!r} does not exist."), path=path, data=data)
