"""The checks of a fit config's values (see ``jaxid.config.fit``): every number finite and, for the
numeric keys of ``_NUMERIC_RULES``, in range; the ``[log]`` keys of the log formats and
``filter.velocities``; the physically consistent fit's needs (a URDF arm, every base parameter free).
Also the error they raise (``config_error``: a ``ConfigError``) and the estimators a fit can use.
"""

from __future__ import annotations

import math
from typing import Any

from ..estimate import names_for

__all__ = ["ESTIMATOR_NAMES", "config_error"]

#: The estimators a fit can use: every class of ``jaxid.estimate`` that takes logs.
ESTIMATOR_NAMES = tuple(names_for("log"))


def config_error(message: str) -> Exception:
    from .study import ConfigError

    return ConfigError(message)


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
    "torque_std": "positive",
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
