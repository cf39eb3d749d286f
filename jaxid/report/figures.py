"""Figures, drawn from a run's tables only (``jaxid report RUN_DIR`` redraws them).

- ``coefficients``: theoretical vs extracted Fourier coefficients C and D per line (paper Figs. 2-3);
- ``estimates``: the estimates of each parameter under noise, per estimator (paper Figs. 4-5);
- ``rmse_vs_noise``: RMSE against noise level with the √CRLB curve;
- ``rmse_vs_scale``: |bias| and RMSE against excitation scale with √CRLB;
- ``rmse_vs_periods``: RMSE against the number of measured periods with √CRLB;
- ``estimators``: RMSE of the estimators side by side per setting;
- ``convergence``: recursive estimators' estimate over time, frequency-domain estimates as lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

__all__ = ["make_figures"]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_coefficients(coeffs: pd.DataFrame, out: Path) -> list[Path]:
    paths = []
    for setting, g in coeffs.groupby("setting", sort=False):
        long = g.melt(id_vars=["harmonic", "joint", "source"], value_vars=["C", "D"], var_name="coefficient")
        grid = sns.catplot(
            data=long,
            x="harmonic",
            y="value",
            hue="source",
            row="coefficient",
            col="joint",
            kind="point",
            linestyles="none",
            dodge=0.4,
            height=2.8,
            aspect=1.6,
            sharey=False,
            markers=["o", "x", "."],
        )
        grid.set_axis_labels("harmonic k (line k·ω_f)", "coefficient [rad]")
        grid.figure.suptitle(f"{setting}: steady-state Fourier coefficients (paper Figs. 2-3)", y=1.02)
        paths.append(_save(grid.figure, out / f"coefficients_{setting}.png"))
    return paths


def plot_estimates(trials: pd.DataFrame, out: Path, window: float = 0.25) -> list[Path]:
    """Strip plots of the estimates; the axis spans truth ± ``window``·|truth| and points outside
    are drawn at its edge and counted in the estimator's label (so one wild estimator cannot hide
    the others)."""
    paths = []
    ok = trials[trials["status"] == "ok"]
    for setting, g in ok.groupby("setting", sort=False):
        pars = _parameters(g)
        fig, axes = plt.subplots(1, len(pars), figsize=(3.2 * len(pars) + 0.8, 3.4), squeeze=False)
        for ax, par in zip(axes[0], pars, strict=True):
            gp = g[g["parameter"] == par].copy()
            truth = gp["truth"].mean()
            lo, hi = truth - window * abs(truth), truth + window * abs(truth)
            labels = {}
            for est, ge in gp.groupby("estimator", sort=False):
                off = int(((ge["estimate"] < lo) | (ge["estimate"] > hi)).sum())
                labels[est] = f"{est}\n({off}/{len(ge)} off-scale)" if off else est
            gp["shown"] = gp["estimate"].clip(lo, hi)
            gp["estimator"] = gp["estimator"].map(labels)
            sns.stripplot(data=gp, x="estimator", y="shown", ax=ax, alpha=0.4, size=2.5, jitter=0.25)
            ax.axhline(truth, color="k", lw=1, ls="--")
            ax.set_ylim(lo, hi)
            ax.set_title(par)
            ax.set_ylabel("estimate")
            ax.set_xlabel("")
            ax.tick_params(axis="x", rotation=30, labelsize=7)
        fig.suptitle(f"{setting}: estimates under noise (paper Figs. 4-5); dashed = truth, axis = truth ± {window:.0%}")
        fig.tight_layout()
        paths.append(_save(fig, out / f"estimates_{setting}.png"))
    return paths


_PARAMETER_ORDER = ("m1", "m2", "J1", "J2", "fv1", "fv2")


def _parameters(df: pd.DataFrame) -> list[str]:
    pars = list(dict.fromkeys(df["parameter"]))
    return sorted(
        pars, key=lambda p: (_PARAMETER_ORDER.index(p) if p in _PARAMETER_ORDER else len(_PARAMETER_ORDER), p)
    )


def _curve(summary: pd.DataFrame, x: str, out: Path, name: str, title: str, logx=True, logy=True, bias=False) -> Path:
    pars = _parameters(summary)
    summary = summary.copy()
    # Settings that also differ in another swept quantity get their own curves.
    others = [
        c
        for c in ("lines", "scale", "noise_level", "measured_periods", "model")
        if c != x and c in summary and summary[c].nunique() > 1
    ]
    summary["curve"] = summary["estimator"]
    for c in others:
        summary["curve"] = summary["curve"] + f" {c}=" + summary[c].astype(str)
    fig, axes = plt.subplots(1, len(pars), figsize=(3.6 * len(pars), 3.2), squeeze=False)
    for ax, par in zip(axes[0], pars, strict=True):
        g = summary[summary["parameter"] == par].sort_values(x)
        for est, ge in g.groupby("curve", sort=False):
            line = ax.plot(ge[x], ge["rmse"], marker="o", label=f"{est} RMSE")[0]
            if bias:
                ax.plot(ge[x], ge["bias"].abs(), marker="x", ls=":", color=line.get_color(), label=f"{est} |bias|")
        bounds = (("sqrt_crlb", "k--", "√CRLB (linear model)"), ("sqrt_crlb_nonlinear", "k:", "√CRLB (nonlinear arm)"))
        for i, (_, gc) in enumerate(g.groupby([c for c in others] or (lambda _: 0), sort=False)):
            for column, style, label in bounds:
                curve = gc.groupby(x)[column].first() if column in gc else pd.Series(dtype=float)
                if curve.notna().any():
                    ax.plot(
                        curve.index, curve.values, style, lw=1.5, alpha=1.0 / (1 + i), label=label if i == 0 else None
                    )
        ax.set_title(par)
        ax.set_xlabel(x)
        if logx and (g[x] > 0).all():
            ax.set_xscale("log")
            ticks = sorted(g[x].unique())
            ax.minorticks_off()
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
        if logy and (g["rmse"] > 0).any():
            ax.set_yscale("log")
    axes[0, 0].set_ylabel("error")
    axes[0, -1].legend(fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out / f"{name}.png")


def plot_estimators(summary: pd.DataFrame, out: Path) -> Path:
    g = summary.copy()
    g["rel_rmse"] = g["rmse"] / g["truth"].abs()
    grid = sns.catplot(
        data=g,
        x="parameter",
        y="rel_rmse",
        hue="estimator",
        order=_parameters(g),  # the other figures' order (m1, m2, J1, J2, fv1, fv2), not alphabetical
        hue_order=list(dict.fromkeys(g["estimator"])),
        col="setting",
        kind="bar",
        col_wrap=min(3, g["setting"].nunique()),
        height=3,
        aspect=1.2,
    )
    if (g["rel_rmse"] > 0).any():
        grid.set(yscale="log")
    grid.set_axis_labels("parameter", "RMSE / |truth|")
    grid.figure.suptitle("Estimators side by side", y=1.02)
    return _save(grid.figure, out / "estimators.png")


def plot_convergence(history: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[Path]:
    paths = []
    for setting, g in history.groupby("setting", sort=False):
        pars = _parameters(g)
        fig, axes = plt.subplots(1, len(pars), figsize=(3.6 * len(pars), 3.2), squeeze=False)
        for ax, par in zip(axes[0], pars, strict=True):
            gp = g[g["parameter"] == par]
            for est, ge in gp.groupby("estimator", sort=False):
                ax.plot(ge["time"], ge["estimate"], label=est)
            ax.axhline(gp["truth"].iloc[0], color="k", lw=1, label="truth")
            fd = summary[
                (summary["setting"] == setting)
                & (summary["parameter"] == par)
                & ~summary["estimator"].isin(g["estimator"].unique())
            ]
            for k, (_, row) in enumerate(fd.iterrows()):
                ax.axhline(
                    row["mean"],
                    ls="--",
                    lw=1,
                    label=f"{row['estimator']} (mean)",
                    color=sns.color_palette()[(3 + k) % 10],
                )
            lo, hi = gp["truth"].iloc[0] * 0.5, gp["truth"].iloc[0] * 1.5
            ax.set_ylim(min(lo, hi), max(lo, hi))
            ax.set_title(par)
            ax.set_xlabel("time [s]")
        axes[0, -1].legend(fontsize=6)
        fig.suptitle(f"{setting}: recursive estimates over time (first trial)")
        fig.tight_layout()
        paths.append(_save(fig, out / f"convergence_{setting}.png"))
    return paths


def make_figures(run_dir: str | Path) -> list[Path]:
    """Draw the figures listed in the run's ``experiment.plots`` into ``RUN_DIR/figures``."""
    run_dir = Path(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    plots = config["experiment"].get("plots", [])
    out = run_dir / "figures"
    summary = pd.read_parquet(run_dir / "summary.parquet")
    paths: list[Path] = []
    sns.set_theme(style="whitegrid", context="paper")
    for name in plots:
        if name == "coefficients" and (run_dir / "coefficients.csv").exists():
            paths += plot_coefficients(pd.read_csv(run_dir / "coefficients.csv"), out)
        elif name == "estimates":
            paths += plot_estimates(pd.read_parquet(run_dir / "trials.parquet"), out)
        elif name == "rmse_vs_noise":
            paths.append(_curve(summary, "noise_level", out, name, "RMSE vs noise level"))
        elif name == "rmse_vs_scale":
            paths.append(_curve(summary, "scale", out, name, "|bias| and RMSE vs excitation scale", bias=True))
        elif name == "rmse_vs_periods":
            paths.append(_curve(summary, "measured_periods", out, name, "RMSE vs measured periods"))
        elif name == "estimators":
            paths.append(plot_estimators(summary, out))
        elif name == "convergence" and (run_dir / "history.csv").exists():
            paths += plot_convergence(pd.read_csv(run_dir / "history.csv"), summary, out)
    return [p for p in paths if p is not None and np.all(p.exists())]
