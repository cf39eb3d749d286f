"""Extended (and unscented) Kalman filter baselines with the parameters in the state.

The generic filters ``extended_kalman_filter`` and ``unscented_kalman_filter`` (and
``FilterResult``) live in ``jaxid.estimate.kalman.filters``. The arm estimators
``ekf`` and ``ukf`` run them on the augmented state ``x = (q1, q2, q1', q2', θ)``:

- dynamics: one classic RK4 step of the nonlinear arm (parameters ``θ`` set into ``nominal``)
  per sampling interval ``Δ``; the torque at the RK4 stages ``t, t + Δ/2, t + Δ`` is the
  applied ``excitation`` plus the constant offset ``tau0`` read from the record (exact, as in the
  simulator); ``θ`` is a random walk with per-step standard deviation
  ``parameter_process_std · |θ_guess|`` (default 0: constant parameters, the filter is then a
  recursive approximation of the maximum a posteriori estimate). Process noise on the velocity,
  ``velocity_process_std`` [rad/s per step], absorbs linearisation error (default ``1e-4``; the
  RK4 discretisation error itself is ~1e-10 rad here);
- measurements: the two angles, minus ``measurement_offset`` [rad], with ``R = σ² I`` from
  ``noise_std`` if given, else estimated per joint from the noise floor of the record's spectrum
  (``jaxid.measure.derivatives.noise_variance``). The filter assumes zero-mean noise: the paper's
  uniform noise has mean 0.05 rad, which the caller must pass as ``measurement_offset`` if it is
  known (the study passes ``noise_mean``); otherwise it biases the estimate (gravity sees it);
- start: ``q`` from the first measurement (std ``σ``), ``q' = 0`` with std
  ``initial_velocity_std`` (5 rad/s: the filter is causal, it does not peek at the record to
  initialise the velocity), ``θ`` from ``initial_guess`` (default ``initial_factor = 1.3`` times
  the nominal values of the unknowns: a prior guess 30 % off, never the truth) with relative std
  ``initial_relative_std`` (0.3). Tuning (docs/estimators.md): with a velocity prior of 1 rad/s the
  first second's innovations (the arm moves at a few rad/s at scale 1) were absorbed by ``θ`` and
  2/50 trials locked onto a wrong solution; 5 rad/s and 0.3 fixed that on 2 × 50 trials;
- output: ``value`` and ``covariance`` are the final filtered mean and covariance of ``θ``;
  ``history`` is the filtered ``θ`` at ``history_indices(M, history_points)``. Status ``FAILED``
  if anything is non-finite (e.g. a parameter estimate drove the mass matrix singular).

Static options: ``unknowns``, ``history_points``, and the UKF's ``alpha, beta, kappa``; the noise
levels, guesses and offsets are traced. ``jit``/``vmap``-compatible.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from ...excitation.multisine import Multisine
from ...measure.derivatives import noise_variance
from ...model import TwoLinkArm, forward_dynamics, validate_unknowns
from ...simulation.integrate import applied_offset, rk4_step, torque_grid
from ...simulation.open_loop import Record
from ..base import CONVERGED, FAILED, Estimate, register
from ..regression import history_indices
from .filters import extended_kalman_filter, unscented_kalman_filter

__all__ = ["ekf", "ukf", "arm_transition"]


# -- the arm as a state-space model ---------------------------------------------------------------


def arm_transition(nominal: TwoLinkArm, unknowns: Sequence[str], sample_step: float):
    """``f(x, u)``: one RK4 step of length ``Δ`` of the augmented state ``(q, q', θ)``.

    ``u`` is ``(3, 2)``: the torques [N m] at ``t``, ``t + Δ/2``, ``t + Δ``. ``θ`` is carried
    unchanged (its random walk is in ``Q``).
    """
    unknowns = tuple(unknowns)

    def f(x, u):
        theta = x[4:]
        arm = nominal.with_parameters(unknowns, theta)

        def field(y, tau):
            return jnp.concatenate([y[2:], forward_dynamics(arm, y[:2], y[2:], tau)])

        return jnp.concatenate([rk4_step(field, x[:4], u, sample_step), theta])

    return f


def _stage_torques(record: Record, excitation: Multisine):
    # tau(t) = tau0 + u(t) at the RK4 stages of each sampling interval: the simulator's torque grid
    # (whole periods from a period boundary), with tau0 read from the record.
    offset = applied_offset(record, excitation)
    grid = torque_grid(excitation, record.sample_step, record.samples_per_period)
    return offset + excitation.scale * jnp.tile(grid, (record.measured_periods, 1, 1))  # (M, 3, 2)


def _measurement_variance(record, excitation, noise_std):
    if noise_std is not None:
        var = jnp.asarray(noise_std, dtype=record.q.dtype) ** 2
        return jnp.broadcast_to(var, (2,))
    n_per = record.samples_per_period
    above = min(4 * excitation.max_harmonic, n_per // 4)
    return noise_variance(record.q, record.measured_periods, above=above)


def _arm_filter(
    kind,
    record,
    excitation,
    nominal,
    *,
    unknowns,
    noise_std,
    measurement_offset,
    initial_guess,
    initial_factor,
    initial_relative_std,
    initial_velocity_std,
    velocity_process_std,
    parameter_process_std,
    history_points,
    **filter_options,
):
    unknowns = validate_unknowns(unknowns)
    p = len(unknowns)
    if initial_guess is None:
        theta0 = nominal.parameter_vector(unknowns) * initial_factor
    else:
        theta0 = jnp.asarray(initial_guess, dtype=float)
        if theta0.shape != (p,):
            raise ValueError(f"initial_guess must have shape ({p},) for {list(unknowns)}, got {theta0.shape}.")
    dtype = record.q.dtype
    y = record.q - jnp.asarray(measurement_offset, dtype=dtype)
    r_var = _measurement_variance(record, excitation, noise_std)
    R = jnp.diag(r_var)
    m0 = jnp.concatenate([y[0], jnp.zeros(2, dtype), theta0])
    p0_diag = jnp.concatenate(
        [r_var, jnp.full(2, initial_velocity_std**2), (initial_relative_std * jnp.abs(theta0)) ** 2]
    )
    P0 = jnp.diag(p0_diag)
    q_diag = jnp.concatenate(
        [
            jnp.zeros(2, dtype),
            jnp.full(2, velocity_process_std**2),
            (parameter_process_std * jnp.abs(theta0)) ** 2,
        ]
    )
    Q = jnp.diag(q_diag)
    f = arm_transition(nominal, unknowns, record.sample_step)

    def h(x):
        return x[:2]

    run = extended_kalman_filter if kind == "ekf" else unscented_kalman_filter
    result = run(f, h, Q, R, m0, P0, y, _stage_torques(record, excitation), **filter_options)
    value = result.final_mean[4:]
    covariance = result.final_covariance[4:, 4:]
    idx = history_indices(y.shape[0], history_points)
    history = result.filtered_means[idx, 4:]
    finite = jnp.all(jnp.isfinite(value)) & jnp.all(jnp.isfinite(covariance)) & jnp.all(jnp.isfinite(history))
    status = jnp.where(finite, CONVERGED, FAILED).astype(jnp.int32)
    return Estimate(value, covariance, status, unknowns, history)


_ARM_FILTER_DOC = """
    Args:
        record, excitation, nominal, unknowns, q0, noise_std: the common estimator interface
            (``q0`` is not needed: the torque offset is read from the record). Any parameter of
            ``jaxid.model.PARAMETER_NAMES`` may be unknown (the state model is the full
            nonlinear arm, so lengths work too).
        measurement_offset: known mean of the angle noise [rad], subtracted from the angles.
        initial_guess: ``(p,)`` prior mean of ``θ``; default ``initial_factor ×`` nominal values.
        initial_relative_std: prior std of ``θ`` relative to ``|initial_guess|``.
        initial_velocity_std: prior std of ``q'(t_0)`` [rad/s] (the prior mean is 0).
        velocity_process_std: per-step process noise std on ``q'`` [rad/s].
        parameter_process_std: per-step random-walk std of ``θ`` relative to ``|initial_guess|``.
        history_points: static number of points in ``Estimate.history``.
"""


@register("ekf")
def ekf(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: ArrayLike = (0.0, 0.0),
    noise_std: ArrayLike | None = None,
    measurement_offset: ArrayLike = 0.0,
    initial_guess: ArrayLike | None = None,
    initial_factor: float | Array = 1.3,
    initial_relative_std: float | Array = 0.3,
    initial_velocity_std: float | Array = 5.0,
    velocity_process_std: float | Array = 1e-4,
    parameter_process_std: float | Array = 0.0,
    history_points: int = 200,
) -> Estimate:
    return _arm_filter(
        "ekf",
        record,
        excitation,
        nominal,
        unknowns=unknowns,
        noise_std=noise_std,
        measurement_offset=measurement_offset,
        initial_guess=initial_guess,
        initial_factor=initial_factor,
        initial_relative_std=initial_relative_std,
        initial_velocity_std=initial_velocity_std,
        velocity_process_std=velocity_process_std,
        parameter_process_std=parameter_process_std,
        history_points=history_points,
    )


ekf.__doc__ = "EKF on the augmented state ``(q, q', θ)`` (see the module docstring)." + _ARM_FILTER_DOC


@register("ukf")
def ukf(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: ArrayLike = (0.0, 0.0),
    noise_std: ArrayLike | None = None,
    measurement_offset: ArrayLike = 0.0,
    initial_guess: ArrayLike | None = None,
    initial_factor: float | Array = 1.3,
    initial_relative_std: float | Array = 0.3,
    initial_velocity_std: float | Array = 5.0,
    velocity_process_std: float | Array = 1e-4,
    parameter_process_std: float | Array = 0.0,
    history_points: int = 200,
    alpha: float = 1.0,
    beta: float = 2.0,
    kappa: float = 0.0,
) -> Estimate:
    return _arm_filter(
        "ukf",
        record,
        excitation,
        nominal,
        unknowns=unknowns,
        noise_std=noise_std,
        measurement_offset=measurement_offset,
        initial_guess=initial_guess,
        initial_factor=initial_factor,
        initial_relative_std=initial_relative_std,
        initial_velocity_std=initial_velocity_std,
        velocity_process_std=velocity_process_std,
        parameter_process_std=parameter_process_std,
        history_points=history_points,
        alpha=alpha,
        beta=beta,
        kappa=kappa,
    )


ukf.__doc__ = (
    "UKF on the augmented state ``(q, q', θ)``, otherwise as ``ekf`` (``alpha, beta, kappa``: "
    "static sigma-point parameters)." + _ARM_FILTER_DOC
)
