"""Tables and figures of a benchmark run, from its chunks only (``jaxid report RUN_DIR`` rebuilds them).

- ``summary.csv`` / ``.parquet`` / ``.md``: per setting × estimator × base parameter the study's
  statistics (``jaxid.report.summarise``: truth, bias, std, RMSE, √CRLB, coverage of the reported
  std, failures, time) plus ``rmse_over_sqrt_crlb``;
- ``estimators.csv`` / ``.md``: per setting × estimator: trials, ok trials, every status and its
  count, the median over parameters of RMSE/√CRLB and of the coverage, the held-out torque RMSE
  (median over trials, beside the truth's: the model error floor), wall seconds per trial (median
  and mean; the first trial of a process includes compiles) and the median process CPU seconds
  (all threads: what the work costs whatever else the machine runs);
- ``figures/rmse_over_crlb_<setting>.png``: RMSE/√CRLB per base parameter and estimator;
  ``figures/heldout_torque.png``: held-out torque RMSE per estimator and setting.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..report import markdown_table, summarise

__all__ = ["write_benchmark_tables", "make_benchmark_figures", "is_benchmark_run"]


def is_benchmark_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` was written by the benchmark runner (its ``config.json`` says so)."""
    path = Path(run_dir) / "config.json"
    return path.exists() and json.loads(path.read_text())["experiment"].get("kind") == "benchmark"


def _extras(run_dir: Path) -> dict:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((run_dir / "chunks").glob("*/extras.json"))}


def write_benchmark_tables(run_dir: str | Path) -> pd.DataFrame:
    """(Re)build ``trials.parquet``, the summary and the estimators table from the chunks; return the
    estimators table. Raises ``FileNotFoundError`` when no chunk is on disk."""
    run_dir = Path(run_dir)
    files = sorted((run_dir / "chunks").glob("*/[0-9]*.parquet"))
    if not files:
        raise FileNotFoundError(f"{run_dir} has no trial results yet (no chunks); run `jaxid run` first.")
    config = json.loads((run_dir / "config.json").read_text())
    order = {name: i for i, name in enumerate(config["settings"])}
    trials = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    trials = trials.sort_values(["setting", "estimator", "parameter", "trial"], kind="stable").reset_index(drop=True)
    trials.to_parquet(run_dir / "trials.parquet", index=False)
    extras = _extras(run_dir)
    crlb = {name: e.get("crlb", {}) for name, e in extras.items()}
    summary = summarise(trials, crlb, crlb)
    summary["rmse_over_sqrt_crlb"] = summary["rmse"] / summary["sqrt_crlb"]
    summary["_order"] = summary["setting"].map(order)
    # Parameters in the model's order (the base columns), not alphabetically.
    position = {p: i for i, p in enumerate(dict.fromkeys(trials.sort_values("trial", kind="stable")["parameter"]))}
    for e in extras.values():
        position.update({p: i for i, p in enumerate(e.get("labels", {}))})
    summary["_position"] = summary["parameter"].map(position)
    summary = summary.sort_values(["_order", "estimator", "_position"], kind="stable").drop(
        columns=["_order", "_position"]
    )
    summary.to_csv(run_dir / "summary.csv", index=False)
    summary.to_parquet(run_dir / "summary.parquet", index=False)
    (run_dir / "summary.md").write_text(markdown_table(summary))
    table = _estimators_table(trials, summary, extras, order)
    table.to_csv(run_dir / "estimators.csv", index=False)
    columns = [c for c in table.columns if c != "statuses"] + ["statuses"]
    (run_dir / "estimators.md").write_text(markdown_table(table, columns))
    return table


def _estimators_table(trials: pd.DataFrame, summary: pd.DataFrame, extras: dict, order: dict) -> pd.DataFrame:
    rows = []
    per_trial = trials.groupby(["setting", "estimator", "trial"], sort=False).first().reset_index()
    for (setting, estimator), g in per_trial.groupby(["setting", "estimator"], sort=False):
        s = summary[(summary["setting"] == setting) & (summary["estimator"] == estimator)]
        counts = g["status"].value_counts()
        ok = g[g["status"] == "ok"]
        rows.append(
            {
                "setting": setting,
                "estimator": estimator,
                "trials": len(g),
                "ok": int(counts.get("ok", 0)),
                "median_rmse_over_sqrt_crlb": float(np.nanmedian(s["rmse_over_sqrt_crlb"])) if len(ok) else np.nan,
                "median_coverage95": float(np.nanmedian(s["coverage95"])) if len(ok) else np.nan,
                "heldout_rmse": float(ok["heldout_rmse"].median()) if len(ok) else np.nan,
                "heldout_truth": float(extras.get(setting, {}).get("heldout_truth_rmse", np.nan)),
                "seconds_median": float(g["seconds"].median()),
                "seconds_mean": float(g["seconds"].mean()),
                "cpu_seconds_median": float(g["cpu_seconds"].median()) if "cpu_seconds" in g else np.nan,
                "statuses": ", ".join(f"{k}: {v}" for k, v in counts.items()),
            }
        )
    table = pd.DataFrame(rows)
    table["_order"] = table["setting"].map(order)
    return table.sort_values(["_order"], kind="stable").drop(columns="_order").reset_index(drop=True)


def make_benchmark_figures(run_dir: str | Path) -> list[Path]:
    """Draw the figures (module docstring) from ``summary.parquet`` and ``trials.parquet``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    summary = pd.read_parquet(run_dir / "summary.parquet")
    trials = pd.read_parquet(run_dir / "trials.parquet")
    out = run_dir / "figures"
    out.mkdir(exist_ok=True)
    paths = []
    for setting, g in summary.groupby("setting", sort=False):
        fig, ax = plt.subplots(figsize=(max(6.0, 0.14 * g["parameter"].nunique() + 2), 3.6))
        params = list(dict.fromkeys(g["parameter"]))
        x = np.arange(len(params))
        for k, (estimator, h) in enumerate(g.groupby("estimator", sort=False)):
            ratio = h.set_index("parameter").reindex(params)["rmse_over_sqrt_crlb"]
            # Open markers of different shapes: estimators that agree (IDIM-LS and RLS) stay visible.
            ax.plot(x, ratio.to_numpy(), "osD^v<>"[k % 7], ms=4.5, mfc="none", mew=1.0, label=estimator)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(x, params, rotation=90, fontsize=6)
        ax.set_ylabel("RMSE / √CRLB")
        ax.set_title(f"{setting}: RMSE per base parameter against the Cramér–Rao bound", fontsize=9)
        ax.legend(fontsize=7, ncol=4)
        path = out / f"rmse_over_crlb_{setting}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    per_trial = trials.groupby(["setting", "estimator", "trial"], sort=False).first().reset_index()
    per_trial = per_trial[per_trial["status"] == "ok"]
    if len(per_trial):
        groups = list(per_trial.groupby(["setting", "estimator"], sort=False))
        fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(groups) + 2), 3.6))
        ax.boxplot([g["heldout_rmse"].to_numpy() for _, g in groups], showfliers=True)
        ax.set_xticks(np.arange(1, len(groups) + 1), [f"{s}\n{e}" for (s, e), _ in groups], rotation=90, fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("held-out torque RMSE [N m]")
        path = out / "heldout_torque.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths
