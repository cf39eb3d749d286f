"""Fit a real arm from its logs: the ``jaxid fit <config.toml>`` runner, its tables and figures.

A fit config (``experiments/fits/*.toml``) names the logs, the model, the train/test split, the
filter and the estimators::

    [fit]        name, description, data (directory, relative to the config file), model, reference,
                 unknowns ("base": all base parameters, or a list of base names), fixed ({name = value}
                 for the base parameters not estimated; default: the model preset's values)
    [log]        angles, torques, velocities, time, sample_step, window    (load_log options)
    [split]      rule (text), train = [...], test = [...]                  (file stems)
    [filter]     method, order, cutoff_hz ("auto" or Hz), candidates, excitation_hz, trim_s
    [estimators] use = [...], and one sub-table of options per estimator
    [validation] horizons_s, start_every_s, headline
    [frequency]  harmonics, min_share

Every key is checked (a typo gets a suggestion). ``run_fit`` writes to ``results/<name>/``:
``parameters.csv`` (base parameters per estimator with std, IDIM-LS's leave-one-run-out jackknife
std, and the reference's values),
``validation.csv`` (per run, role, model and joint: torque RMSE and free-simulation angle RMSE per
horizon), ``consistency.csv`` (physical-consistency checks), ``lines.csv`` (the frequency-domain
view), ``cutoff.csv`` (the automatic cut-off choice), figures and ``manifest.json``.

**The automatic cut-off** (``cutoff_hz = "auto"``): the excitation frequency ``f_exc`` is the
highest periodogram peak of the training runs' torques (or ``excitation_hz``); for each
multiple ``c · f_exc`` in ``candidates`` the training runs are filtered, IDIM-LS is fitted, and
the fit's free simulations are compared with the *training* runs' measured angles (longest
horizon); the candidate with the smallest mean angle RMSE wins. The angle error is measured on
raw angles, so it does not depend on the filter it judges; the held-out runs are never used.
Why not a fixed multiple: the real arm's angles carry a ~5-15 Hz component the rigid model does
not explain (structure/drive), and the LS estimate attenuates as the cut-off lets more of it into
``q''`` (errors in variables) — the rule finds the band in which the rigid model holds.
"""

from __future__ import annotations

import difflib
import json
import math
import platform
import subprocess
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FitConfig",
    "load_fit_config",
    "parse_fit_config",
    "run_fit",
    "FitExists",
    "ESTIMATOR_NAMES",
    "markdown_summary",
]

ESTIMATOR_NAMES = ("idim_ls", "idim_ls_bounded", "idim_iv", "output_error", "ekf", "ukf")

_SECTIONS: dict[str, dict[str, Any]] = {
    "fit": {
        "name": None,
        "description": "",
        "data": ".",
        "model": "double_pendulum",
        "reference": "double_pendulum",
        "unknowns": "base",
        "fixed": {},
    },
    "log": {
        "angles": ["pos_meas1", "pos_meas2"],
        "torques": ["tau_meas1", "tau_meas2"],
        "velocities": None,
        "time": "time",
        "sample_step": None,
        "window": None,
    },
    "split": {"rule": "", "train": None, "test": []},
    "filter": {
        "method": "butterworth",
        "order": None,
        "cutoff_hz": "auto",
        "candidates": [2, 3, 4, 5, 6, 8, 10],
        "excitation_hz": "auto",
        "trim_s": 0.1,
    },
    "estimators": {"use": ["idim_ls", "idim_ls_bounded", "idim_iv", "output_error", "ekf"]},
    "validation": {"horizons_s": [0.5, 1.0, 2.0], "start_every_s": 1.0, "headline": "output_error"},
    "frequency": {"harmonics": 5, "min_share": 0.5},
}

