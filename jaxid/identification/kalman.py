"""The EKF/UKF on measured logs: augmented state ``(q, q', θ)`` (``2 n + p``), the model of the regressor.

The generic filters of ``jaxid.kalman`` run with this transition: one RK4 step
(``jaxid.identification.data.model_step``) of ``Y(q, q', q'') θ = τ`` per sample under the low-passed
measured torque at the stages ``t, t + Δ/2, t + Δ``; ``θ`` constant (no random walk). The
emissions are the measured (resampled, unfiltered) angles.

Noise model (stated, not tuned on held-out data): measurement std ``measurement_std`` [rad]
(default: the angle noise about the filtered angle, at least 1e-3 rad — the model error of a real
arm dwarfs the encoder noise, and a filter told otherwise becomes overconfident); velocity
process noise ``velocity_process_std`` [rad/s per step] (default 0.01). The logs are processed in
turn, the parameter mean and covariance of one log's end the prior of the next; the first prior
is the start estimate with std ``max(initial_relative_std · |θ|, 10 · its std)``.

Speed: one log is one compiled program (``_filter_log``: the model static, hashed by identity; the
data, start and noise levels traced), so the logs of a benchmark setting's trials compile once; the
EKF's transition Jacobian goes through the accelerations' custom JVP and one copy of the model per
step (``jaxid.identification.data``), and ``jaxid.kalman`` traces the transition once per step.

Standard deviations: the final filtered covariance of ``θ`` — exact only for a linear-Gaussian
model with the stated noise; it ignores linearisation error and the model error.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..kalman import extended_kalman_filter, unscented_kalman_filter
from .data import FilteredLog, Known, Regressor, model_step, stage_torques
from .idim import Identification
from .output_error import angle_noise_std

__all__ = ["kalman_filter_fit"]


def kalman_filter_fit(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification,
    kind: str = "ekf",
    measurement_std: float | None = None,
    velocity_process_std: float = 0.01,
    initial_relative_std: float = 0.3,
    known: Known | None = None,
) -> Identification:
    """Run the EKF (``kind="ekf"``) or UKF (``"ukf"``) over the logs in turn (module docstring).

    ``known``: torque of fixed parameters (default none). Raises ``ValueError`` if the filter diverges.
    """
    if kind not in ("ekf", "ukf"):
        raise ValueError(f"kind must be 'ekf' or 'ukf', got {kind!r}.")
    names = tuple(names)
    p = len(names)
    n = logs[0].joints
    m = 2 * n  # the state (q, q')
    h = logs[0].sample_step
    if any(abs(d.sample_step - h) > 1e-12 * h for d in logs):
        raise ValueError(f"{kind} needs logs on one time grid; load them with the same sample_step.")
    if measurement_std is None:
        r_std = np.maximum(angle_noise_std(logs), 1e-3)
    else:
        r_std = np.full(n, float(measurement_std))

    theta = np.asarray(start.value)
    cov = np.diag(np.maximum(initial_relative_std * np.abs(theta), 10 * start.std) ** 2)
    resid = []
    for d in logs:
        sl = d.usable
        y = np.asarray(d.q_raw)[sl]
        stages = np.asarray(stage_torques(d.tau))[sl.start : sl.stop]
        if stages.shape[0] < y.shape[0]:
            stages = np.concatenate([stages, stages[-1:]], axis=0)
        mean, full_cov, filtered_q = _filter_log(
            jnp.asarray(theta),
            jnp.asarray(cov),
            jnp.asarray(y),
            jnp.asarray(stages),
            d.q[sl.start],
            d.qd[sl.start],
            jnp.asarray(r_std),
            jnp.asarray(float(velocity_process_std)),
            regressor=regressor,
            known=known,
            kind=kind,
            sample_step=h,
        )
        mean, full_cov = np.asarray(mean), np.asarray(full_cov)
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(full_cov))):
            raise ValueError(
                f"{kind}: the filter diverged on {d.name} (its state or covariance left the finite range); start it "
                f"closer (estimators.{kind}.initial_relative_std, now {initial_relative_std:g}, smaller), trust the "
                f"model less (estimators.{kind}.velocity_process_std, now {velocity_process_std:g} rad/s, larger), or "
                'start from a physically consistent estimate (estimators.use with "idim_ls_consistent").'
            )
        theta, cov = mean[m:], full_cov[m:, m:]
        resid.append(np.asarray(filtered_q) - y)
    resid = np.concatenate(resid)
    d_ = np.sqrt(np.diag(cov))
    ev = np.linalg.eigvalsh(cov / np.outer(d_, d_))
    return Identification(
        kind,
        names,
        theta,
        cov,
        p,
        float(np.sqrt(ev.max() / max(ev.min(), 1e-300))),
        np.sqrt(np.mean(resid**2, axis=0)),
        int(resid.shape[0]),
        len(logs),
        f"measurement std {r_std.round(6).tolist()} rad, velocity process std {velocity_process_std} rad/s/step; "
        "condition: of the posterior correlation of θ; residual: filtered − measured angle",
    )


@functools.partial(jax.jit, static_argnames=("regressor", "known", "kind", "sample_step"))
def _filter_log(theta, cov, emissions, stages, q0, qd0, r_std, velocity_std, *, regressor, known, kind, sample_step):
    """One log through the filter: the final mean and covariance of ``(q, q', θ)`` and the filtered
    angles. Compiled once per model (``regressor``, ``known``: static, hashed by identity), filter,
    step and log length; the data, the start and the noise levels are traced, so the logs of a
    benchmark's trials share one program."""
    n = q0.shape[0]
    m = 2 * n
    p = theta.shape[0]

    def f(x, u):
        th = x[m:]
        y = model_step(regressor, th, x[:m], u, sample_step, known)
        return jnp.concatenate([y, th])

    def emit(x):
        return x[:n]

    run = extended_kalman_filter if kind == "ekf" else unscented_kalman_filter
    m0 = jnp.concatenate([q0, qd0, theta])
    p0 = jnp.zeros((m + p, m + p)).at[m:, m:].set(cov)
    p0 = p0.at[jnp.arange(n), jnp.arange(n)].set(r_std**2).at[jnp.arange(n, m), jnp.arange(n, m)].set(0.1**2)
    q = jnp.zeros((m + p, m + p)).at[jnp.arange(n, m), jnp.arange(n, m)].set(velocity_std**2)
    result = run(f, emit, q, jnp.diag(r_std**2), m0, p0, emissions, stages)
    return result.final_mean, result.final_covariance, result.filtered_means[:, :n]
