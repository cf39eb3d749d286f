"""Metrics on held-out logs, the same for every parameter set (an estimate or the lab's values).

- ``torque_rmse``: per joint, the RMS of ``Y(q, q', q'') θ − τ`` on the usable samples of a
  filtered log: inverse dynamics on the filtered data and the low-passed measured torque ``τ``,
  both passed through the low-pass once more (``log.band``), as in IDIM: both in one band.
- ``free_simulation_rmse``: the model simulated from the filtered measured state at start times
  ``t_usable_start + k · start_every_s`` under the low-passed measured torque, the angle error
  against the measured angles over the first ``H`` seconds for each horizon ``H``; per joint, the
  RMS pooled over all starts (only starts whose longest horizon fits in the log are used).
- ``frequency_lines``: the amplitude and phase of a signal at ``k · f0`` (``k = 1 … harmonics``)
  by least squares on a whole number of periods (with a constant term), ``x ≈ c + Σ Re{X_k e^{jkω0t}}``
  (DESIGN §2 phasor convention, ``X = C − jD``).
- ``residual_spectrum``: Welch power spectral density of the torque residual.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .data import FilteredLog, Known, Regressor, model_torque, rowwise
from .stepping import simulate_segments_jit, stable_substeps, stage_torques

__all__ = [
    "torque_prediction",
    "torque_rmse",
    "free_simulation",
    "free_simulation_rmse",
    "frequency_lines",
    "residual_spectrum",
]


def torque_prediction(log: FilteredLog, regressor: Regressor, theta, *, band: bool = True) -> np.ndarray:
    """``Y θ`` on every sample of a filtered log, ``(N, n)`` [N m], low-passed like the measured
    torque (``log.band``) unless ``band=False``."""
    # One compiled program per regressor (hashed by identity), whatever θ and the log's length: a fit scores
    # many parameter sets on many logs (validation, cross-validation, figures).
    pred = rowwise(model_torque, log.q, log.qd, log.qdd, static=(regressor,), args=(jnp.asarray(theta, dtype=float),))
    return log.band(pred) if band else pred


def torque_rmse(log: FilteredLog, regressor: Regressor, theta) -> np.ndarray:
    """Per-joint torque RMSE [N m] on the usable samples (see the module docstring)."""
    pred = torque_prediction(log, regressor, theta)
    err = (pred - log.band(log.tau))[log.usable]
    return np.sqrt(np.mean(err**2, axis=0))


def free_simulation(
    log: FilteredLog,
    regressor: Regressor,
    theta,
    starts: np.ndarray,
    steps: int,
    substeps: int | None = None,
    known: Known | None = None,
) -> np.ndarray:
    """Simulated states ``(S, steps + 1, 2 n)``, ``(q, q')``, from the filtered state at sample indices ``starts``;
    ``substeps`` RK4 steps per sample (default: ``stable_substeps`` of ``theta`` on this log). The starts are
    padded (the last repeated) to a multiple of ``START_BLOCK``, so that logs of similar lengths share one
    compiled program; the padding is dropped. ``known``: the torque of fixed parameters (as the estimators')."""
    if substeps is None:
        substeps, _ = stable_substeps(regressor, theta, [log], known)
    count = len(starts)
    padded = np.concatenate([starts, np.full(-count % START_BLOCK, starts[-1])]).astype(int)
    x0 = np.concatenate([np.asarray(log.q)[padded], np.asarray(log.qd)[padded]], axis=1)
    stages = np.asarray(stage_torques(log.tau))
    torques = stages[padded[:, None] + np.arange(steps)]
    states = simulate_segments_jit(
        regressor, jnp.asarray(theta), jnp.asarray(x0), jnp.asarray(torques), log.sample_step, known, int(substeps)
    )
    return np.asarray(states)[:count]


#: ``free_simulation`` pads its starts to a multiple of this (one compiled shape for runs of similar length).
START_BLOCK = 32


def simulation_starts(log: FilteredLog, longest_s: float, start_every_s: float) -> tuple[np.ndarray, int]:
    """Start indices and the number of steps of the longest horizon (see the module docstring)."""
    h = log.sample_step
    steps = int(round(longest_s / h))
    every = max(1, int(round(start_every_s / h)))
    sl = log.usable
    starts = np.arange(sl.start, sl.stop - steps, every)
    if starts.size == 0:
        raise ValueError(f"{log.name}: the usable part is shorter than the {longest_s} s horizon.")
    return starts, steps


def free_simulation_rmse(
    log: FilteredLog,
    regressor: Regressor,
    theta,
    horizons_s: Sequence[float] = (0.5, 1.0, 2.0),
    start_every_s: float = 1.0,
    substeps: int | None = None,
) -> dict[float, np.ndarray]:
    """``{H: per-joint angle RMSE [rad]}`` of free simulations (module docstring); ``substeps``: as
    ``free_simulation``'s."""
    starts, steps = simulation_starts(log, max(horizons_s), start_every_s)
    states = free_simulation(log, regressor, theta, starts, steps, substeps)
    meas = np.asarray(log.q_raw)[starts[:, None] + np.arange(steps + 1)]
    joints = log.joints
    err = states[..., :joints] - meas
    out = {}
    for horizon in horizons_s:
        n = int(round(horizon / log.sample_step)) + 1
        e = err[:, :n]
        out[float(horizon)] = (
            np.sqrt(np.mean(e.reshape(-1, joints) ** 2, axis=0)) if np.all(np.isfinite(e)) else np.full(joints, np.inf)
        )
    return out


def frequency_lines(x: np.ndarray, sample_step: float, fundamental_hz: float, harmonics: int) -> np.ndarray:
    """Complex phasors ``(harmonics, C)`` of ``x`` (``(N, C)``) at ``k · fundamental_hz``.

    Least squares on the largest whole number of fundamental periods from the start of ``x``.
    Raises ``ValueError`` if ``x`` is shorter than one period.
    """
    x = np.asarray(x, dtype=float)
    n_per = 1.0 / (fundamental_hz * sample_step)
    # A record of exactly whole periods (the lowest periodogram bin is N / n_per = 1 period) must count
    # them all: n_per = N (1 + 1e-16) after rounding would floor to no period at all.
    periods = int(np.floor(x.shape[0] / n_per * (1 + 1e-9)))
    if periods < 1:
        raise ValueError(
            f"the record ({x.shape[0]} samples) is shorter than one period of the fundamental "
            f"({fundamental_hz:.6g} Hz, {n_per:.6g} samples)."
        )
    n = min(int(round(periods * n_per)), x.shape[0])
    t = np.arange(n) * sample_step
    w = 2 * np.pi * fundamental_hz * np.arange(1, harmonics + 1)
    basis = np.concatenate([np.ones((n, 1)), np.cos(t[:, None] * w), np.sin(t[:, None] * w)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, x[:n], rcond=None)
    c, d = coef[1 : 1 + harmonics], coef[1 + harmonics :]
    return c - 1j * d


def residual_spectrum(residual: np.ndarray, sample_step: float, segment: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Welch PSD ``(frequencies [Hz], psd [(N m)²/Hz] of shape (F, C))`` of a torque residual.

    ``segment``: Welch's segment length in samples (shortened to the record's); runs of different
    lengths given the same ``segment`` (at most the shortest run's length) share one frequency grid.
    """
    residual = np.asarray(residual, dtype=float)
    nper = min(int(segment), residual.shape[0])
    from scipy import signal  # imported when first needed: scipy takes ~0.9 s to import

    return signal.welch(residual, fs=1.0 / sample_step, nperseg=nper, axis=0)