_ESTIMATOR_OPTIONS: dict[str, dict[str, Any]] = {
    "idim_ls": {"decimate": None, "weighted": True},
    "idim_ls_bounded": {"decimate": None, "weighted": True},
    "idim_iv": {"iterations": 3, "segment_s": 0.5, "decimate": None},
    "output_error": {"segment_s": 0.5, "stride": 5, "continuity_weight": 100.0, "max_iterations": 30},
    "ekf": {"measurement_std": None, "velocity_process_std": 0.01, "initial_relative_std": 0.3},
    "ukf": {"measurement_std": None, "velocity_process_std": 0.01, "initial_relative_std": 0.3},
}

_MODELS = ("double_pendulum",)


def _config_error(message: str) -> Exception:
    from .config import ConfigError

    return ConfigError(message)


def _suggest(name: str, allowed) -> str:
    close = difflib.get_close_matches(name, list(allowed), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True)
class FitConfig:
    """A validated fit configuration (see the module docstring); ``raw`` is the resolved dict."""

    name: str
    path: Path | None
    data: Path
    raw: dict[str, Any] = field(repr=False)

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
    unknown = [k for k in raw if k not in _SECTIONS]
    if unknown:
        raise _config_error(
            f"unknown section [{unknown[0]}]; allowed: {list(_SECTIONS)}.{_suggest(unknown[0], _SECTIONS)}"
        )
    resolved: dict[str, Any] = {}
    for section, defaults in _SECTIONS.items():
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise _config_error(f"[{section}] must be a table.")
        out = dict(defaults)
        for key, value in given.items():
            if section == "estimators" and key in _ESTIMATOR_OPTIONS:
                if not isinstance(value, dict):
                    raise _config_error(f"estimators.{key} must be a table of options.")
                opts = dict(_ESTIMATOR_OPTIONS[key])
                for k, v in value.items():
                    if k not in opts:
                        raise _config_error(
                            f"unknown key 'estimators.{key}.{k}'; allowed: {list(opts)}.{_suggest(k, opts)}"
                        )
                    opts[k] = v
                out[key] = opts
                continue
            if key not in defaults:
                allowed = list(defaults) + (list(_ESTIMATOR_OPTIONS) if section == "estimators" else [])
                raise _config_error(f"unknown key '{section}.{key}'; allowed: {allowed}.{_suggest(key, allowed)}")
            out[key] = value
        resolved[section] = out
    fit = resolved["fit"]
    if not fit["name"] or not isinstance(fit["name"], str):
        raise _config_error("fit.name is required (the results go to results/<name>/).")
    if fit["model"] not in _MODELS:
        raise _config_error(f"fit.model {fit['model']!r} is not known; use one of {list(_MODELS)}.")
    if fit["reference"] not in (*_MODELS, "", None, False):
        raise _config_error(f'fit.reference {fit["reference"]!r} is not known; use one of {list(_MODELS)} or "".')
    split = resolved["split"]
    if not split["train"]:
        raise _config_error("split.train must list at least one log (file stem, e.g. 'trajectory_03').")
    for key in ("train", "test"):
        if not isinstance(split[key], list) or not all(isinstance(s, str) for s in split[key]):
            raise _config_error(f"split.{key} must be a list of log names (file stems).")
    both = set(split["train"]) & set(split["test"])
    if both:
        raise _config_error(f"split: {sorted(both)} are in both train and test; a held-out run must not be fitted.")
    use = resolved["estimators"]["use"]
    if not isinstance(use, list) or not use:
        raise _config_error(f"estimators.use must be a non-empty list of {list(ESTIMATOR_NAMES)}.")
    for name in use:
        if name not in ESTIMATOR_NAMES:
            raise _config_error(
                f"unknown estimator {name!r} in estimators.use; allowed: {list(ESTIMATOR_NAMES)}.{_suggest(name, ESTIMATOR_NAMES)}"
            )
        resolved["estimators"].setdefault(name, dict(_ESTIMATOR_OPTIONS[name]))
    if "idim_ls" not in use:
        use.insert(0, "idim_ls")  # every other estimator starts from it
    flt = resolved["filter"]
    from .filters import FILTER_METHODS

    if flt["method"] not in FILTER_METHODS:
        raise _config_error(f"filter.method {flt['method']!r}: use one of {list(FILTER_METHODS)}.")
    for key in ("cutoff_hz", "excitation_hz"):
        v = flt[key]
        if v != "auto" and not (isinstance(v, int | float) and v > 0):
            raise _config_error(f'filter.{key} must be "auto" or a positive number [Hz], got {v!r}.')
    val = resolved["validation"]
    if val["headline"] not in use:
        raise _config_error(f"validation.headline {val['headline']!r} must be one of estimators.use {use}.")
    if not val["horizons_s"] or any(not (isinstance(h, int | float) and h > 0) for h in val["horizons_s"]):
        raise _config_error("validation.horizons_s must be a list of positive durations [s].")
    base_dir = path.parent if path is not None else Path.cwd()
    data_dir = Path(data) if data is not None else (base_dir / fit["data"])
    return FitConfig(fit["name"], path, data_dir, resolved)


