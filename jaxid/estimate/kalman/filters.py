"""Recursive estimation kernels: generic extended and unscented Kalman filters (in the style of
dynamax) and vector recursive least squares.

Pure functions, a ``lax.scan`` over small condition/predict helpers; condition on ``y_n`` first,
then predict to ``n + 1``:

- ``extended_kalman_filter(f, h, Q, R, m0, P0, emissions, inputs)`` — first-order EKF with
  Jacobians by ``jax.jacfwd`` and a Joseph-form update; on a linear-Gaussian model it is the
  exact Kalman filter (tested);
- ``unscented_kalman_filter(...)`` — the same interface with the unscented transform;
- ``augmented_extended_kalman_filter(step, Qx, R, ...)`` — the EKF for a state ``(x, θ)`` with ``θ``
  constant and the first entries measured (the log-side EKF's), using that block structure: the same
  filter to round-off, at a fraction of the dense covariance algebra.

All three take an optional ``update_limit(mean, proposed) -> (n,)`` factors in ``[0, 1]`` that scale the
gain's rows (a damped update: the model's own rule keeps the state where the model is defined, e.g.
a positive definite mass matrix); the covariance is then that of the scaled gain (Joseph form,
exact for any gain), so the filter stays consistent with what it did.

- ``recursive_least_squares(y, z, θ0, P0)`` — vector RLS with forgetting (a Kalman filter of a
  constant state), a ``lax.scan`` over ``_rls_update``.

They know nothing of the arm: ``jaxid.estimate.kalman.records``/``rls`` (on simulated records) and
``jaxid.estimate.logs`` (on logs) run them with their models. ``jaxid.estimate.kalman.records``
re-exports the filters.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PyTree

from ... import linalg

__all__ = [
    "FilterResult",
    "augmented_extended_kalman_filter",
    "extended_kalman_filter",
    "unscented_kalman_filter",
    "recursive_least_squares",
]


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


def _limited_gain(gain, mean, resid, update_limit):
    """The gain with its rows scaled by ``update_limit(mean, mean + gain @ resid)`` (or as is)."""
    if update_limit is None:
        return gain
    return update_limit(mean, mean + gain @ resid)[:, None] * gain


def _condition(mean, cov, y_pred, cross, innovation_cov, y, update_limit=None):
    """Kalman update from the predicted emission moments (shared by the EKF and the UKF).

    ``cross = Cov(x, y)``; returns the conditioned mean and covariance and the log-likelihood. With
    a limited (scaled) gain ``K`` the covariance is ``P − K Cᵀ − C Kᵀ + K S Kᵀ``, that of the
    update actually made (``P − K S Kᵀ`` for the optimal gain).
    """
    gain = linalg.solve(innovation_cov, cross.T).T
    resid = y - y_pred
    if update_limit is None:
        cov = cov - gain @ innovation_cov @ gain.T
    else:
        gain = _limited_gain(gain, mean, resid, update_limit)
        cov = cov - gain @ cross.T - cross @ gain.T + gain @ innovation_cov @ gain.T
    return mean + gain @ resid, _symmetrise(cov), _gaussian_log_density(resid, innovation_cov)


def _value_and_jacobian(f, x):
    """``(f(x), ∂f/∂x)`` by one ``jax.jacfwd`` (the value is its primal: ``f`` is traced once)."""

    def value_twice(z):
        value = f(z)
        return value, value

    jac, value = jax.jacfwd(value_twice, has_aux=True)(x)
    return value, jac


def _ekf_condition(mean, cov, h, R, y, update_limit=None):
    y_pred, jac = _value_and_jacobian(h, mean)
    innovation_cov = _symmetrise(jac @ cov @ jac.T + R)
    gain = linalg.solve(innovation_cov, jac @ cov).T
    resid = y - y_pred
    gain = _limited_gain(gain, mean, resid, update_limit)
    # Joseph form: stays symmetric positive semi-definite in long runs, and is exact for any gain.
    a = jnp.eye(mean.shape[0]) - gain @ jac
    new_cov = _symmetrise(a @ cov @ a.T + gain @ R @ gain.T)
    return mean + gain @ resid, new_cov, _gaussian_log_density(resid, innovation_cov)


def _ekf_predict(mean, cov, f, Q, u):
    pred, jac = _value_and_jacobian(lambda x: f(x, u), mean)
    return pred, _symmetrise(jac @ cov @ jac.T + Q)


def _run_filter(condition, predict, m0, P0, emissions, inputs, return_covariances, valid=None):
    def step(carry, data):
        mean, cov, log_lik, _, _ = carry
        y, u, ok = data
        filt_mean, filt_cov, dll = condition(mean, cov, y)
        pred_mean, pred_cov = predict(filt_mean, filt_cov, u)
        out = (filt_mean, filt_cov) if return_covariances else filt_mean
        new = (pred_mean, pred_cov, log_lik + dll, filt_mean, filt_cov)
        if valid is not None:  # a padded step leaves the filter as it was (its outputs are dropped)
            new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, carry)
        return new, out

    init = (m0, P0, jnp.zeros((), m0.dtype), m0, P0)
    ok = jnp.ones(emissions.shape[0], bool) if valid is None else jnp.asarray(valid, bool)
    (_, _, log_lik, final_mean, final_cov), outs = jax.lax.scan(step, init, (emissions, inputs, ok))
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
    update_limit: Callable[[Array, Array], Array] | None = None,
    valid: Array | None = None,
) -> FilterResult:
    """First-order extended Kalman filter.

    Model: ``x_{t+1} = f(x_t, u_t) + w_t``, ``w ~ N(0, Q)``; ``y_t = h(x_t) + v_t``,
    ``v ~ N(0, R)``; ``x_0 ~ N(m0, P0)``. At each ``t`` it conditions on ``y_t`` (Joseph form),
    then predicts with ``u_t``; Jacobians by ``jax.jacfwd``. ``inputs`` is a pytree with leading
    axis ``T`` (or ``None``). ``return_covariances`` (static) keeps the ``(T, n, n)``
    covariances. ``update_limit(mean, proposed)`` (optional, module docstring): ``(n,)`` factors in
    ``[0, 1]`` on the gain's rows, the covariance that of the scaled gain. ``valid`` (optional, ``(T,)``
    booleans): a step where it is false leaves the filter's state, covariance and likelihood as they
    were (padding, so that records of different lengths share one compiled program). Pure;
    ``jit``/``vmap``-compatible.
    """
    inputs = _default_inputs(emissions, inputs)
    return _run_filter(
        lambda m, P, y: _ekf_condition(m, P, h, R, y, update_limit),
        lambda m, P, u: _ekf_predict(m, P, f, Q, u),
        m0,
        P0,
        emissions,
        inputs,
        return_covariances,
        valid,
    )


def _augmented_predict(mean, cov, step, Qx, u, step_jacobian=None):
    """``_ekf_predict`` for ``f(z, u) = (step(z[:m], z[m:], u), z[m:])`` and ``Q = diag(Qx, 0)``: with
    ``F = [[J], [0, I]]`` (``J = ∂step/∂z``, ``m × (m + p)``), ``F P Fᵀ`` is ``J P`` in the first ``m`` rows and
    columns, ``J P Jᵀ`` in their corner and ``P`` elsewhere. ``J`` by ``jax.jacfwd`` of ``step``, or
    ``step_jacobian(x, θ, u) -> (step(x, θ, u), J)`` where given."""
    m = Qx.shape[0]
    if step_jacobian is None:
        pred, jac = _value_and_jacobian(lambda z: step(z[:m], z[m:], u), mean)
    else:
        pred, jac = step_jacobian(mean[:m], mean[m:], u)
    rows = jac @ cov
    corner = _symmetrise(rows @ jac.T + Qx)
    cov = cov.at[:m].set(rows).at[:, :m].set(rows.T).at[:m, :m].set(corner)
    return jnp.concatenate([pred, mean[m:]]), cov


def _selection_condition(mean, cov, R, y, update_limit=None):
    """``_ekf_condition`` for the emission ``h(z) = z[:d]`` (``H = [I, 0]``): ``H P = P[:d]``, and the Joseph
    form's ``(I − K H) A = A − K A[:d]``, products of ``(m + p) × d`` blocks instead of full matrices."""
    d = R.shape[0]
    innovation_cov = _symmetrise(cov[:d, :d] + R)
    gain = linalg.solve(innovation_cov, cov[:d]).T
    resid = y - mean[:d]
    gain = _limited_gain(gain, mean, resid, update_limit)
    left = cov - gain @ cov[:d]  # (I − K H) P
    joseph = left - left[:, :d] @ gain.T  # (I − K H) P (I − K H)ᵀ
    new_cov = _symmetrise(joseph + gain @ R @ gain.T)
    return mean + gain @ resid, new_cov, _gaussian_log_density(resid, innovation_cov)


