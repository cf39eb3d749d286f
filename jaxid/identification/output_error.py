"""Time-domain output error with multiple shooting on measured logs.

Simulate the model ``Y(q, q', q'') θ = τ`` under the measured (low-passed) torque and fit the
measured angles. One simulation over a whole 10-s record of a lightly damped, chaotic double
pendulum is not a well-posed fit (the sensitivity to ``θ`` grows exponentially), so the usable
part of each log is cut into segments of ``segment_s`` seconds, each with its **own initial state**
``x_s = (q, q')`` (unknowns, started at the filtered measured state). The residual vector holds

- the angle errors ``(q_sim − q_meas) / σ_j`` every ``stride`` samples of every segment (the
  segment's first sample included, its end excluded: that is the next segment's start), with
  ``σ_j`` the per-joint standard deviation of the measured angle about its filtered value;
- the continuity gaps between consecutive segments of the same log,
  ``w · ((q_end − q_next)/σ, (q'_end − q'_next) · T_seg/σ)`` (a velocity gap times the segment
  length is the angle error it would cause), with ``w = continuity_weight``.

Solved by a trust-region Gauss–Newton/Levenberg–Marquardt method (``scipy.optimize.least_squares``,
``trf``, Jacobian-scaled) on the exact Jacobian from ``jax.jacfwd``; each segment's block depends
only on ``θ`` and its own ``x_s``, so it is computed with ``2 n + p`` tangents under ``vmap``
(``n`` joints: the state ``x_s`` has ``2 n`` entries).
Started from IDIM-LS. The covariance ``σ̂² (JᵀJ)⁻¹`` (``θ`` block) treats the residuals as white,
i.e. it ignores the model error that colours them: a lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .data import FilteredLog, Known, Regressor, simulate_segments, stage_torques
from .idim import Identification, segment_starts

__all__ = ["output_error", "angle_noise_std"]


def angle_noise_std(logs: Sequence[FilteredLog], floor: float = 1e-5) -> np.ndarray:
    """Per-joint std [rad] of the measured angle about its filtered value (usable samples)."""
    diffs = [np.asarray(d.q_raw - d.q)[d.usable] for d in logs]
    return np.maximum(np.std(np.concatenate(diffs), axis=0), floor)


def output_error(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification,
    segment_s: float = 0.5,
    stride: int = 5,
    continuity_weight: float = 100.0,
    max_iterations: int = 50,
    known: Known | None = None,
) -> Identification:
    """Multiple-shooting output error (see the module docstring).

    Args:
        logs: filtered logs sharing one ``sample_step``. regressor, names: the model.
        start: the starting estimate (IDIM-LS). segment_s: segment length [s].
        stride: angle residuals every ``stride`` samples. continuity_weight: ``w``.
        max_iterations: Jacobian evaluations allowed to the solver.
        known: torque of fixed parameters (default none).

    Returns an ``Identification`` whose ``residual_std`` is the per-joint angle RMS error [rad]
    and whose ``notes`` state the largest continuity gap. Raises ``ValueError`` for logs with
    different steps.
    """
    names = tuple(names)
    p = len(names)
    h = logs[0].sample_step
    if any(abs(d.sample_step - h) > 1e-12 * h for d in logs):
        raise ValueError("output_error needs logs on one time grid; load them with the same sample_step.")
    length = max(stride, int(round(segment_s / h)))
    n = logs[0].joints
    sigma = angle_noise_std(logs)
    x0s, torques, meas, links = [], [], [], []
    offset = 0
    for d in logs:
        starts = segment_starts(d, length)
        q, qd = np.asarray(d.q), np.asarray(d.qd)
        x0s.append(np.concatenate([q[starts], qd[starts]], axis=1))
        stages = np.asarray(stage_torques(d.tau))
        torques.append(stages[starts[:, None] + np.arange(length)])
        meas.append(np.asarray(d.q_raw)[starts[:, None] + np.arange(0, length, stride)])
        links.extend((offset + i, offset + i + 1) for i in range(len(starts) - 1))
        offset += len(starts)
    x0 = np.concatenate(x0s)
    torques = jnp.asarray(np.concatenate(torques))
    meas = jnp.asarray(np.concatenate(meas))  # (S, K, n)
    segments = x0.shape[0]
    links = np.asarray(links, dtype=int).reshape(-1, 2)
    scale_c = np.concatenate([1 / sigma, length * h / sigma]) * continuity_weight

    def segment(theta, y0, tau_s, q_s):
        states = simulate_segments(regressor, theta, y0[None], tau_s[None], h, known)[0]
        res = (states[:-1:stride, :n] - q_s) / sigma
        return res.reshape(-1), states[-1]

    def blocks(theta, y0s):
        res, ends = jax.vmap(segment, (None, 0, 0, 0))(theta, y0s, torques, meas)
        jac = jax.vmap(jax.jacfwd(segment, argnums=(0, 1)), (None, 0, 0, 0))(theta, y0s, torques, meas)
        return res, ends, jac

    blocks = jax.jit(blocks)
    cache = {}

    def evaluate(z):
        key = z.tobytes()
        if key not in cache:
            cache.clear()
            theta, y0s = z[:p], z[p:].reshape(segments, 2 * n)
            cache[key] = jax.tree.map(np.asarray, blocks(jnp.asarray(theta), jnp.asarray(y0s)))
        return cache[key]

    k = meas.shape[1] * n
    m = 2 * n  # state entries per segment
    n_rows = segments * k + m * len(links)

    def fun(z):
        res, ends, _ = evaluate(z)
        y0s = z[p:].reshape(segments, m)
        gaps = (ends[links[:, 0]] - y0s[links[:, 1]]) * scale_c
        return np.concatenate([res.reshape(-1), gaps.reshape(-1)])

    def jac(z):
        _, _, ((r_theta, r_y0), (e_theta, e_y0)) = evaluate(z)
        out = np.zeros((n_rows, p + m * segments))
        for s in range(segments):
            rows = slice(s * k, (s + 1) * k)
            out[rows, :p] = r_theta[s]
            out[rows, p + m * s : p + m * s + m] = r_y0[s]
        base = segments * k
        for i, (a, b) in enumerate(links):
            rows = slice(base + m * i, base + m * i + m)
            out[rows, :p] = e_theta[a] * scale_c[:, None]
            out[rows, p + m * a : p + m * a + m] = e_y0[a] * scale_c[:, None]
            out[rows, p + m * b : p + m * b + m] = -np.diag(scale_c)
        return out

    z0 = np.concatenate([np.asarray(start.value), x0.reshape(-1)])
    from scipy.optimize import least_squares  # imported when first needed: scipy takes ~0.9 s to import

    sol = least_squares(fun, z0, jac=jac, method="trf", x_scale="jac", max_nfev=max_iterations, xtol=1e-10)
    z = sol.x
    j = jac(z)
    r = fun(z)
    dof = max(r.size - z.size, 1)
    s2 = float(r @ r) / dof
    col = np.linalg.norm(j, axis=0)
    col = np.where(col > 0, col, 1.0)
    js = j / col
    u, s, vt = np.linalg.svd(js, full_matrices=False)
    inv = (vt.T / s**2) @ vt / np.outer(col, col)
    cov = s2 * inv[:p, :p]
    # Rank/condition of the parameter block after eliminating the initial states (Schur complement).
    info = j.T @ j
    a_, b_, c_ = info[:p, :p], info[:p, p:], info[p:, p:]
    reduced = a_ - b_ @ np.linalg.solve(c_, b_.T)
    d = np.sqrt(np.abs(np.diag(reduced)))
    d = np.where(d > 0, d, 1.0)
    ev = np.linalg.eigvalsh(reduced / np.outer(d, d))
    rank = int(np.sum(ev > ev.max() * 1e-14))
    cond = float(np.sqrt(ev.max() / max(ev.min(), 1e-300)))
    res_blocks = r[: segments * k].reshape(segments, -1, n) * sigma
    gaps = r[segments * k :].reshape(-1, m) / scale_c if len(links) else np.zeros((0, m))
    gap_q = float(np.abs(gaps[:, :n]).max()) if gaps.size else 0.0
    gap_v = float(np.abs(gaps[:, n:]).max()) if gaps.size else 0.0
    notes = (
        f"{segments} segments of {length * h:.3g} s; largest continuity gap {gap_q:.2e} rad, {gap_v:.2e} rad/s; "
        f"solver: {sol.message}"
    )
    return Identification(
        "output_error",
        names,
        z[:p],
        cov,
        rank,
        cond,
        np.sqrt(np.mean(res_blocks.reshape(-1, n) ** 2, axis=0)),
        int(res_blocks.shape[0] * res_blocks.shape[1]),
        int(sol.njev),
        notes,
    )