def load_fit_config(path: str | Path, *, data: str | Path | None = None) -> FitConfig:
    """Read and validate a fit TOML file (``data`` overrides ``fit.data``)."""
    path = Path(path)
    if not path.exists():
        raise _config_error(f"fit config {str(path)!r} does not exist.")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise _config_error(f"{path}: not valid TOML: {err}") from None
    return parse_fit_config(raw, path=path, data=data)


class FitExists(FileExistsError):
    """The results directory exists; pass ``overwrite=True`` (``--overwrite``) to replace it."""


# -- the model ------------------------------------------------------------------------------------


@dataclass
class _Model:
    arm: Any
    base: Any
    names: tuple[str, ...]
    labels: tuple[str, ...]
    regressor: Any
    reference: np.ndarray | None
    free: tuple[int, ...]
    fixed_values: np.ndarray  # full-length; used at the fixed indices
    free_regressor: Any
    known: Any

    @property
    def free_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.free)

    def embed(self, est):
        """The estimate as a full base vector (fixed parameters at their values, std 0)."""
        from .identification import Identification

        p = len(self.names)
        value = np.array(self.fixed_values, dtype=float)
        value[list(self.free)] = est.value
        cov = np.zeros((p, p))
        cov[np.ix_(self.free, self.free)] = est.covariance
        return Identification(
            est.method,
            self.names,
            value,
            cov,
            est.rank,
            est.condition,
            est.residual_std,
            est.samples,
            est.iterations,
            est.notes,
        )


def _build_model(config: FitConfig) -> _Model:
    from . import model as m

    arm = getattr(m, config.section("fit")["model"])()
    base = m.base_parameters(arm)

    def regressor(q, qd, qdd):
        return m.base_regressor(arm, q, qd, qdd, base)

    ref = config.section("fit")["reference"]
    reference = None
    if ref:
        reference = np.asarray(base.values(m.standard_parameters(getattr(m, ref)())))
    names = tuple(base.names)
    fit = config.section("fit")
    unknowns = fit["unknowns"]
    if unknowns == "base":
        unknowns = list(names)
    if not isinstance(unknowns, list) or not unknowns:
        raise _config_error(f'fit.unknowns must be "base" or a non-empty list of {list(names)}.')
    for n in unknowns:
        if n not in names:
            raise _config_error(f"fit.unknowns: {n!r} is not a base parameter; use {list(names)}.{_suggest(n, names)}")
    fixed = fit["fixed"]
    if not isinstance(fixed, dict):
        raise _config_error("fit.fixed must be a table {name = value}.")
    for n, v in fixed.items():
        if n not in names or n in unknowns:
            raise _config_error(
                f"fit.fixed: {n!r} must be a base parameter not in fit.unknowns; fixable: "
                f"{[x for x in names if x not in unknowns]}.{_suggest(n, names)}"
            )
        if not isinstance(v, int | float):
            raise _config_error(f"fit.fixed.{n} must be a number, got {v!r}.")
    free = tuple(i for i, n in enumerate(names) if n in unknowns)
    held = [i for i in range(len(names)) if i not in free]
    values = np.asarray(base.values(m.standard_parameters(arm)), dtype=float).copy()
    for n, v in fixed.items():
        values[names.index(n)] = float(v)

    def free_regressor(q, qd, qdd):
        return m.base_regressor(arm, q, qd, qdd, base)[..., list(free)]

    known = None
    if held:
        theta_known = values[held]

        def known(q, qd, qdd):
            return m.base_regressor(arm, q, qd, qdd, base)[..., held] @ theta_known

    return _Model(arm, base, names, tuple(base.labels), regressor, reference, free, values, free_regressor, known)


