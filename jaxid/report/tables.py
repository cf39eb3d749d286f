"""Results tables: per-trial rows to the summary per setting × estimator × parameter.

Summary columns: ``truth`` (mean true value), ``mean``, ``bias`` (mean error), ``std`` (of the
error, ddof 1), ``rmse``, ``sqrt_crlb`` (linear-model Cramér–Rao bound for the setting's
experiment at its noise std, treated as Gaussian), ``sqrt_crlb_nonlinear`` (the same for the
nonlinear arm), ``std_over_sqrt_crlb`` (against the bound of the estimator's own model), ``coverage95`` (share of trials whose
``|error| <= 1.96 · reported std``), ``n_ok``, ``failed`` (trials with any non-ok status:
simulation or estimator) and ``seconds_per_trial``. Statistics use the ok trials only; the
failures are counted, never dropped silently.

``parameter_table`` lists any estimates, from records or from logs, parameter by parameter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..estimate.interface import ESTIMATORS
from ..types import ParameterEstimate

__all__ = ["summarise", "write_tables", "read_trials", "setting_columns", "markdown_table", "parameter_table"]

#: Setting keys copied into the summary so that plots can use them as axes.
SETTING_COLUMNS = ("model", "lines", "scale", "noise", "noise_level", "measured_periods", "simulator", "label")


def read_trials(run_dir: str | Path) -> pd.DataFrame:
    """The per-trial table of a run (from ``trials.parquet`` or, while running, the chunks)."""
    run_dir = Path(run_dir)
    if (run_dir / "trials.parquet").exists():
        return pd.read_parquet(run_dir / "trials.parquet")
    files = sorted((run_dir / "chunks").glob("*/[0-9]*.parquet"))
    if not files:
        raise FileNotFoundError(f"{run_dir} has no trial results yet (no chunks); run `jaxid run` first.")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def setting_columns(config: dict) -> pd.DataFrame:
    rows = []
    for name, values in config["settings"].items():
        rows.append({"setting": name, **{k: values.get(k) for k in SETTING_COLUMNS}})
    return pd.DataFrame(rows)


def _nonlinear_bound(estimator: str) -> bool:
    """Whether an estimator's spread is compared with the nonlinear arm's bound (its class's
    ``bound``; the linear bound for a name without a class)."""
    cls = ESTIMATORS.get(estimator)
    return cls is not None and cls.bound == "nonlinear"


def summarise(trials: pd.DataFrame, crlb: dict | None = None, crlb_nonlinear: dict | None = None) -> pd.DataFrame:
    """Summary statistics per (setting, estimator, parameter).

    ``crlb[setting][parameter]`` is √CRLB of the linearised model, ``crlb_nonlinear`` that of the
    nonlinear arm; ``std_over_sqrt_crlb`` uses the bound of the model the estimator assumes.
    """
    crlb = crlb or {}
    crlb_nonlinear = crlb_nonlinear or {}
    rows = []
    for (setting, estimator, parameter), g in trials.groupby(["setting", "estimator", "parameter"], sort=False):
        ok = g[g["status"] == "ok"]
        err = (ok["estimate"] - ok["truth"]).to_numpy()
        n = len(ok)
        sc = crlb.get(setting, {}).get(parameter, np.nan)
        scn = crlb_nonlinear.get(setting, {}).get(parameter, np.nan)
        own = scn if _nonlinear_bound(estimator) else sc
        std = float(np.std(err, ddof=1)) if n > 1 else np.nan
        rows.append(
            {
                "setting": setting,
                "estimator": estimator,
                "parameter": parameter,
                "truth": float(g["truth"].mean()),
                "mean": float(ok["estimate"].mean()) if n else np.nan,
                "bias": float(err.mean()) if n else np.nan,
                "std": std,
                "rmse": float(np.sqrt(np.mean(err**2))) if n else np.nan,
                "sqrt_crlb": sc,
                "sqrt_crlb_nonlinear": scn,
                "std_over_sqrt_crlb": std / own if own and np.isfinite(own) else np.nan,
                "coverage95": float(np.mean(np.abs(err) <= 1.96 * ok["std"].to_numpy())) if n else np.nan,
                "n_ok": n,
                "failed": int(len(g) - n),
                "seconds_per_trial": float(g["seconds"].mean()),
            }
        )
    return pd.DataFrame(rows)


def _crlb_from_extras(run_dir: Path) -> tuple[dict, dict, pd.DataFrame]:
    crlb, crlb_nl, coeffs = {}, {}, []
    for path in sorted((run_dir / "chunks").glob("*/extras.json")):
        extras = json.loads(path.read_text())
        crlb[path.parent.name] = extras.get("crlb", {})
        crlb_nl[path.parent.name] = extras.get("crlb_nonlinear", {})
        coeffs.extend(extras.get("coefficients", []))
    return crlb, crlb_nl, pd.DataFrame(coeffs)


#: Per-trial rows above which ``trials.csv`` is not written (``trials.parquet`` always is).
CSV_MAX_ROWS = 1_000_000


def write_tables(run_dir: str | Path, experiment=None) -> pd.DataFrame:
    """(Re)build ``trials.*``, ``summary.*``, ``coefficients.csv`` and ``history.csv`` from the chunks."""
    run_dir = Path(run_dir)
    files = sorted((run_dir / "chunks").glob("*/[0-9]*.parquet"))
    if files:
        trials = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        trials = trials.sort_values(["setting", "estimator", "parameter", "trial"], kind="stable").reset_index(
            drop=True
        )
        trials.to_parquet(run_dir / "trials.parquet", index=False)
        if len(trials) <= CSV_MAX_ROWS:  # a million-trial sweep keeps its rows in parquet only
            trials.to_csv(run_dir / "trials.csv", index=False)
    else:
        trials = read_trials(run_dir)
    crlb, crlb_nl, coeffs = _crlb_from_extras(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    order = list(config["settings"])
    summary = summarise(trials, crlb, crlb_nl)
    summary = summary.merge(setting_columns(config), on="setting", how="left")
    summary["_order"] = summary["setting"].map({s: i for i, s in enumerate(order)})
    summary = summary.sort_values(["_order", "estimator", "parameter"], kind="stable").drop(columns="_order")
    summary.to_csv(run_dir / "summary.csv", index=False)
    summary.to_parquet(run_dir / "summary.parquet", index=False)
    (run_dir / "summary.md").write_text(markdown_table(summary))
    if len(coeffs):
        coeffs.to_csv(run_dir / "coefficients.csv", index=False)
    hist = sorted((run_dir / "chunks").glob("*/history.parquet"))
    if hist:
        pd.concat([pd.read_parquet(f) for f in hist], ignore_index=True).to_csv(run_dir / "history.csv", index=False)
    return summary


def parameter_table(estimates, truth=None) -> pd.DataFrame:
    """Rows ``estimator, trial, parameter, value, std, status`` (and ``truth, error, z`` with ``truth``)
    of any estimates: from simulated records (``Estimate``, batched or not) or from logs
    (``Identification``) alike — whatever satisfies ``jaxid.types.ParameterEstimate``.

    Args:
        estimates: one estimate, or a mapping ``{estimator name: estimate}``.
        truth: ``{parameter: value}`` or an array in each estimate's ``names`` order (optional).

    ``trial`` is the index along a batched estimate's leading axis (0 for a single estimate);
    ``z = error / std``. Raises ``ValueError`` for an object that is not an estimate.
    """
    if isinstance(estimates, ParameterEstimate):
        estimates = {"estimate": estimates}
    rows = []
    for name, est in estimates.items():
        if not isinstance(est, ParameterEstimate):
            raise ValueError(
                f"parameter_table: {name!r} is a {type(est).__name__}, not an estimate (names, value, "
                "covariance, std, label: jaxid.Estimate or jaxid.Identification)."
            )
        value = np.asarray(est.value, dtype=float)
        std = np.asarray(est.std, dtype=float)
        labels = np.asarray(est.label, dtype=object)
        value, std, labels = value.reshape(-1, value.shape[-1]), std.reshape(-1, std.shape[-1]), labels.reshape(-1)
        if truth is None:
            true = None
        elif isinstance(truth, Mapping):
            true = np.asarray([truth.get(p, np.nan) for p in est.names], dtype=float)
        else:
            true = np.asarray(truth, dtype=float).reshape(-1)
            if true.shape != (len(est.names),):
                raise ValueError(f"parameter_table: truth has {true.size} values for {len(est.names)} parameters.")
        for trial in range(value.shape[0]):
            for j, parameter in enumerate(est.names):
                row = {
                    "estimator": name,
                    "trial": trial,
                    "parameter": parameter,
                    "value": value[trial, j],
                    "std": std[trial, j],
                    "status": str(labels[trial]),
                }
                if true is not None:
                    row["truth"] = true[j]
                    row["error"] = value[trial, j] - true[j]
                    row["z"] = row["error"] / std[trial, j] if std[trial, j] > 0 else np.nan
                rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: pd.DataFrame, columns=None) -> str:
    """A compact Markdown table of the summary (numbers to 4 significant digits; a ``|`` in a text cell
    escaped as ``\\|``)."""
    columns = columns or [
        "setting",
        "estimator",
        "parameter",
        "truth",
        "bias",
        "std",
        "rmse",
        "sqrt_crlb",
        "sqrt_crlb_nonlinear",
        "coverage95",
        "failed",
        "seconds_per_trial",
    ]
    df = summary[columns].copy()
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    lines = []
    for _, row in df.iterrows():
        cells = []
        for c in columns:
            v = row[c]
            if isinstance(v, float):
                cells.append("nan" if not np.isfinite(v) else f"{v:.4g}")
            else:
                cells.append(str(v).replace("|", "\\|"))  # a pipe in a cell (``|bias|``) would split it
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"
