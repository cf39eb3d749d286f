"""Extended (and unscented) Kalman filter baselines with the parameters in the state.

The generic cores, in the style of dynamax (pure functions, ``lax.scan`` over small
condition/predict helpers; condition on ``y_n`` first, then predict to ``n + 1``):

- ``extended_kalman_filter(f, h, Q, R, m0, P0, emissions, inputs)`` — first-order EKF with
  Jacobians by ``jax.jacfwd`` and a Joseph-form update; on a linear-Gaussian model it is the
  exact Kalman filter (tested);
- ``unscented_kalman_filter(...)`` — the same interface with the unscented transform.

The arm estimators ``ekf`` and ``ukf`` run them on the augmented state
``x = (q1, q2, q1', q2', θ)``:

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
  (``jaxid.derivatives.noise_variance``). The filter assumes zero-mean noise: the paper's
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

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import linalg
from ..derivatives import noise_variance
from ..excitation import Multisine
from ..integrate import applied_offset, rk4_step, torque_grid
from ..model import TwoLinkArm, forward_dynamics, validate_unknowns
from ..simulation import Record
from .base import CONVERGED, FAILED, Estimate, register
from .rls import history_indices

__all__ = ["FilterResult", "extended_kalman_filter", "unscented_kalman_filter", "ekf", "ukf", "arm_transition"]


class FilterResult(eqx.Module):
    """Output of a Kalman-type filter over ``T`` steps with state dimension ``n``.

    Attributes:
        filtered_means: ``(T, n)`` means after conditioning on ``y_0 … y_t``.
        filtered_covariances: ``(T, n, n)`` or ``None`` (when not requested, to save memory).
        final_mean, final_covariance: the filtered mean ``(n,)`` and covariance ``(n, n)`` at ``T − 1``.
        log_likelihood: ``Σ_t log N(y_t; ŷ_{t|t−1}, S_t)``.
    """

    filtered_means: Float[Array, "T n"]
    filtered_covariances: Float[Array, "T n n"] | None
    final_mean: Float[Array, " n"]
    final_covariance: Float[Array, "n n"]
    log_likelihood: Float[Array, ""]


def _symmetrise(a):
    return 0.5 * (a + a.T)


def _gaussian_log_density(resid, innovation_cov):
    chol = linalg.cholesky(innovation_cov)
    white = linalg.solve_triangular(chol, resid, lower=True)
    return -0.5 * (white @ white) - jnp.sum(jnp.log(jnp.diag(chol))) - 0.5 * resid.shape[0] * jnp.log(2 * jnp.pi)


def _condition(mean, cov, y_pred, cross, innovation_cov, y):
    """Kalman update from the predicted emission moments (shared by the EKF and the UKF).

    ``cross = Cov(x, y)``; returns the conditioned mean and covariance and the log-likelihood.
    """
    gain = linalg.solve(innovation_cov, cross.T).T
    resid = y - y_pred
    mean = mean + gain @ resid
    cov = _symmetrise(cov - gain @ innovation_cov @ gain.T)
    return mean, cov, _gaussian_log_density(resid, innovation_cov)


def _ekf_condition(mean, cov, h, R, y):
    jac = jax.jacfwd(h)(mean)
    innovation_cov = _symmetrise(jac @ cov @ jac.T + R)
    gain = linalg.solve(innovation_cov, jac @ cov).T
    resid = y - h(mean)
    # Joseph form: stays symmetric positive semi-definite in long runs.
    a = jnp.eye(mean.shape[0]) - gain @ jac
    new_cov = _symmetrise(a @ cov @ a.T + gain @ R @ gain.T)
    return mean + gain @ resid, new_cov, _gaussian_log_density(resid, innovation_cov)


def _ekf_predict(mean, cov, f, Q, u):
    jac = jax.jacfwd(f)(mean, u)
    return f(mean, u), _symmetrise(jac @ cov @ jac.T + Q)


def _run_filter(condition, predict, m0, P0, emissions, inputs, return_covariances):
    def step(carry, data):
        mean, cov, log_lik, _, _ = carry
        y, u = data
        filt_mean, filt_cov, dll = condition(mean, cov, y)
        pred_mean, pred_cov = predict(filt_mean, filt_cov, u)
        out = (filt_mean, filt_cov) if return_covariances else filt_mean
        return (pred_mean, pred_cov, log_lik + dll, filt_mean, filt_cov), out

    init = (m0, P0, jnp.zeros((), m0.dtype), m0, P0)
    (_, _, log_lik, final_mean, final_cov), outs = jax.lax.scan(step, init, (emissions, inputs))
    means, covs = outs if return_covariances else (outs, None)
    return FilterResult(means, covs, final_mean, final_cov, log_lik)


def _default_inputs(emissions, inputs):
    if inputs is None:
        return jnp.zeros((emissions.shape[0], 0), emissions.dtype)
    return inputs


def extended_kalman_filter(
    f: Callable[[Array, Array], Array],
    h: Callable[[Array], Array],
    Q: Float[Array, "n n"],
    R: Float[Array, "d d"],
    m0: Float[Array, " n"],
    P0: Float[Array, "n n"],
    emissions: Float[Array, "T d"],
    inputs: Array | None = None,
    *,
    return_covariances: bool = False,
) -> FilterResult:
    """First-order extended Kalman filter.

    Model: ``x_{t+1} = f(x_t, u_t) + w_t``, ``w ~ N(0, Q)``; ``y_t = h(x_t) + v_t``,
    ``v ~ N(0, R)``; ``x_0 ~ N(m0, P0)``. At each ``t`` it conditions on ``y_t`` (Joseph form),
    then predicts with ``u_t``; Jacobians by ``jax.jacfwd``. ``inputs`` is a pytree with leading
    axis ``T`` (or ``None``). ``return_covariances`` (static) keeps the ``(T, n, n)``
    covariances. Pure; ``jit``/``vmap``-compatible.
    """
    inputs = _default_inputs(emissions, inputs)
    return _run_filter(
        lambda m, P, y: _ekf_condition(m, P, h, R, y),
        lambda m, P, u: _ekf_predict(m, P, f, Q, u),
        m0,
        P0,
        emissions,
        inputs,
        return_covariances,
    )


# -- unscented transform ----------------------------------------------------------------------


def _sigma_points(mean, cov, alpha, beta, kappa):
    n = mean.shape[0]
    lam = alpha**2 * (n + kappa) - n
    chol = linalg.cholesky(_symmetrise(cov) * (n + lam))
    points = jnp.concatenate([mean[None], mean[None] + chol.T, mean[None] - chol.T])
    w_mean = jnp.full(2 * n + 1, 0.5 / (n + lam)).at[0].set(lam / (n + lam))
    w_cov = w_mean.at[0].add(1 - alpha**2 + beta)
    return points, w_mean, w_cov


def _ukf_predict(mean, cov, f, Q, u, alpha, beta, kappa):
    points, wm, wc = _sigma_points(mean, cov, alpha, beta, kappa)
    moved = jax.vmap(lambda x: f(x, u))(points)
    new_mean = wm @ moved
    dev = moved - new_mean
    return new_mean, _symmetrise(dev.T @ (wc[:, None] * dev) + Q)


def _ukf_condition(mean, cov, h, R, y, alpha, beta, kappa):
    points, wm, wc = _sigma_points(mean, cov, alpha, beta, kappa)
    ys = jax.vmap(h)(points)
    y_pred = wm @ ys
    dy = ys - y_pred
    dx = points - mean
    innovation_cov = _symmetrise(dy.T @ (wc[:, None] * dy) + R)
    cross = dx.T @ (wc[:, None] * dy)
    return _condition(mean, cov, y_pred, cross, innovation_cov, y)


def unscented_kalman_filter(
    f: Callable[[Array, Array], Array],
    h: Callable[[Array], Array],
    Q: Float[Array, "n n"],
    R: Float[Array, "d d"],
    m0: Float[Array, " n"],
    P0: Float[Array, "n n"],
    emissions: Float[Array, "T d"],
    inputs: Array | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 2.0,
    kappa: float = 0.0,
    return_covariances: bool = False,
) -> FilterResult:
    """Unscented Kalman filter, same model and interface as ``extended_kalman_filter``.

    ``2n + 1`` sigma points with Wan–van der Merwe weights (``alpha``, ``beta``, ``kappa``
    static). Exact for a linear-Gaussian model, like the EKF.
    """
    inputs = _default_inputs(emissions, inputs)
    return _run_filter(
        lambda m, P, y: _ukf_condition(m, P, h, R, y, alpha, beta, kappa),
        lambda m, P, u: _ukf_predict(m, P, f, Q, u, alpha, beta, kappa),
        m0,
        P0,
        emissions,
        inputs,
        return_covariances,
    )


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
    initial_factor: float = 1.3,
    initial_relative_std: float = 0.3,
    initial_velocity_std: float = 5.0,
    velocity_process_std: float = 1e-4,
    parameter_process_std: float = 0.0,
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
    initial_factor: float = 1.3,
    initial_relative_std: float = 0.3,
    initial_velocity_std: float = 5.0,
    velocity_process_std: float = 1e-4,
    parameter_process_std: float = 0.0,
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