def augmented_extended_kalman_filter(
    step: Callable[[Array, Array, Array], Array],
    Qx: Float[Array, "m m"],
    R: Float[Array, "d d"],
    m0: Float[Array, " n"],
    P0: Float[Array, "n n"],
    emissions: Float[Array, "T d"],
    inputs: PyTree | None = None,
    *,
    return_covariances: bool = False,
    update_limit: Callable[[Array, Array], Array] | None = None,
    valid: Array | None = None,
    step_jacobian: Callable[[Array, Array, Array], tuple[Array, Array]] | None = None,
) -> FilterResult:
    """``extended_kalman_filter`` for a state ``z = (x, θ)`` whose parameters ``θ`` are constant and whose
    first ``d`` entries are measured: ``x_{t+1} = step(x_t, θ, u_t) + w_t``, ``w ~ N(0, Qx)`` (``x`` the first
    ``m = Qx.shape[0]`` entries), ``y_t = z_t[:d] + v_t``, ``v ~ N(0, R)``. The same filter as
    ``extended_kalman_filter`` with ``f(z, u) = (step(z[:m], z[m:], u), z[m:])``, ``h(z) = z[:d]`` and
    ``Q = diag(Qx, 0)``, equal to round-off (tested), by the block structure: a step costs
    ``O(m (m + p)²)`` and ``O(d (m + p)²)`` instead of the dense ``O((m + p)³)`` (the EKF on a seven-joint arm's
    logs: ``m = 14``, ``p = 69``). ``step_jacobian(x, θ, u) -> (step(x, θ, u), ∂step/∂(x, θ))``, optional: the
    transition's Jacobian by the caller's own route (the log-side EKF's: ``sensitivities.model_step_jacobian``)
    instead of ``jax.jacfwd`` of ``step``. Arguments otherwise as ``extended_kalman_filter``'s."""
    inputs = _default_inputs(emissions, inputs)
    return _run_filter(
        lambda m, P, y: _selection_condition(m, P, R, y, update_limit),
        lambda m, P, u: _augmented_predict(m, P, step, Qx, u, step_jacobian),
        m0,
        P0,
        emissions,
        inputs,
        return_covariances,
        valid,
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


def _ukf_condition(mean, cov, h, R, y, alpha, beta, kappa, update_limit=None):
    points, wm, wc = _sigma_points(mean, cov, alpha, beta, kappa)
    ys = jax.vmap(h)(points)
    y_pred = wm @ ys
    dy = ys - y_pred
    dx = points - mean
    innovation_cov = _symmetrise(dy.T @ (wc[:, None] * dy) + R)
    cross = dx.T @ (wc[:, None] * dy)
    return _condition(mean, cov, y_pred, cross, innovation_cov, y, update_limit)


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
    update_limit: Callable[[Array, Array], Array] | None = None,
    valid: Array | None = None,
) -> FilterResult:
    """Unscented Kalman filter, same model and interface as ``extended_kalman_filter``.

    ``2n + 1`` sigma points with Wan–van der Merwe weights (``alpha``, ``beta``, ``kappa``
    static). Exact for a linear-Gaussian model, like the EKF; ``update_limit`` and ``valid`` as there.
    """
    inputs = _default_inputs(emissions, inputs)
    return _run_filter(
        lambda m, P, y: _ukf_condition(m, P, h, R, y, alpha, beta, kappa, update_limit),
        lambda m, P, u: _ukf_predict(m, P, f, Q, u, alpha, beta, kappa),
        m0,
        P0,
        emissions,
        inputs,
        return_covariances,
        valid,
    )


