"""Figures of ``jaxid fit``: measured vs predicted torque, measured vs simulated angles, residual spectra.

One panel per joint (``n`` joints: the torque and angle figures stack ``n`` rows; the residual
spectra sit in rows of at most three panels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..estimate.logs.validation import free_simulation, residual_spectrum, torque_prediction
from .tables import model_substeps

__all__ = ["make_fit_figures"]


def _save(fig, path: Path) -> None:
    # Line plots need few colours: a 64-colour palette PNG is ~3x smaller (results are committed).
    from PIL import Image

    fig.savefig(path, dpi=90)
    Image.open(path).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def make_fit_figures(
    out: Path,
    filtered,
    model,
    thetas,
    config,
    headline: str,
    horizons,
    failures: dict[str, str] | None = None,
    substeps: dict[str, int] | int | None = None,
) -> list[Path]:
    """Write ``figures/*.png`` for the held-out runs (the training runs if none); return the paths.
    ``substeps``: RK4 steps per sample of the free simulations, ``{label: int}`` (``jaxid.fit.tables.simulation_substeps``)
    or one int for all (default: ``free_simulation``'s rule).

    Each figure is drawn on its own: one that fails (e.g. a free simulation that leaves the data) is
    recorded in ``failures`` (``{file name: reason}``, when given; else re-raised) and the others are
    still written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = Path(out) / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = config.test or config.train
    shown = {headline: thetas[headline]}
    if "reference" in thetas:
        shown["reference"] = thetas["reference"]
    colours = {headline: "tab:red", "reference": "tab:blue"}
    names = {headline: f"fit ({headline})", "reference": "reference parameters"}
    paths = []
    longest = max(horizons)
    joints = filtered[runs[0]].joints
    height = 5 if joints == 2 else 1.1 + 1.9 * joints  # inches: two joints as before, then ~1.9 per panel

    def attempt(name, draw):
        try:
            draw(fig_dir / name)
            paths.append(fig_dir / name)
        except Exception as err:  # noqa: BLE001 - one figure failing must not lose the others
            plt.close("all")
            if failures is None:
                raise
            failures[name] = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"

    for run in runs:
        attempt(
            f"torque_{run}.png",
            lambda path, run=run: _torque(plt, path, filtered[run], run, model, shown, colours, names, joints, height),
        )
        attempt(
            f"angles_{run}.png",
            lambda path, run=run: _angles(
                plt, path, filtered[run], run, model, shown, colours, names, joints, height, longest, substeps
            ),
        )
    attempt(
        "residual_spectra.png", lambda path: _spectra(plt, path, filtered, runs, model, shown, colours, names, joints)
    )
    return paths


def _torque(plt, path, d, run, model, shown, colours, names, joints, height):
    t = np.asarray(d.t)
    sl = d.usable
    # Torque: a 3-s window from the middle of the run.
    mid = t[sl][len(t[sl]) // 2]
    win = (t >= mid - 1.5) & (t <= mid + 1.5)
    preds = {label: torque_prediction(d, model.regressor, theta) for label, theta in shown.items()}  # once per model
    band = d.band(d.tau)
    fig, axes = plt.subplots(joints, 1, figsize=(9, height), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for j, ax in enumerate(axes):
        ax.plot(t[win], np.asarray(d.tau_raw)[win, j], color="0.75", lw=0.8, label="measured (raw)")
        ax.plot(t[win], band[win, j], color="k", lw=1.2, label="measured (low-passed)")
        for label, pred in preds.items():
            ax.plot(t[win], pred[win, j], color=colours[label], lw=1.0, label=names[label])
        ax.set_ylabel(f"τ{j + 1} [N m]")
    axes[0].set_title(f"{run}: measured vs inverse-dynamics torque (cut-off {d.cutoff_hz:g} Hz)")
    axes[0].legend(fontsize=7, ncol=4, loc="upper right")
    axes[-1].set_xlabel("t [s]")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _angles(plt, path, d, run, model, shown, colours, names, joints, height, longest, substeps=None):
    t = np.asarray(d.t)
    sl = d.usable
    # Angles: free simulations restarted every `longest` seconds from the measured state.
    steps = int(round(longest / d.sample_step))
    starts = np.arange(sl.start, sl.stop - steps, steps)
    sims = (
        {}
        if starts.size == 0
        else {
            k: free_simulation(d, model.regressor, v, starts, steps, model_substeps(substeps, k))
            for k, v in shown.items()
        }
    )
    fig, axes = plt.subplots(joints, 1, figsize=(9, height), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for j, ax in enumerate(axes):
        ax.plot(t[sl], np.asarray(d.q_raw)[sl, j], color="k", lw=1.2, label="measured")
        for label, sim in sims.items():  # simulated once per model, not per joint
            for i, s in enumerate(starts):
                ax.plot(
                    t[s : s + steps + 1],
                    sim[i, :, j],
                    color=colours[label],
                    lw=1.0,
                    label=names[label] if i == 0 else None,
                )
        ax.set_ylabel(f"q{j + 1} [rad]")
    axes[0].set_title(f"{run}: free simulation from the measured state every {longest:g} s, measured torque")
    axes[0].legend(fontsize=7, ncol=3, loc="upper right")
    axes[-1].set_xlabel("t [s]")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _spectra(plt, path, filtered, runs, model, shown, colours, names, joints):
    # Residual torque spectra over the shown runs.
    cols = min(joints, 3)
    rows = -(-joints // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.6 * rows), sharey=True, squeeze=False)
    for ax in axes.reshape(-1)[joints:]:
        ax.set_visible(False)
    axes = axes.reshape(-1)[:joints]
    # One Welch segment length for every run (at most the shortest run's usable length): runs of
    # different lengths then share one frequency grid and their spectra can be averaged.
    segment = min([1024] + [filtered[run].usable.stop - filtered[run].usable.start for run in runs])
    for label, theta in shown.items():
        psd_sum, freqs = None, None
        for run in runs:
            d = filtered[run]
            resid = (torque_prediction(d, model.regressor, theta, band=False) - np.asarray(d.tau_raw))[d.usable]
            freqs, psd = residual_spectrum(resid, d.sample_step, segment)
            psd_sum = psd if psd_sum is None else psd_sum + psd
        for j, ax in enumerate(axes):
            ax.semilogy(freqs, psd_sum[:, j] / len(runs), color=colours[label], lw=1.0, label=names[label])
    for j, ax in enumerate(axes):
        ax.axvline(filtered[runs[0]].cutoff_hz, color="0.5", ls="--", lw=0.8, label="filter cut-off")
        ax.set_xlim(0, min(40.0, 0.5 / filtered[runs[0]].sample_step))
        ax.set_xlabel("frequency [Hz]")
        ax.set_title(f"joint {j + 1}: residual τ_model − τ_measured")
    for ax in axes[::cols]:
        ax.set_ylabel("PSD [(N m)²/Hz]")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
