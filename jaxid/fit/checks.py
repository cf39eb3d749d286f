"""What a fit must refuse, and what it must warn about (the rules, each with its threshold).

**Refused before anything is written** (``ConfigError``, one line, says what to set):

- a log whose usable part (its length minus ``filter.trim_s`` at each end) is not longer than the
  longest ``validation.horizons_s``;
- ``validation.band_hz`` at or above 0.45 / Δ (the evaluation band must sit below Nyquist);
- an implausible training error (``check_training_error``): IDIM-LS's free simulations of the
  *training* runs (longest horizon, evaluation band) miss the measured angles by more, on average
  over runs and joints, than the angles' own spread (their standard deviation about each run's
  mean, averaged the same way) — what predicting a constant angle would score. Then the fitted
  model does not reproduce even the runs it was fitted on: the excitation frequency, the cut-off,
  the angle units or the columns are wrong.

**Warnings** (``fit_warnings``; on stderr, in ``warnings.csv``, in the manifest and in the summary):

- ``degrees``: an angle spans more than ``DEGREES_SPAN`` = 4π rad (two turns) peak-to-peak in a
  log — the angles are probably in degrees (``log.angle_unit = "deg"`` converts them);
- ``unexcited_joint``: a joint spans less than ``MOVES_RAD`` (0.05 rad) in every training run — it
  only dithers, so the parameters it carries are not identified;
- ``short_training``: the training runs hold fewer than ``MIN_PERIODS`` = 5 periods of the
  excitation in all;
- ``inconsistent``: an estimate fails a physical-consistency check (``consistency_checks``);
- ``std_exceeds_value``: an estimated parameter's standard deviation exceeds its magnitude;
- ``far_from_reference``: an estimated parameter differs from the reference's by a factor of
  ``FAR_FACTOR`` = 10 or more, or has the opposite sign (where the reference value is non-zero);
- ``worse_than_reference``: an estimate's held-out torque RMSE (evaluation band) is more than
  ``WORSE_FACTOR`` = 1.5 times the reference's on some joint.
"""

from __future__ import annotations

import math

import numpy as np

from .config import config_error
from .cutoff import MOVES_RAD

__all__ = [
    "DEGREES_SPAN",
    "MIN_PERIODS",
    "FAR_FACTOR",
    "WORSE_FACTOR",
    "check_horizons",
    "check_band",
    "check_training_error",
    "log_warnings",
    "estimate_warnings",
    "validation_warnings",
]

DEGREES_SPAN = 4 * math.pi
MIN_PERIODS = 5
FAR_FACTOR = 10.0
WORSE_FACTOR = 1.5


def check_horizons(logs, trim_s: float, horizons_s) -> None:
    """Every log's usable part must be longer than the longest horizon (module docstring)."""
    longest = max(horizons_s)
    for name, log in logs.items():
        usable = log.duration - 2 * trim_s
        if usable <= longest:
            raise config_error(
                f"{name}: its usable part ({log.duration:.3g} s minus filter.trim_s = {trim_s:g} s at each end = "
                f"{usable:.3g} s) is not longer than the longest validation horizon {longest:g} s; shorten "
                "validation.horizons_s or drop this log."
            )


def check_band(band_hz: float, sample_step: float) -> None:
    if band_hz >= 0.45 / sample_step:
        raise config_error(
            f"validation.band_hz = {band_hz:g} Hz is not below 0.45/Δ = {0.45 / sample_step:.4g} Hz of the "
            f"{sample_step:g} s grid; choose a lower evaluation band."
        )


def check_training_error(validation, logs, longest_s: float, estimator: str = "idim_ls") -> dict[str, float]:
    """Refuse an implausible training error (module docstring); return the two numbers compared."""
    col = f"angle_rmse_{longest_s:g}s"
    rows = validation[(validation["role"] == "train") & (validation["model"] == estimator)]
    error = float(np.mean(rows[col])) if len(rows) else math.nan
    spread = float(np.mean([np.std(np.asarray(d.q_raw)[d.usable], axis=0) for d in logs.values()]))
    if not (np.isfinite(error) and error <= spread):
        raise config_error(
            f"{estimator}'s free simulations miss the training angles by {error:.3g} rad (RMSE over {longest_s:g} s), "
            f"more than the angles' own spread {spread:.3g} rad: the fit does not reproduce the runs it was fitted "
            "on. Set filter.excitation_hz (the frequency the arm is driven at) or filter.cutoff_hz, and check "
            "log.angles / log.torques and their units (log.angle_unit)."
        )
    return {"train_angle_rmse": error, "train_angle_spread": spread}