_SIGN_CONSTRAINED = ("I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2")


def _bounds(names):
    lo = [0.0 if n in _SIGN_CONSTRAINED else -np.inf for n in names]
    return lo, [np.inf] * len(names)


def consistency_checks(model: _Model, theta: np.ndarray) -> list[dict[str, Any]]:
    """Physical-consistency checks of a base-parameter vector.

    Sign checks on the combinations that are positive for any physical arm (joint-axis inertias
    and first moments with ``r_i ≥ 0``, rotor inertia, friction), and positive definiteness of the
    mass matrix ``D(q2)`` (from the base regressor, so it holds for the combinations themselves) on
    a 5° grid of ``q2``. The masses themselves are not identifiable from motion, so no check on them.
    """
    import jax
    import jax.numpy as jnp

    rows = []
    for name, label, value in zip(model.names, model.labels, theta, strict=True):
        if name in _SIGN_CONSTRAINED:
            rows.append({"check": f"{label} >= 0", "value": float(value), "ok": bool(value >= 0)})
    q2 = jnp.linspace(0, 2 * np.pi, 72, endpoint=False)
    q = jnp.stack([jnp.zeros_like(q2), q2], -1)

    def mass(qi):
        return jax.jacfwd(lambda a: model.regressor(qi, jnp.zeros(2), a) @ jnp.asarray(theta))(jnp.zeros(2))

    eig = np.linalg.eigvalsh(np.asarray(jax.vmap(mass)(q)))
    rows.append(
        {
            "check": "mass matrix D(q2) positive definite (min eigenvalue, all q2)",
            "value": float(eig.min()),
            "ok": bool(eig.min() > 0),
        }
    )
    return rows


# -- the runner -----------------------------------------------------------------------------------


def _load_logs(config: FitConfig, names: list[str]):
    from .logs import load_log

    opts = config.section("log")
    found = {}
    for name in names:
        candidates = [config.data / f"{name}{s}" for s in (".csv.gz", ".csv", ".parquet", ".pq")]
        path = next((c for c in candidates if c.exists()), None)
        if path is None:
            raise _config_error(
                f"log {name!r} not found in {config.data} (tried .csv.gz, .csv, .parquet); "
                "check split.train/test or pass --data DIR."
            )
        window = opts["window"]
        found[name] = load_log(
            path,
            angles=opts["angles"],
            torques=opts["torques"],
            velocities=opts["velocities"],
            time=opts["time"],
            window=None if window is None else tuple(window),
            sample_step=opts["sample_step"],
        )
    return found


def _filter_all(logs, cutoff, flt):
    from .identification.data import filter_log

    return {
        n: filter_log(log, cutoff, method=flt["method"], order=flt["order"], trim_s=flt["trim_s"])
        for n, log in logs.items()
    }