# -- recursive least squares: one update, and the scan ---------------------------------------


def _rls_update(theta, cov, accumulator, y, z, weights, forgetting):
    """One vector RLS step for the equations ``z = y θ + e`` (``y`` ``(d, p)``), weights ``(d,)``.

    Minimises ``Σ_n λ^{N−n} (z_n − y_n θ)ᵀ W (z_n − y_n θ)`` recursively. ``accumulator`` holds
    ``Σ λ^{2(N−n)} w_j² y_njᵀ y_nj`` per joint ``j`` (for the sandwich covariance).
    """
    innovation_cov = forgetting * jnp.diag(1.0 / weights) + y @ cov @ y.T
    gain = linalg.solve(innovation_cov, y @ cov).T  # P yᵀ S⁻¹ (S symmetric)
    theta = theta + gain @ (z - y @ theta)
    cov = (cov - gain @ y @ cov) / forgetting
    cov = 0.5 * (cov + cov.T)
    wy = weights[:, None] * y
    accumulator = forgetting**2 * accumulator + jnp.einsum("jp,jq->jpq", wy, wy)
    return theta, cov, accumulator


def recursive_least_squares(
    y: Float[Array, "M d p"],
    z: Float[Array, "M d"],
    initial_guess: Float[Array, " p"],
    initial_covariance: Float[Array, "p p"],
    *,
    weights: Float[ArrayLike, " d"] = 1.0,
    forgetting: float | Array = 1.0,
) -> tuple[Array, Array, Array, Array]:
    """Run RLS over the rows of ``(y, z)`` with a ``lax.scan``.

    Returns ``(θ_N, P_N, accumulator_N, θ_history)`` with ``θ_history`` ``(M, p)`` (the estimate
    after each sample). ``jit``/``vmap``-compatible.
    """
    p = y.shape[-1]
    d = y.shape[-2]
    weights = jnp.broadcast_to(jnp.asarray(weights, dtype=y.dtype), (d,))

    def step(carry, row):
        theta, cov, acc = carry
        theta, cov, acc = _rls_update(theta, cov, acc, row[0], row[1], weights, forgetting)
        return (theta, cov, acc), theta

    init = (initial_guess, initial_covariance, jnp.zeros((d, p, p), y.dtype))
    (theta, cov, acc), history = jax.lax.scan(step, init, (y, z))
    return theta, cov, acc, history
