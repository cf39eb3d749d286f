"""What a fit must refuse, and what it must warn about (the rules, each with its threshold).

**Refused before anything is written** (``ConfigError``, one line, says what to set):

- a log whose usable part (its length minus ``filter.trim_s`` at each end) is not longer than the
  longest ``validation.horizons_s``;
- ``validation.band_hz`` at or above 0.45 / Δ (the evaluation band must sit below Nyquist);
- an implausible training error (``check_training_error``): the default estimate predicts the
  *training* runs' torque (evaluation band, pooled over runs and joints) no better than the torque's
  own spread (its standard deviation about each run's mean) — what predicting a constant would
  score. Then the fitted model does not reproduce even the runs it was fitted on: the columns, the
  torque gains or signs, the angle units or the cut-off are wrong. (Inverse dynamics only: the
  check holds for an arm that falls over in open loop, unlike a free simulation.)

**Warnings** (``fit_warnings``; on stderr, in ``warnings.csv``, in the manifest and in the summary):

- ``degrees``: an angle spans more than ``DEGREES_SPAN`` = 4π rad (two turns) peak-to-peak in a
  log — the angles are probably in degrees (``log.angle_unit = "deg"`` converts them);
- ``unexcited_joint``: a joint spans less than ``MOVES_RAD`` (0.05 rad) in every training run — it
  only dithers, so the parameters it carries are not identified;
- ``short_training``: the training runs hold fewer than ``MIN_PERIODS`` = 5 periods of the
  excitation in all;
- ``inconsistent``: an estimate fails a physical-consistency check (``consistency_checks``);
- ``std_exceeds_value``: an estimated parameter's standard deviation exceeds its magnitude;
- ``noise_upper_bound``: output error's std carries the torque reading's noise ``σ_τ`` estimated from the logs
  (no ``torque_std`` given): in closed loop that estimate also holds the controller's reaction to the angle
  noise, so it is an upper bound and the std conservative (16× on the benchmark's ``encoder_limited``);
- ``not_converged``: an iterative fit stopped at its iteration limit (the estimate is its last iterate; for output
  error whose angle residuals' RMS exceeds ``MISFIT_FACTOR`` = 2 angle-noise stds, it adds that the misfit is the
  torque reading's noise through the simulation, model error or a fit still far from its optimum);
  ``weak_instruments``: IDIM-IV's simulated regressor barely correlates with the measured one in some
  direction (``jaxid.estimate.logs.iv.WEAK_CORRELATION``): its estimate is unreliable there;
- ``far_from_reference``: an estimated parameter differs from the reference's by a factor of
  ``FAR_FACTOR`` = 10 or more, or has the opposite sign (where the reference value is non-zero);
- ``worse_than_reference``: an estimate's held-out torque RMSE (evaluation band) is more than
  ``WORSE_FACTOR`` = 1.5 times the reference's on some joint;
- ``worse_than_nominal`` (``nominal_warnings``): an estimate predicts the training torque, the
  training runs left out in turn (``jaxid.fit.selection``) or the held-out torque worse, pooled over
  joints, than the arm description's own (nominal) parameters — the fit made the model worse;
- ``estimator_failed`` / ``diagnostic_failed``: an estimator, a table or a figure failed; it is left
  out and every other result is written.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..config.fit_checks import config_error
from ..estimate.logs.shooting import MISFIT_NOTE
from ..estimate.logs.shooting_inputs import INPUT_NOISE_NOTE
from .cutoff import MOVES_RAD

__all__ = [
    "DEGREES_SPAN",
    "MIN_PERIODS",
    "FAR_FACTOR",
    "WORSE_FACTOR",
    "check_horizons",
    "check_band",
    "check_training_error",
    "nominal_warnings",
    "log_warnings",
    "estimate_warnings",
    "validation_warnings",
]

DEGREES_SPAN = 4 * math.pi
MIN_PERIODS = 5
FAR_FACTOR = 10.0
WORSE_FACTOR = 1.5
#: A stopped multiple-shooting fit whose angle residuals' RMS exceeds this many angle-noise stds: its misfit is not the
#: encoder's noise (``not_converged`` says so).
MISFIT_FACTOR = 2.0


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


def check_training_error(validation, logs, estimator: str = "idim_ls") -> dict[str, float]:
    """Refuse an implausible training error (module docstring); return the two numbers compared.

    ``estimator``'s torque RMSE on the training runs (evaluation band, pooled over runs and joints)
    against the torque's own spread (its standard deviation about each run's mean, pooled alike):
    what predicting a constant torque would score."""
    rows = validation[(validation["role"] == "train") & (validation["model"] == estimator)]
    error = float(np.sqrt(np.mean(np.asarray(rows["torque_rmse"]) ** 2))) if len(rows) else math.nan
    spread = float(np.sqrt(np.mean([np.mean(np.var(d.band(d.tau)[d.usable], axis=0)) for d in logs.values()])))
    if not (np.isfinite(error) and error < spread):
        raise config_error(
            f"{estimator} predicts the training torque with an RMSE of {error:.3g} N m, no better than the torque's "
            f"own spread {spread:.3g} N m: the fit does not reproduce the runs it was fitted on. Check log.angles / "
            "log.torques (columns, log.torque_gain and its signs, log.angle_unit) and set filter.cutoff_hz."
        )
    return {"train_torque_rmse": error, "train_torque_spread": spread}


def _pooled(validation, role: str, model: str) -> float:
    rows = validation[(validation["role"] == role) & (validation["model"] == model)]
    return float(np.sqrt(np.mean(np.asarray(rows["torque_rmse"]) ** 2))) if len(rows) else math.nan


def nominal_warnings(validation, default_table, estimates: list[str]) -> list[dict[str, str]]:
    """``worse_than_nominal``: an identified model predicts the torque of the training runs, of the training
    runs left out in turn (``default_table``) or of the held-out runs worse (pooled RMSE, evaluation band)
    than the arm description's own parameters (the ``nominal`` rows; the ``reference`` when they coincide)."""
    models = set(validation["model"])
    nominal = "nominal" if "nominal" in models else "reference" if "reference" in models else None
    if nominal is None:
        return []
    out = []
    for name in estimates:
        for role, what in (("train", "training"), ("test", "held-out")):
            mine, theirs = _pooled(validation, role, name), _pooled(validation, role, nominal)
            if np.isfinite(theirs) and not mine <= theirs:
                out.append(
                    _warning(
                        "worse_than_nominal",
                        name,
                        f"{name}: predicts the {what} torque worse than the arm description's own parameters "
                        f"({mine:.3g} vs {theirs:.3g} N m pooled): the training runs may not excite the arm enough; "
                        "keep the nominal model or train on richer runs.",
                    )
                )
    for row in default_table:
        mine, theirs = row["cv_torque_rmse"], row["nominal_cv_torque_rmse"]
        if np.isfinite(theirs) and not mine <= theirs:
            out.append(
                _warning(
                    "worse_than_nominal",
                    row["estimator"],
                    f"{row['estimator']}: fitted on half of the training data, predicts the other half worse than the arm "
                    f"description's own parameters ({mine:.3g} vs {theirs:.3g} N m pooled).",
                )
            )
    return out