def choose_cutoff(config: FitConfig, train_logs, model: _Model) -> tuple[float, float, list[dict[str, Any]]]:
    """The cut-off [Hz] by the rule of the module docstring; returns ``(cutoff, f_exc, table)``."""
    from .filters import dominant_frequency
    from .identification.idim import idim_ls
    from .identification.validation import free_simulation_rmse

    flt = config.section("filter")
    h = next(iter(train_logs.values())).sample_step
    f_exc = flt["excitation_hz"]
    if f_exc == "auto":
        f_exc = max(dominant_frequency(np.asarray(log.tau), log.sample_step) for log in train_logs.values())
    if flt["cutoff_hz"] != "auto":
        return float(flt["cutoff_hz"]), float(f_exc), []
    longest = max(config.section("validation")["horizons_s"])
    every = config.section("validation")["start_every_s"]
    table = []
    for c in flt["candidates"]:
        cutoff = round(float(c) * f_exc, 2)
        if cutoff >= 0.45 / h:
            continue
        filtered = _filter_all(train_logs, cutoff, flt)
        try:
            est = model.embed(
                idim_ls(list(filtered.values()), model.free_regressor, model.free_names, known=model.known)
            )
            errs = [
                free_simulation_rmse(d, model.regressor, est.value, (longest,), every)[float(longest)]
                for d in filtered.values()
            ]
            score = float(np.mean(errs))
        except ValueError:
            score = math.inf
        table.append({"multiple": float(c), "cutoff_hz": cutoff, "train_angle_rmse": score})
    if not table or not np.isfinite(min(r["train_angle_rmse"] for r in table)):
        raise ValueError("automatic cut-off: no candidate gave a finite training error; set filter.cutoff_hz.")
    best = min(table, key=lambda r: r["train_angle_rmse"])
    for r in table:
        r["chosen"] = r is best
    return best["cutoff_hz"], float(f_exc), table


def _estimate(name, config, train, model, ls):
    from .identification import idim_iv, idim_ls, kalman_filter_fit, output_error

    opts = config.estimator_options(name)
    data = list(train.values())
    reg, names, known = model.free_regressor, model.free_names, model.known
    if name == "idim_ls":
        return idim_ls(data, reg, names, known=known, **opts)
    if name == "idim_ls_bounded":
        return idim_ls(data, reg, names, bounds=_bounds(names), known=known, **opts)
    if name == "idim_iv":
        return idim_iv(data, reg, names, start=ls, known=known, **opts)
    if name == "output_error":
        return output_error(data, reg, names, start=ls, known=known, **opts)
    if name in ("ekf", "ukf"):
        return kalman_filter_fit(data, reg, names, start=ls, kind=name, known=known, **opts)
    raise ValueError(name)


def _jackknife(config, train, model):
    """Leave-one-training-run-out (jackknife) standard deviation of IDIM-LS, or ``None`` for one run.

    ``sqrt((n − 1)/n · Σ (θ_(i) − θ̄)²)`` over the ``n`` fits that each leave one training run out:
    unlike the formal standard deviation it contains the run-to-run variation the model cannot
    explain (still no filter bias that all runs share).
    """
    from .identification import idim_ls

    if len(train) < 2:
        return None
    opts = config.estimator_options("idim_ls")
    fits = []
    for left_out in train:
        data = [d for n, d in train.items() if n != left_out]
        try:
            est = idim_ls(data, model.free_regressor, model.free_names, known=model.known, **opts)
        except ValueError:
            return None  # a single run may not excite every parameter
        fits.append(np.asarray(model.embed(est).value))
    fits = np.stack(fits)
    n = len(fits)
    return np.sqrt((n - 1) / n * np.sum((fits - fits.mean(0)) ** 2, axis=0))


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5
        )
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - a manifest without a revision is fine
        return None


def run_fit(config: FitConfig, out: str | Path | None = None, *, overwrite: bool = False, figures: bool = True) -> Path:
    """Run a fit config end to end; write tables, figures and a manifest (module docstring).

    Raises ``FitExists`` if ``out`` holds a previous fit and ``overwrite`` is false,
    ``ConfigError`` for a missing log, ``ValueError`` from IDIM-LS (rank deficiency). Any other
    estimator that fails is left out with a warning and listed in the manifest's
    ``failed_estimators``.
    """
    import jax
    import pandas as pd

    from .identification.validation import free_simulation_rmse, torque_rmse
    from .types import require_float64

    require_float64("jaxid fit")
    out = Path(out) if out is not None else Path("results") / config.name
    if (out / "manifest.json").exists() and not overwrite:
        raise FitExists(f"{out} already holds a fit; pass --overwrite to replace it.")
    started = time.time()
    model = _build_model(config)
    logs = _load_logs(config, config.train + config.test)
    steps = {round(log.sample_step, 12) for log in logs.values()}
    if len(steps) > 1:
        raise _config_error(
            f"the logs resample to different steps {sorted(steps)}; set log.sample_step so that all share one grid."
        )
    train_raw = {n: logs[n] for n in config.train}
    cutoff, f_exc, cutoff_table = choose_cutoff(config, train_raw, model)
    filtered = _filter_all(logs, cutoff, config.section("filter"))
    train = {n: filtered[n] for n in config.train}

    estimates, seconds, failed = {}, {}, {}
    ls = None
    for name in config.estimators:
        t0 = time.time()
        try:
            est = _estimate(name, config, train, model, ls)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as err:
            if name == "idim_ls":
                raise  # every other estimator starts from it
            # One estimator failing (e.g. a filter diverging on another build) must not lose the others.
            failed[name] = str(err)
            warnings.warn(f"jaxid fit: estimator {name} failed and is left out: {err}", stacklevel=2)
            continue
        seconds[name] = time.time() - t0
        if name == "idim_ls":
            ls = est
        estimates[name] = model.embed(est)

    jackknife = _jackknife(config, train, model)

    # Parameters table.
    rows = []
    for name, est in estimates.items():
        for i, (pname, label) in enumerate(zip(model.names, model.labels, strict=True)):
            rows.append(
                {
                    "estimator": name,
                    "parameter": pname,
                    "label": label,
                    "value": float(est.value[i]),
                    "std": float(est.std[i]),
                    "jackknife_std": float(jackknife[i]) if name == "idim_ls" and jackknife is not None else None,
                    "fixed": i not in model.free,
                    "reference": None if model.reference is None else float(model.reference[i]),
                }
            )
    params = pd.DataFrame(rows)
    models = dict(estimates.items())
    thetas = {k: np.asarray(v.value) for k, v in models.items()}
    if model.reference is not None:
        thetas["reference"] = model.reference

    # Validation table.
    val = config.section("validation")
    horizons = [float(h) for h in val["horizons_s"]]
    vrows = []
    for run, d in filtered.items():
        role = "train" if run in config.train else "test"
        for label, theta in thetas.items():
            tau = torque_rmse(d, model.regressor, theta)
            try:
                sim = free_simulation_rmse(d, model.regressor, theta, horizons, val["start_every_s"])
            except ValueError:
                sim = {h: np.full(2, np.nan) for h in horizons}
            for j in range(2):
                row = {"run": run, "role": role, "model": label, "joint": j + 1, "torque_rmse": float(tau[j])}
                row.update({f"angle_rmse_{h:g}s": float(sim[h][j]) for h in horizons})
                vrows.append(row)
    validation = pd.DataFrame(vrows)

    consistency = pd.DataFrame(
        [{"model": label, **row} for label, theta in thetas.items() for row in consistency_checks(model, theta)]
    )
    lines = _frequency_view(config, filtered, model, thetas, f_exc)

    out.mkdir(parents=True, exist_ok=True)
    params.to_csv(out / "parameters.csv", index=False, float_format="%.6g")
    validation.to_csv(out / "validation.csv", index=False, float_format="%.6g")
    consistency.to_csv(out / "consistency.csv", index=False, float_format="%.6g")
    lines.to_csv(out / "lines.csv", index=False, float_format="%.6g")
    if cutoff_table:
        pd.DataFrame(cutoff_table).to_csv(out / "cutoff.csv", index=False, float_format="%.6g")
    summary = validation_summary(validation, horizons)
    summary.to_csv(out / "summary.csv", index=False, float_format="%.4g")
    figure_paths = []
    if figures:
        from .identification.figures import make_fit_figures

        figure_paths = make_fit_figures(out, filtered, model, thetas, config, val["headline"], horizons)
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
        "cutoff_hz": cutoff,
        "sample_step": next(iter(logs.values())).sample_step,
        "estimators": {
            k: {
                "seconds": round(seconds[k], 3),
                "rank": v.rank,
                "condition": v.condition,
                "residual_std": np.asarray(v.residual_std).tolist(),
                "samples": v.samples,
                "iterations": v.iterations,
                "notes": v.notes,
            }
            for k, v in estimates.items()
        },
        "failed_estimators": failed,
        "base_parameters": list(model.labels),
        "unknowns": list(model.free_names),
        "fixed": {n: float(model.fixed_values[i]) for i, n in enumerate(model.names) if i not in model.free},
        "figures": [str(p.relative_to(out)) for p in figure_paths],
        "seconds": round(time.time() - started, 2),
        "versions": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "equinox": equinox.__version__,
            "pandas": pd.__version__,
        },
        "device": str(jax.devices()[0]),
        "git_revision": _git_revision(),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    return out


def markdown_summary(summary) -> str:
    """The summary table as Markdown: one row per model, torque and angle RMSE per joint."""
    metrics = [c for c in summary.columns if c == "torque_rmse" or c.startswith("angle_rmse_")]
    head = ["model"] + [f"{_pretty(m)} j{j}" for m in metrics for j in (1, 2)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, rows in summary.groupby("model", sort=False):
        rows = rows.set_index("joint")
        cells = [model] + [f"{rows.loc[j, m]:.3f}" for m in metrics for j in (1, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pretty(metric: str) -> str:
    if metric == "torque_rmse":
        return "τ RMSE [N m]"
    return f"q RMSE {metric.removeprefix('angle_rmse_')} [rad]"


def validation_summary(validation, horizons):
    """Held-out (test) mean per model and joint of every metric (train if there is no test run)."""
    role = "test" if (validation["role"] == "test").any() else "train"
    sub = validation[validation["role"] == role]
    cols = ["torque_rmse"] + [f"angle_rmse_{h:g}s" for h in horizons]
    summary = sub.groupby(["model", "joint"], sort=False)[cols].mean().reset_index()
    summary.insert(0, "role", role)
    return summary


def _frequency_view(config, filtered, model, thetas, f_exc_train):
    """Measured vs model lines at the excited frequency and its harmonics (module ``validation``)."""
    import pandas as pd

    from .filters import dominant_frequency
    from .identification.validation import free_simulation, frequency_lines, torque_prediction

    opts = config.section("frequency")
    harmonics = int(opts["harmonics"])
    rows = []
    for run, d in filtered.items():
        sl = d.usable
        tau = d.band(d.tau)[sl]
        freqs = [dominant_frequency(tau[:, j], d.sample_step) for j in range(2)]
        f0 = min(freqs)
        x = frequency_lines(tau, d.sample_step, f0, 1)[0]
        share = np.abs(x) ** 2 / 2 / np.maximum(np.var(tau, axis=0), 1e-300)
        if share.max() < opts["min_share"]:
            continue  # not a sine-driven run
        steps = sl.stop - 1 - sl.start
        signals = {"torque": {"measured": tau}, "angle": {"measured": np.asarray(d.q_raw)[sl]}}
        for label, theta in thetas.items():
            signals["torque"][label] = torque_prediction(d, model.regressor, theta)[sl]
            sim = free_simulation(d, model.regressor, theta, np.asarray([sl.start]), steps)[0, :, :2]
            signals["angle"][label] = sim
        for kind, series in signals.items():
            phasors = {k: frequency_lines(v, d.sample_step, f0, harmonics) for k, v in series.items()}
            for k in range(harmonics):
                for j in range(2):
                    meas = phasors["measured"][k, j]
                    for label in thetas:
                        mod = phasors[label][k, j]
                        rows.append(
                            {
                                "run": run,
                                "role": "train" if run in config.train else "test",
                                "signal": kind,
                                "joint": j + 1,
                                "harmonic": k + 1,
                                "frequency_hz": f0 * (k + 1),
                                "model": label,
                                "measured_amplitude": abs(meas),
                                "measured_phase_deg": math.degrees(np.angle(meas)),
                                "model_amplitude": abs(mod),
                                "model_phase_deg": math.degrees(np.angle(mod)),
                                "relative_error": abs(mod - meas) / max(abs(meas), 1e-300),
                            }
                        )
    return pd.DataFrame(rows)
