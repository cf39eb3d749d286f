"""Tables and figures of a benchmark run, from its chunks only (``jaxid report RUN_DIR`` rebuilds them).

- ``summary.csv`` / ``.parquet`` / ``.md``: per setting × estimator × base parameter the study's
  statistics (``jaxid.report.summarise``: truth, bias, std, RMSE, √CRLB, coverage of the reported
  std, failures, time) plus ``rmse_over_sqrt_crlb``;
- ``estimators.csv`` / ``.md``: per setting × estimator: trials, ok trials, every status and its
  count, the median over parameters of RMSE/√CRLB and of the coverage (``coverage95``: per
  parameter the fraction of ok trials with ``|estimate − truth| ≤ 1.96 ×`` the reported std; the
  median, the lowest and the fraction of parameters inside ``COVERAGE_RANGE``), what explains a
  coverage outside ``COVERAGE_RANGE`` (``coverage_note``, ``coverage_diagnosis``: bias against the
  Monte Carlo std, Monte Carlo std against the reported std), the held-out torque RMSE
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

from .tables import markdown_table, summarise

__all__ = [
    "write_benchmark_tables",
    "make_benchmark_figures",
    "is_benchmark_run",
    "coverage_diagnosis",
    "COVERAGE_RANGE",
    "honest_in_range",
]

#: The 95 % intervals of an honest, unbiased estimator cover the truth in this fraction of the
#: trials (0.95 up to the Monte Carlo spread of a few tens of trials).
COVERAGE_RANGE = (0.85, 0.99)
#: ``t_{19, 0.975}``: a parameter's bias is significant when ``|bias| / (std / √n)`` exceeds it
#: (20 trials; a slightly conservative threshold for more).
_T_CRITICAL = 2.09
#: Fewer ok trials than this: the coverage is not judged (one trial moves it by ≥ 0.1).
_MIN_TRIALS = 10
#: The coverage is also judged (``coverage_note``) when the share of parameters inside ``COVERAGE_RANGE`` is below
#: this fraction of an honest estimator's (``honest_in_range``: 0.63 at 20 trials, 1.0 at 1000).
_IN_RANGE_SHARE = 0.8


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
    summary = summary.merge(_reported_std(trials), on=["setting", "estimator", "parameter"], how="left")
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
    columns = [c for c in table.columns if c not in ("statuses", "coverage_note")] + ["coverage_note", "statuses"]
    (run_dir / "estimators.md").write_text(markdown_table(table, columns))
    return table


def _reported_std(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, estimator, parameter) the RMS over ok trials of the reported std (``reported_std``)."""
    ok = trials[trials["status"] == "ok"].assign(_variance=lambda t: t["std"] ** 2)
    out = ok.groupby(["setting", "estimator", "parameter"], sort=False)["_variance"].mean()
    return np.sqrt(out).rename("reported_std").reset_index()


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
                **coverage_diagnosis(s),
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


