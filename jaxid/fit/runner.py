"""The ``jaxid fit`` runner: estimators, jackknife, tables, figures and the manifest."""

from __future__ import annotations

import functools
import json
import platform
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .._platform import git_revision, release_if_crowded
from ..config.fit import FitConfig
from ..estimate import estimator_class, make_estimator
from ..estimate.abstract import simulation_start
from ..estimate.kalman.logs import KINDS
from ..estimate.logs.reweighted import consistent_start
from .checks import (
    check_band,
    check_horizons,
    check_training_error,
    estimate_warnings,
    log_warnings,
    nominal_warnings,
    validation_warnings,
)
from .cutoff import CUTOFF_RULE, choose_cutoff, filter_all, load_logs
from .export import clear_previous_fit, export_note, export_parameters
from .model import build_model, consistency_checks, regression_model
from .selection import DEFAULT_RULE, choose_default_estimate, jackknife_std, training_folds
from .tables import (
    consistency_table,
    frequency_view,
    parameters_table,
    simulation_substeps,
    validation_summary,
    validation_table,
)

__all__ = ["FitExists", "FitWarning", "run_fit"]


class FitExists(FileExistsError):
    """The results directory exists; pass ``overwrite=True`` (``--overwrite``) to replace it."""


class FitWarning(UserWarning):
    """A fit finished but a result is not to be trusted (``jaxid.fit.checks``); also in warnings.csv."""


def _estimate(name, config, train, model, ls):
    """The estimator ``name`` of ``jaxid.estimate`` with the config's options, on the training logs."""
    estimator = make_estimator(name, config.estimator_options(name))
    return estimator(list(train.values()), regression_model(model), start=ls)


#: The least-squares family: it runs first, and the other estimators start from it (``_start``).
_LEAST_SQUARES = ("idim_ls", "idim_ls_bounded", "idim_ls_consistent", "rls")


def _run_order(names: list[str]) -> list[str]:
    """The least-squares family first (in the config's order), then the rest."""
    return [n for n in names if n in _LEAST_SQUARES] + [n for n in names if n not in _LEAST_SQUARES]


def _start(name: str, ls, estimates, own):
    """What ``name`` starts from: IDIM-LS, or for the estimators that simulate (``simulates``: IDIM-IV, the
    Kalman filters, output error) the physically consistent least squares where it converged: the config's
    (``consistent_start``), or where the config does not run it the rule's own (``own()``: ``simulation_start``)."""
    if not estimator_class(name).simulates or ls is None:
        return ls
    consistent = estimates.get("idim_ls_consistent")
    if consistent is None:
        return own()
    if consistent.status != "ok":
        return ls
    return consistent_start(ls, np.asarray(consistent.value)[[consistent.names.index(n) for n in ls.names]])


class _StageClock:
    """Wall seconds per stage of a fit: ``clock(name)`` charges the time since the previous call to ``name``."""

    def __init__(self, stages: dict[str, float]):
        self.stages, self.last = stages, time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.stages[name] = self.stages.get(name, 0.0) + now - self.last
        self.last = now

    def done(self) -> dict[str, float]:
        self("summary_and_manifest")
        return self.stages


def _reason(err: BaseException) -> str:
    """One line from an exception: its message, or its type when it has none (no traceback)."""
    text = " ".join(str(err).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(err).__name__}: {text}" if not isinstance(err, ValueError) or not text else text