def _warning(kind: str, model: str, message: str) -> dict[str, str]:
    return {"kind": kind, "model": model, "message": message}


def log_warnings(logs, drive_rows, train: list[str], f_exc: float) -> list[dict[str, str]]:
    """``degrees``, ``unexcited_joint`` and ``short_training`` (module docstring)."""
    out = []
    for name, log in logs.items():
        span = np.ptp(np.asarray(log.q), axis=0)
        for j, s in enumerate(span):
            if s > DEGREES_SPAN:
                out.append(
                    _warning(
                        "degrees",
                        "",
                        f"{name}: joint {j + 1}'s angle spans {s:.4g} rad (> 4π): are the angles in degrees? "
                        'jaxid expects radians; set log.angle_unit = "deg" to convert.',
                    )
                )
    joints = sorted({r["joint"] for r in drive_rows})
    for j in joints:
        spans = [r["angle_span_rad"] for r in drive_rows if r["joint"] == j]
        if max(spans) < MOVES_RAD:
            out.append(
                _warning(
                    "unexcited_joint",
                    "",
                    f"joint {j} moves at most {max(spans):.3g} rad peak-to-peak in the training runs (< {MOVES_RAD} "
                    "rad): the parameters it carries are not identified; train on runs that move it.",
                )
            )
    seconds = sum(logs[n].duration for n in train)
    if seconds * f_exc < MIN_PERIODS:
        out.append(
            _warning(
                "short_training",
                "",
                f"the training runs hold {seconds * f_exc:.3g} periods of the {f_exc:.3g} Hz excitation (< "
                f"{MIN_PERIODS}): too short to excite the arm; use longer training runs.",
            )
        )
    return out


def estimate_warnings(model, name: str, est, consistency_rows) -> list[dict[str, str]]:
    """``not_converged``, ``inconsistent``, ``std_exceeds_value`` and ``far_from_reference`` for one estimate."""
    out = []
    if est.status != "ok":
        out.append(
            _warning(
                "not_converged",
                name,
                f"{name}: the solver stopped with status {est.status!r} (raise its max_iterations in "
                f"[estimators.{name}]); the estimate is its last iterate.",
            )
        )
    failed = [r["check"] for r in consistency_rows if not r["ok"]]
    if failed:
        out.append(_warning("inconsistent", name, f"{name}: physically inconsistent: fails {'; '.join(failed)}."))
    value, std = np.asarray(est.value), np.asarray(est.std)
    for i in model.free:
        label = model.labels[i]
        if std[i] > abs(value[i]):
            out.append(
                _warning(
                    "std_exceeds_value",
                    name,
                    f"{name}: {label} = {value[i]:.4g} ± {std[i]:.2g}: the std exceeds the value (not identified).",
                )
            )
        if model.reference is not None and model.reference[i] != 0:
            ref = model.reference[i]
            ratio = value[i] / ref
            if ratio <= 0 or ratio >= FAR_FACTOR or ratio <= 1 / FAR_FACTOR:
                out.append(
                    _warning(
                        "far_from_reference",
                        name,
                        f"{name}: {label} = {value[i]:.4g} is {'of opposite sign to' if ratio <= 0 else f'{ratio:.3g} ×'}"
                        f" the reference's {ref:.4g}.",
                    )
                )
    return out


def validation_warnings(summary) -> list[dict[str, str]]:
    """``worse_than_reference``: held-out torque RMSE above ``WORSE_FACTOR`` × the reference's."""
    if "reference" not in set(summary["model"]):
        return []
    ref = summary[summary["model"] == "reference"].set_index("joint")["torque_rmse"]
    out = []
    for name, rows in summary[summary["model"] != "reference"].groupby("model", sort=False):
        for joint, value in rows.set_index("joint")["torque_rmse"].items():
            if value > WORSE_FACTOR * ref[joint]:
                out.append(
                    _warning(
                        "worse_than_reference",
                        name,
                        f"{name}: joint {joint}'s {summary['role'].iloc[0]} torque RMSE {value:.3g} N m is "
                        f"{value / ref[joint]:.2g} × the reference's {ref[joint]:.3g} N m.",
                    )
                )
    return out