def coverage_diagnosis(summary: pd.DataFrame) -> dict:
    """What one estimator's coverage says, from its ``summary`` rows (one per parameter: ``bias``,
    ``std`` (Monte Carlo), ``rmse``, ``coverage95``, ``n_ok`` and the reported std's RMS ``reported_std``).

    Returns ``min_coverage95``, ``coverage_in_range`` (fraction of parameters inside
    ``COVERAGE_RANGE``), ``median_bias_over_std`` (``|bias| / std``), ``biased_fraction`` (parameters
    whose bias is significant: ``|bias| √n / std > 2.09``; about 5 % when unbiased),
    ``median_std_over_reported`` (Monte Carlo std / reported std: > 1 the reported std is too
    small), ``median_rmse_over_reported`` and ``coverage_note``: empty when the median coverage is
    inside ``COVERAGE_RANGE`` and the share of parameters inside it at least ``_IN_RANGE_SHARE`` of an
    honest estimator's (``honest_in_range``), else (prefixed, when only the share fails, by that share and the
    lowest coverage) the reasons measured: ``biased`` (more than 20 % of the
    parameters significantly biased: closed-loop correlation, model error or a prior), ``reported
    std too small`` / ``too large`` (Monte Carlo std / reported std outside 0.8-1.25), ``too few
    trials`` (fewer than 10 ok) or ``no trial ok``."""
    keys = ("min_coverage95", "coverage_in_range", "median_bias_over_std", "biased_fraction")
    keys += ("median_std_over_reported", "median_rmse_over_reported")
    out = dict.fromkeys(keys, np.nan)
    out["coverage_note"] = ""
    s = summary[np.isfinite(summary["coverage95"].to_numpy(dtype=float))] if len(summary) else summary
    if not len(s):
        out["coverage_note"] = "no trial ok: nothing to judge"
        return out
    coverage = s["coverage95"].to_numpy(dtype=float)
    n = int(s["n_ok"].max())
    std = s["std"].to_numpy(dtype=float)
    reported = s["reported_std"].to_numpy(dtype=float)
    bias = np.abs(s["bias"].to_numpy(dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        bias_over_std = bias / std
        std_over_reported = std / reported
        rmse_over_reported = s["rmse"].to_numpy(dtype=float) / reported
    low, high = COVERAGE_RANGE
    out.update(
        min_coverage95=float(np.min(coverage)),
        coverage_in_range=float(np.mean((coverage >= low) & (coverage <= high))),
        median_bias_over_std=float(np.nanmedian(bias_over_std)) if n > 1 else np.nan,
        biased_fraction=float(np.mean(bias_over_std * np.sqrt(n) > _T_CRITICAL)) if n > 1 else np.nan,
        median_std_over_reported=float(np.nanmedian(std_over_reported)) if n > 1 else np.nan,
        median_rmse_over_reported=float(np.nanmedian(rmse_over_reported)),
    )
    median = float(np.median(coverage))
    # Judged on the median, and on the share of parameters in range: an unbiased estimator with an honest std
    # has ``honest_in_range(n)`` of its parameters' coverages in range (the rest Monte Carlo spread), so a
    # share below ``_IN_RANGE_SHARE`` of that means some parameters' intervals fail even at a good median.
    spread = out["coverage_in_range"] >= _IN_RANGE_SHARE * honest_in_range(n)
    if low <= median <= high and spread:
        return out
    if n < _MIN_TRIALS:
        out["coverage_note"] = f"too few trials ({n} ok) to judge"
        return out
    reasons = []
    if out["biased_fraction"] > 0.2:
        reasons.append(
            f"biased (closed-loop correlation, model error or prior): {out['biased_fraction']:.0%} of parameters "
            f"with a significant bias, |bias|/std {out['median_bias_over_std']:.2g}"
        )
    ratio = out["median_std_over_reported"]
    if ratio > 1.25:
        reasons.append(f"reported std too small: Monte Carlo std / reported {ratio:.2g}")
    elif ratio < 0.8:
        reasons.append(f"reported std too large: Monte Carlo std / reported {ratio:.2g}")
    if not reasons:
        reasons.append(f"RMSE / reported std {out['median_rmse_over_reported']:.2g} with neither cause alone decisive")
    note = "; ".join(reasons)
    if low <= median <= high:
        note = (
            f"median in range, but {1 - out['coverage_in_range']:.0%} of parameters outside {low:g}-{high:g} "
            f"(lowest {out['min_coverage95']:.2g}): {note}"
        )
    out["coverage_note"] = note
    return out


def honest_in_range(n: int) -> float:
    """The probability that one parameter's coverage over ``n`` trials is inside ``COVERAGE_RANGE`` for an
    unbiased estimator whose std is right (its trials inside the interval: binomial, ``n`` and 0.95)."""
    from scipy.stats import binom

    low, high = COVERAGE_RANGE
    return float(binom.cdf(np.floor(high * n + 1e-9), n, 0.95) - binom.cdf(np.ceil(low * n - 1e-9) - 1, n, 0.95))


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