def run_fit(
    config: FitConfig,
    out: str | Path | None = None,
    *,
    overwrite: bool = False,
    figures: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run a fit config end to end; write tables, figures and a manifest (``jaxid.fit`` docstring).

    ``progress``: called with a line as each stage ends (the logs read, the cut-off, each estimator as it starts and
    ends with its status and seconds, the default estimate, the validation, the files written): ``jaxid fit``
    prints them to stderr unless ``--quiet``.

    Raises ``FitExists`` if ``out`` holds a previous fit and ``overwrite`` is false,
    ``ConfigError`` for a missing log, ``ValueError`` from IDIM-LS (rank deficiency). Any other
    estimator that fails is left out with a warning and listed in the manifest's
    ``failed_estimators``.
    """
    import jax
    import pandas as pd

    from ..types import require_float64

    require_float64("jaxid fit")
    out = Path(out) if out is not None else Path("results") / config.name
    if (out / "manifest.json").exists() and not overwrite:
        raise FitExists(f"{out} already holds a fit; pass --overwrite to replace it.")
    started = time.time()

    def say(line: str) -> None:
        if progress is not None:
            progress(f"[{time.time() - started:6.1f} s] {line}")

    stages: dict[str, float] = {}  # wall seconds per stage of the fit (manifest "stage_seconds")
    clock = _StageClock(stages)
    model = build_model(config)
    logs = load_logs(config, config.train + config.test)  # one grid for all (load_logs)
    flt = config.section("filter")
    val = config.section("validation")
    horizons = [float(h) for h in val["horizons_s"]]
    sample_step = next(iter(logs.values())).sample_step
    check_horizons(logs, flt["trim_s"], horizons)
    check_band(float(val["band_hz"]), sample_step)
    train_raw = {n: logs[n] for n in config.train}
    clock("load")
    seconds_of = {n: float(log.t[-1] - log.t[0]) + sample_step for n, log in logs.items()}

    def runs(k: int) -> str:
        return f"{k} run{'' if k == 1 else 's'}"

    say(
        f"read {runs(len(logs))} at {1 / sample_step:.4g} Hz, {next(iter(logs.values())).q.shape[1]} joints: "
        f"{sum(seconds_of[n] for n in config.train):.1f} s to fit ({runs(len(config.train))}), "
        f"{sum(seconds_of[n] for n in config.test):.1f} s held out ({len(config.test)}); "
        f"{len(model.free_names)} unknowns"
    )
    cutoff, f_exc, cutoff_table, drive = choose_cutoff(config, train_raw, model)
    clock("cutoff")
    say(f"cut-off {cutoff:.4g} Hz ({'chosen from the training runs' if flt['cutoff_hz'] == 'auto' else 'given'})")
    filtered = filter_all(logs, cutoff, flt)
    # Every metric on one fixed evaluation band, the same for every fit and build (checks docstring).
    evaluation = filter_all(logs, float(val["band_hz"]), flt)
    clock("filter")
    train = {n: filtered[n] for n in config.train}

    estimates, seconds, failed = {}, {}, {}
    ls = None
    # The consistent start when the config does not run ``idim_ls_consistent``: fitted once, from IDIM-LS (``ls``
    # by then: the least-squares family runs first).
    own = functools.cache(lambda: simulation_start(list(train.values()), regression_model(model), ls))

    def fit_one(name, start):
        """``(the estimate or the error it raised, wall seconds)``, its progress said as it starts and ends."""
        say(f"{name}: fitting")
        t0 = time.time()
        try:
            est = _estimate(name, config, train, model, start)
        except Exception as err:  # noqa: BLE001 - one estimator failing must not lose the others
            if name == "idim_ls":
                raise  # every other estimator starts from it; its errors name what to change (rank)
            say(f"{name}: failed ({_reason(err)})")
            return err, 0.0
        wall = time.time() - t0
        say(f"{name}: {est.status} in {wall:.3g} s")
        return est, wall

    def record(name, est, wall):
        if isinstance(est, Exception):
            failed[name] = _reason(est)
            return
        seconds[name], embedded = wall, model.embed(est)
        if not np.all(np.isfinite(np.asarray(embedded.value))):
            failed[name] = f"its estimate is not finite (status {est.status})"
            say(f"{name}: left out: {failed[name]}")
            return
        estimates[name] = embedded

    order = _run_order(config.estimators)
    for name in [n for n in order if n in _LEAST_SQUARES]:  # in turn: IDIM-LS first, the others start from it
        release_if_crowded()  # every estimator's compiled programs within the memory-map limit
        est, wall = fit_one(name, ls)
        ls = est if name == "idim_ls" else ls
        record(name, est, wall)
    release_if_crowded()
    starts = {}  # outside the timing: a start made here is not the estimator's
    for name in [n for n in order if n not in _LEAST_SQUARES]:
        try:
            starts[name] = _start(name, ls, estimates, own)
        except Exception as err:  # noqa: BLE001 - its start failing loses this estimator only
            failed[name] = _reason(err)
            say(f"{name}: failed: no start ({failed[name]})")
    # The others depend on the least squares alone. A Kalman filter's scan holds one core, so the filters run in the
    # background, one thread each, while the rest run in turn (each spreads its own work over the cores); every one
    # on its own inputs, so with the numbers it has alone, its seconds its wall time while they share the cores.
    done = {}
    with ThreadPoolExecutor(max(1, sum(n in KINDS for n in starts))) as pool:
        background = {n: pool.submit(fit_one, n, starts[n]) for n in starts if n in KINDS}
        for name in [n for n in starts if n not in KINDS]:
            done[name] = fit_one(name, starts[name])
        done.update({n: future.result() for n, future in background.items()})
    for name in starts:
        record(name, *done[name])
    clock("estimators")
    notes = [
        {"kind": "estimator_failed", "model": n, "message": f"estimator {n} failed and is left out: {why}"}
        for n, why in failed.items()
    ]

    diagnostics = {}  # name -> why it failed; every other result is still written

    def attempt(what, compute, default=None):
        try:
            return compute()
        except Exception as err:  # noqa: BLE001 - a diagnostic failing is a warning, never the end of the fit
            diagnostics[what] = _reason(err)
            return default

    fallback = val["headline"] if val["headline"] in estimates else "idim_ls"

    def default_estimate():
        folds = training_folds(train_raw)
        fitted = [list(filter_all(dict(fold), cutoff, flt).values()) for fold in folds]
        evaluated = [list(filter_all(dict(fold), float(val["band_hz"]), flt).values()) for fold in folds]
        return choose_default_estimate(config, fitted, evaluated, model, estimates)

    say("choosing the default estimate (held-out folds of the training runs)")
    headline, default_table = attempt("default_estimate", default_estimate, (fallback, []))
    clock("default_estimate")
    say(f"default estimate: {headline}")
    jackknife = attempt("jackknife", lambda: jackknife_std(config, train, model))
    clock("jackknife")
    params = parameters_table(estimates, model, jackknife)
    thetas = {k: np.asarray(v.value) for k, v in estimates.items()}
    nominal = np.asarray(model.fixed_values, dtype=float)
    if model.reference is None or not np.allclose(nominal, model.reference, rtol=1e-12, atol=0.0):
        thetas["nominal"] = nominal  # the [arm] description's own parameters, what every fit started from
    if model.reference is not None:
        thetas["reference"] = model.reference
    thetas.update(model.compare)
    substeps = simulation_substeps(model, thetas, {n: evaluation[n] for n in config.train})
    validation = validation_table(config, evaluation, model, thetas, horizons, fitted=filtered, substeps=substeps)
    clock("validation")
    say(f"validated {len(thetas)} models on {len(evaluation)} runs")
    plausibility = check_training_error(validation, {n: evaluation[n] for n in config.train}, headline)
    consistency = attempt("consistency", lambda: consistency_table(model, thetas), pd.DataFrame())
    lines = attempt("frequency_view", lambda: frequency_view(config, evaluation, model, thetas, f_exc), pd.DataFrame())
    summary = validation_summary(validation, horizons)
    clock("consistency_and_lines")

    notes += log_warnings(logs, [r for r in drive if r["run"] in config.train], config.train, f_exc)
    for name, est in estimates.items():
        rows = attempt(f"consistency_{name}", lambda est=est, name=name: consistency_checks(model, thetas[name]), [])
        notes += estimate_warnings(model, name, est, rows, config.estimator_options(name))
    notes += validation_warnings(summary, list(estimates))
    notes += nominal_warnings(validation, default_table, list(estimates))

    out.mkdir(parents=True, exist_ok=True)
    clear_previous_fit(out)  # an overwritten fit's stale files (e.g. an estimator no longer exported) go
    params.to_csv(out / "parameters.csv", index=False, float_format="%.6g")
    validation.to_csv(out / "validation.csv", index=False, float_format="%.6g")
    consistency.to_csv(out / "consistency.csv", index=False, float_format="%.6g")
    lines.to_csv(out / "lines.csv", index=False, float_format="%.6g")
    pd.DataFrame(drive).to_csv(out / "excitation.csv", index=False, float_format="%.6g")
    if cutoff_table:
        pd.DataFrame(cutoff_table).to_csv(out / "cutoff.csv", index=False, float_format="%.6g")
    if default_table:
        pd.DataFrame(default_table).to_csv(out / "default_estimator.csv", index=False, float_format="%.6g")
    exported, not_exported = attempt(
        "export",
        lambda: export_parameters(out, config.name, estimates, model, config=config, notes=notes),
        ([], {}),
    )
    for name, why in not_exported.items():
        notes.append({"kind": "not_exported", "model": name, "message": f"{name}: no parameter file written: {why}"})
    clock("warnings_tables_export")
    figure_paths, figure_failures = [], {}
    say("tables and parameter files written" + ("; drawing the figures" if figures else ""))
    if figures:
        from .figures import make_fit_figures

        figure_paths = attempt(
            "figures",
            lambda: make_fit_figures(
                out, evaluation, model, thetas, config, headline, horizons, failures=figure_failures, substeps=substeps
            ),
            [],
        )
        clock("figures")
    for what, why in {**diagnostics, **{f"figure {k}": v for k, v in figure_failures.items()}}.items():
        notes.append({"kind": "diagnostic_failed", "model": "", "message": f"{what} not written: {why}"})
    summary["warnings"] = ["; ".join(sorted({w["kind"] for w in notes if w["model"] == m})) for m in summary["model"]]
    summary.to_csv(out / "summary.csv", index=False, float_format="%.4g")
    pd.DataFrame(notes, columns=["kind", "model", "message"]).to_csv(out / "warnings.csv", index=False)
    for w in notes:
        warnings.warn(f"jaxid fit: {w['message']}", FitWarning, stacklevel=2)
    import equinox
    import scipy

    manifest = {
        "fit": config.name,
        "config_file": None if config.path is None else str(config.path),
        "data": str(config.data),
        "config": config.raw,
        "split_rule": config.section("split")["rule"],
        "train": config.train,
        "test": config.test,
        "excitation_hz": f_exc,
        "driven": drive,
        "cutoff_hz": cutoff,
        "evaluation_band_hz": float(val["band_hz"]),
        "training_plausibility": plausibility,
        "sample_step": sample_step,
        "default_estimator": headline,
        "default_rule": DEFAULT_RULE if val["headline"] == "auto" else "validation.headline (given in the config)",
        "default_scores": default_table,
        "cutoff_rule": CUTOFF_RULE if flt["cutoff_hz"] == "auto" else "filter.cutoff_hz (given in the config)",
        "estimators": {
            k: {
                "seconds": round(seconds[k], 3),
                "rank": v.rank,
                "condition": v.condition,
                "residual_std": np.asarray(v.residual_std).tolist(),
                "samples": v.samples,
                "iterations": v.iterations,
                "status": v.status,
                "notes": v.notes,
            }
            for k, v in estimates.items()
        },
        "failed_estimators": failed,
        "failed_diagnostics": {**diagnostics, **figure_failures},
        "warnings": notes,
        "exported": [str(p.relative_to(out)) for p in exported],
        "base_parameters": list(model.labels),
        "unknowns": list(model.free_names),
        "fixed": {n: float(model.fixed_values[i]) for i, n in enumerate(model.names) if i not in model.free},
        "figures": [str(p.relative_to(out)) for p in figure_paths],
        "seconds": round(time.time() - started, 2),
        "stage_seconds": {k: round(v, 2) for k, v in clock.done().items()},
        "versions": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "equinox": equinox.__version__,
            "pandas": pd.__version__,
        },
        "device": str(jax.devices()[0]),
        "git_revision": git_revision(),
    }
    note = export_note(model)
    if note is not None:  # an arm with no parameter-file writer (a URDF arm)
        manifest["export_note"] = note
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    return out