def _misfit(notes: str) -> str:
    """What ``not_converged`` adds for a multiple-shooting fit whose notes give its angle residuals' RMS in units
    of the angle noise (``MISFIT_NOTE``): above ``MISFIT_FACTOR``, that the misfit is not the encoder's noise."""
    found = re.search(re.escape(MISFIT_NOTE) + r" ([0-9.eE+-]+)", notes)
    if found is None or float(found.group(1)) <= MISFIT_FACTOR:
        return ""
    return (
        f" Its simulated angles miss the measured ones by {found.group(1)} × their noise (RMS): the torque reading's "
        "noise driven through the simulation, model error, or a fit still far from its optimum; where more passes "
        'do not lower it they will not help (docs/performance.md, "Why output error stops on poorly exciting '
        "logs\"): compare its held-out torque with IDIM-LS's."
    )


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


def estimate_warnings(model, name: str, est, consistency_rows, options=None) -> list[dict[str, str]]:
    """``not_converged`` (or ``weak_instruments``), ``noise_upper_bound``, ``inconsistent``, ``std_exceeds_value``
    and ``far_from_reference`` for one estimate made with the estimator options ``options``."""
    out = []
    if INPUT_NOISE_NOTE in est.notes and (options or {}).get("torque_std") is None:
        out.append(
            _warning(
                "noise_upper_bound",
                name,
                f"{name}: its std carries the torque noise σ_τ estimated from the logs (the torque above the "
                "cut-off), which in closed loop also holds the controller's reaction to the angle noise: an upper "
                f"bound, so the std is conservative; give [estimators.{name}] torque_std from the sensor's data sheet.",
            )
        )
    if est.status == "weak_instruments":
        why = next((part for part in est.notes.split("; ") if part.startswith("weak instruments")), est.status)
        out.append(_warning("weak_instruments", name, f"{name}: {why}."))
    elif est.status != "ok":
        out.append(
            _warning(
                "not_converged",
                name,
                f"{name}: the solver stopped with status {est.status!r} (raise its max_iterations in "
                f"[estimators.{name}]); the estimate is its last iterate.{_misfit(est.notes)}",
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


def validation_warnings(summary, estimates: list[str] | None = None) -> list[dict[str, str]]:
    """``worse_than_reference``: held-out torque RMSE above ``WORSE_FACTOR`` × the reference's."""
    if "reference" not in set(summary["model"]):
        return []
    ref = summary[summary["model"] == "reference"].set_index("joint")["torque_rmse"]
    out = []
    rows_of = (
        summary[summary["model"].isin(estimates)] if estimates is not None else summary[summary["model"] != "reference"]
    )
    for name, rows in rows_of.groupby("model", sort=False):
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
