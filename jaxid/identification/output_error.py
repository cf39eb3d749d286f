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
(``n`` joints: the state ``x_s`` has ``2 n`` entries), the residuals being the same pass's primal.
The tangents go through the accelerations' custom JVP (``jaxid.identification.data.accelerations``:
two small matrix products per tangent, the model's torque Jacobian taken once per stage by reverse
mode) and through one copy of the model per step (``model_step``). The blocks are one compiled
program per model (``regressor`` and ``known`` static, hashed by identity), step, stride and
shapes: every solver iteration, and every later call on logs of the same shapes (the trials of a
benchmark setting), reuses it.
Started from IDIM-LS. The covariance ``σ̂² (JᵀJ)⁻¹`` (``θ`` block) treats the residuals as white,
i.e. it ignores the model error that colours them: a lower bound.

**Another parametrisation** (``parametrisation = g``, ``start_z``): the solver moves ``z`` and the
initial states, with ``θ = g(z)`` and the ``θ`` columns of the Jacobian times ``∂g/∂z``; the
result is ``g(ẑ)``, its covariance, rank and condition those of the ``θ`` problem at ``g(ẑ)``. With
``g`` the base values of ``jaxid.consistency.standard_from_unconstrained(z)`` (``z`` the ``14 n``
log-Cholesky / log coordinates of a ``SerialArm``'s standard parameters) every iterate is the model
of a physically consistent arm: physically consistent output error. ``z`` may hold directions ``θ``
does not see (``14 n`` against ``p`` base parameters); the trust region keeps their steps small.
Started on the consistent set's boundary (some coordinates near ``−∞``, as a consistent
least-squares fit often ends), those coordinates have vanishing gradients: start from a point
projected inside (``jaxid.consistency.project_to_consistent`` with a ``floor``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

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
    start: Identification | None = None,
    segment_s: float = 0.5,
    stride: int = 5,
    continuity_weight: float = 100.0,
    max_iterations: int = 50,
    known: Known | None = None,
    parametrisation: Callable[[Array], Array] | None = None,
    start_z: ArrayLike | None = None,
    return_z: bool = False,
) -> Identification | tuple[Identification, np.ndarray]:
    """Multiple-shooting output error (see the module docstring).

    Args:
        logs: filtered logs sharing one ``sample_step``. regressor, names: the model.
        start: the starting estimate (IDIM-LS); required unless a ``parametrisation`` is given.
        segment_s: segment length [s].
        stride: angle residuals every ``stride`` samples. continuity_weight: ``w``.
        max_iterations: Jacobian evaluations allowed to the solver.
        known: torque of fixed parameters (default none).
        parametrisation: ``z -> θ`` (pure JAX, ``(k,) -> (p,)``): fit ``z`` instead of ``θ`` (module
            docstring), e.g. ``θ`` = the base values of ``standard_from_unconstrained(z)`` for
            physically consistent output error. Hashed by identity: pass the same function to reuse
            its compiled Jacobian. start_z: the start of ``z``, ``(k,)``; required with a
            ``parametrisation`` (then ``start`` is not used).
        return_z: also return the fitted ``z`` (``θ`` without a parametrisation), e.g. to check or
            report the standard parameters of a consistent fit.

    Returns an ``Identification`` (with ``return_z``: ``(Identification, z)``) of ``θ`` (of ``θ(z)`` with a parametrisation) whose ``residual_std``
    is the per-joint angle RMS error [rad] and whose ``notes`` state the largest continuity gap; its
    covariance, rank and condition are those of the ``θ`` problem at the solution. Raises
    ``ValueError`` for logs with different steps, a missing start, or a parametrisation whose output
    does not have ``len(names)`` entries.
    """
    names = tuple(names)
    p = len(names)
    h = logs[0].sample_step
    if any(abs(d.sample_step - h) > 1e-12 * h for d in logs):
        raise ValueError("output_error needs logs on one time grid; load them with the same sample_step.")
    if parametrisation is None:
        if start is None:
            raise ValueError("output_error needs start= (e.g. the IDIM-LS estimate).")
        if start_z is not None:
            raise ValueError(
                "output_error: start_z goes with a parametrisation; pass parametrisation= or drop start_z."
            )
        z_start = np.asarray(start.value, dtype=float)
    else:
        if start_z is None:
            raise ValueError("output_error: a parametrisation needs start_z= (the start of its argument z).")
        z_start = np.asarray(start_z, dtype=float).reshape(-1)
        shape = jax.eval_shape(parametrisation, jax.ShapeDtypeStruct(z_start.shape, z_start.dtype)).shape
        if shape != (p,):
            raise ValueError(
                f"output_error: parametrisation(z) has shape {shape}; it must give the {p} parameters {names[:3]}...."
            )
    q_dim = z_start.size  # the fitted parameter vector: θ, or z
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
    sigma_j = jnp.asarray(sigma)

    cache = {}

    def evaluate(z):
        """Residual blocks, segment ends and their Jacobians in ``θ`` and ``x_s`` at ``z``; with a
        parametrisation also ``θ(z)`` and ``∂θ/∂z``."""
        key = z.tobytes()
        if key not in cache:
            cache.clear()
            par, y0s = z[:q_dim], z[q_dim:].reshape(segments, 2 * n)
            if parametrisation is None:
                theta, dtheta = par, None
            else:
                theta, dtheta = map(np.asarray, _parametrise(jnp.asarray(par), parametrisation=parametrisation))
            out = _shooting_blocks(
                jnp.asarray(theta),
                jnp.asarray(y0s),
                torques,
                meas,
                sigma_j,
                regressor=regressor,
                known=known,
                sample_step=h,
                stride=stride,
            )
            cache[key] = (*jax.tree.map(np.asarray, out), theta, dtheta)
        return cache[key]

    k = meas.shape[1] * n
    m = 2 * n  # state entries per segment
    n_rows = segments * k + m * len(links)

    def fun(z):
        res, ends, *_ = evaluate(z)
        y0s = z[q_dim:].reshape(segments, m)
        gaps = (ends[links[:, 0]] - y0s[links[:, 1]]) * scale_c
        return np.concatenate([res.reshape(-1), gaps.reshape(-1)])

    def jacobian(z, in_theta=False):
        """The Jacobian in ``(z, x_s)`` (in ``(θ, x_s)`` with ``in_theta``: the θ problem's)."""
        _, _, r_theta, r_y0, e_theta, e_y0, _, dtheta = evaluate(z)
        if dtheta is not None and not in_theta:
            r_theta, e_theta = r_theta @ dtheta, e_theta @ dtheta
        width = r_theta.shape[-1]
        out = np.zeros((n_rows, width + m * segments))
        for s in range(segments):
            rows = slice(s * k, (s + 1) * k)
            out[rows, :width] = r_theta[s]
            out[rows, width + m * s : width + m * s + m] = r_y0[s]
        base = segments * k
        for i, (a, b) in enumerate(links):
            rows = slice(base + m * i, base + m * i + m)
            out[rows, :width] = e_theta[a] * scale_c[:, None]
            out[rows, width + m * a : width + m * a + m] = e_y0[a] * scale_c[:, None]
            out[rows, width + m * b : width + m * b + m] = -np.diag(scale_c)
        return out

    z0 = np.concatenate([z_start, x0.reshape(-1)])
    from scipy.optimize import least_squares  # imported when first needed: scipy takes ~0.9 s to import

    sol = least_squares(fun, z0, jac=jacobian, method="trf", x_scale="jac", max_nfev=max_iterations, xtol=1e-10)
    z = sol.x
    theta_hat = z[:p] if parametrisation is None else np.asarray(evaluate(z)[6])
    j = jacobian(z, in_theta=True)
    r = fun(z)
    dof = max(r.size - j.shape[1], 1)
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
    est = Identification(
        "output_error",
        names,
        theta_hat,
        cov,
        rank,
        cond,
        np.sqrt(np.mean(res_blocks.reshape(-1, n) ** 2, axis=0)),
        int(res_blocks.shape[0] * res_blocks.shape[1]),
        int(sol.njev),
        notes,
        # scipy: 0 = the evaluation budget ran out, 1-4 = a tolerance met, -1 = failed.
        {0: "max_iterations", -1: "failed"}.get(int(sol.status), "ok"),
    )
    return (est, z[:q_dim].copy()) if return_z else est


