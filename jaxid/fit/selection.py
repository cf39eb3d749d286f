"""Choices a fit makes on its training runs alone: the filter cut-off and the default estimate; and the
jackknife standard deviation of IDIM-LS over the training runs (``jackknife_std``).

Both are chosen by **torque prediction on training data left out in turn** (two-fold cross-validation), in
the fixed evaluation band (``validation.band_hz``), so that the score does not move with the filter
it judges and no held-out run enters:

- **Folds.** Every training run is cut into its two halves (each filtered on its own); one fold
  is the first halves of all runs, the other the second halves. Each fold then holds a part of every
  run: training runs that excite different joints (one joint at a time, as the double pendulum's do)
  all stay in every fit, which leaving whole runs out would break, and a single run still gives two
  folds. The halves are contiguous in time, so the left-out samples are not interleaved with the
  fitted ones (the filtered noise is correlated over a few samples).
- **Score.** For each fold the estimator is fitted on the other folds and predicts the left-out
  fold's torque by inverse dynamics in the evaluation band (``torque_rmse``: the model's torque and
  the measured torque both low-passed at ``band_hz``, usable samples); the score is the RMSE pooled
  over the folds' samples and all joints [N m]. The arm description's own (nominal) parameters are
  scored on the same folds, so a fit can be compared with what it started from.

**The cut-off** (``filter.cutoff_hz = "auto"``, ``choose_cutoff`` in ``jaxid.fit.cutoff``): IDIM-LS
at every candidate cut-off, the candidate with the lowest score wins. Unlike a free simulation of
the arm, the score holds for an arm that falls over in open loop (an N-joint arm under gravity,
logged in closed loop): it only needs inverse dynamics.

**The default estimate** (``validation.headline = "auto"``): among the estimators that ran with
status ``ok`` and whose refit per fold is cheap (``DEFAULT_CANDIDATES``: the least-squares family;
the simulation-based IDIM-IV, output error and Kalman filters would multiply the fit's cost by
the number of folds, and are compared in the held-out tables instead), the one with the lowest score.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_RULE",
    "training_folds",
    "fold_score",
    "cross_validate",
    "choose_default_estimate",
    "jackknife_std",
]

#: The estimators eligible as the default estimate (module docstring), in order of preference on ties.
DEFAULT_CANDIDATES = ("idim_ls_consistent", "idim_ls", "idim_ls_bounded", "rls")


def training_folds(logs: dict[str, Any]) -> list[list[tuple[str, Any]]]:
    """The two folds of the training runs ``{name: MeasuredLog}`` (module docstring): the first halves of
    every run, and the second halves; each a list of ``(label, MeasuredLog)``."""
    folds: list[list[tuple[str, Any]]] = [[], []]
    for name, log in logs.items():
        t = np.asarray(log.t)
        mid = float(t[len(t) // 2])
        folds[0].append((f"{name}[first half]", log.window(float(t[0]), mid)))
        folds[1].append((f"{name}[second half]", log.window(mid, float(t[-1]))))
    return folds


def fold_score(model, theta, evaluation_logs) -> tuple[float, int]:
    """``(sum of squared torque errors, count)`` of base parameters ``theta`` on evaluation-band logs,
    pooled over their usable samples and joints."""
    from ..estimate.logs.validation import torque_rmse

    total, count = 0.0, 0
    for d in evaluation_logs:
        rmse = np.asarray(torque_rmse(d, model.regressor, theta))
        samples = d.usable.stop - d.usable.start
        if not np.all(np.isfinite(rmse)):
            return math.inf, 1
        total += float(np.sum(rmse**2)) * samples
        count += samples * rmse.size
    return total, count


def cross_validate(fitted, evaluated, fit, model, nominal=None) -> dict[str, float]:
    """Leave-one-fold-out torque RMSE [N m] of ``fit``, and of the fixed ``nominal`` parameters.

    Args:
        fitted: per fold, its ``FilteredLog`` s at the fit's cut-off.
        evaluated: per fold, the same logs filtered at the evaluation band.
        fit: ``(list of FilteredLog) -> base parameters`` (full vector); a fold whose fit raises
            ``ValueError`` (e.g. rank deficiency) or is not finite is left out of the score.
        model: the fit's ``FitModel``.
        nominal: optional base parameters scored on the same left-out folds.

    Returns ``{"score": RMSE, "nominal": RMSE or NaN, "folds": folds used}``; ``score`` is ``inf`` when
    no fold could be fitted.
    """
    total = count = nominal_total = nominal_count = 0.0
    used = 0
    for k in range(len(fitted)):
        train = [d for i, fold in enumerate(fitted) if i != k for d in fold]
        try:
            theta = np.asarray(fit(train), dtype=float)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError):
            continue
        if not np.all(np.isfinite(theta)):
            continue
        used += 1
        s, c = fold_score(model, theta, evaluated[k])
        total, count = total + s, count + c
        if nominal is not None:
            s, c = fold_score(model, nominal, evaluated[k])
            nominal_total, nominal_count = nominal_total + s, nominal_count + c
    score = math.sqrt(total / count) if count else math.inf
    nominal_score = math.sqrt(nominal_total / nominal_count) if nominal_count else math.nan
    return {"score": score, "nominal": nominal_score, "folds": used}


#: How ``validation.headline = "auto"`` picks the default estimate (``jaxid.fit.selection``).
DEFAULT_RULE = (
    "the lowest left-out torque RMSE (first vs second halves of every training run) (evaluation band, pooled over joints) among "
    f"the estimators of {list(DEFAULT_CANDIDATES)} that ran with status ok"
)


def choose_default_estimate(config, fitted, evaluated, model, estimates):
    """``(name, table)``: the default estimate by ``DEFAULT_RULE`` (or the config's ``validation.headline``),
    and per candidate its leave-one-fold-out torque RMSE beside the nominal parameters' on the same folds.
    ``fitted``, ``evaluated``: the ``training_folds``' logs filtered at the fit's cut-off and at the
    evaluation band (lists of ``FilteredLog`` per fold)."""
    from ..estimate import IdimLS, make_estimator
    from .model import regression_model

    val = config.section("validation")
    regression = regression_model(model)
    start = IdimLS(**config.estimator_options("idim_ls"))
    wanted = [n for n in DEFAULT_CANDIDATES if n in estimates and estimates[n].status == "ok"]
    if val["headline"] != "auto":
        wanted = [val["headline"]] if val["headline"] in wanted else []
    table = []
    for name in wanted:
        estimator = make_estimator(name, config.estimator_options(name))

        def fit(logs, estimator=estimator):
            ls = start(logs, regression)
            return np.asarray(model.embed(estimator(logs, regression, start=ls)).value)

        cv = cross_validate(fitted, evaluated, fit, model, nominal=np.asarray(model.fixed_values, dtype=float))
        table.append(
            {
                "estimator": name,
                "cv_torque_rmse": cv["score"],
                "nominal_cv_torque_rmse": cv["nominal"],
                "folds": cv["folds"],
            }
        )
    if val["headline"] != "auto":
        headline = val["headline"] if val["headline"] in estimates else "idim_ls"
    elif table and np.isfinite(min(r["cv_torque_rmse"] for r in table)):
        headline = min(table, key=lambda r: r["cv_torque_rmse"])["estimator"]
    else:
        headline = "idim_ls"
    for r in table:
        r["chosen"] = r["estimator"] == headline
    return headline, table


def jackknife_std(config, train, model):
    """Leave-one-training-run-out (jackknife) standard deviation of IDIM-LS, or ``None`` for one run.

    ``sqrt((n − 1)/n · Σ (θ_(i) − θ̄)²)`` over the ``n`` fits that each leave one training run out:
    unlike the formal standard deviation it contains the run-to-run variation the model cannot
    explain (still no filter bias that all runs share).
    """
    if len(train) < 2:
        return None
    from ..estimate import make_estimator
    from ..estimate.logs.idim import idim_ls_left_out
    from .model import regression_model

    estimator = make_estimator("idim_ls", config.estimator_options("idim_ls"))
    regression = regression_model(model)
    if estimator.constraint != "none":
        return None  # the jackknife is of the plain least squares (a bounded fit's has no such formula)
    thetas = idim_ls_left_out(
        list(train.values()),
        regression.regressor,
        regression.names,
        decimate=estimator.decimate,
        weighted=estimator.weighting == "joint",
        known=regression.known,
    )
    if any(theta is None for theta in thetas):
        return None  # a single run may be the only one that excites a parameter
    fits = np.tile(np.asarray(model.fixed_values, dtype=float), (len(thetas), 1))
    fits[:, list(model.free)] = np.stack(thetas)
    n = len(fits)
    return np.sqrt((n - 1) / n * np.sum((fits - fits.mean(0)) ** 2, axis=0))