@functools.partial(jax.jit, static_argnames=("parametrisation",))
def _parametrise(z, *, parametrisation):
    """``(θ(z), ∂θ/∂z)``; compiled once per parametrisation (static, hashed by identity)."""

    def twice(x):
        theta = parametrisation(x)
        return theta, theta

    jac, theta = jax.jacfwd(twice, has_aux=True)(z)
    return theta, jac


@functools.partial(jax.jit, static_argnames=("regressor", "known", "sample_step", "stride"))
def _shooting_blocks(theta, initial_states, torques, measured, sigma, *, regressor, known, sample_step, stride):
    """Every segment's residual block, end state and their Jacobians in ``θ`` and its initial state.

    ``(res (S, K n), ends (S, 2 n), ∂res/∂θ (S, K n, p), ∂res/∂x_s (S, K n, 2 n), ∂end/∂θ, ∂end/∂x_s)``;
    one forward-mode pass per segment (``2 n + p`` tangents, ``vmap`` over segments) gives the values
    as its primal. Compiled once per model (``regressor``, ``known``: static, hashed by identity), step,
    stride and shapes: every iteration and every log of the same shapes share one program."""
    n = initial_states.shape[-1] // 2

    def segment(theta, y0, tau_s, q_s):
        states = simulate_segments(regressor, theta, y0[None], tau_s[None], sample_step, known)[0]
        res = (states[:-1:stride, :n] - q_s) / sigma
        out = (res.reshape(-1), states[-1])
        return out, out

    jac, (res, ends) = jax.vmap(jax.jacfwd(segment, argnums=(0, 1), has_aux=True), (None, 0, 0, 0))(
        theta, initial_states, torques, measured
    )
    (r_theta, r_y0), (e_theta, e_y0) = jac
    return res, ends, r_theta, r_y0, e_theta, e_y0
