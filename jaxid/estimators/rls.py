"""Time-domain baselines on the inverse-dynamics regressor: RLS and batch least squares (IDIM-LS).

Both solve the same regression, one equation per joint and sample,

    tau_n − tau_known(q_n, q'_n, q''_n) = Y(q_n, q'_n, q''_n) θ + e_n,

with ``Y`` and ``tau_known`` from ``jaxid.model.regressor`` (exact for the parameters the
dynamics are linear in: masses, inertias, friction) and ``q, q', q''`` from the noisy angles by
the periodic zero-phase filter of ``jaxid.derivatives`` (the filter uses the whole record, so the
"recursive" estimator is recursive in the regression, not causal in the data, as in offline IDIM
practice). The filter is stated by the options ``derivative`` (default ``"fourier"``:
differentiation in the frequency domain over the whole periods), ``keep`` (default
``"detected"``: DC, the excited lines, and every other harmonic up to ``cutoff`` whose power is
more than ``threshold = 10`` times the noise floor), ``cutoff`` (default ``4 ×`` the highest
excited harmonic, at most ``N/4``; ``2 ×`` for ``"band"`` and ``"butterworth"``) and ``order``
(Butterworth). ``"detected"`` was the best of the variants measured (docs/estimators.md): keeping a
whole band puts high-frequency noise into ``q''``, and the noisy regressor biases the estimate
towards zero (errors in variables).

- ``rls``: recursive least squares with forgetting factor ``λ`` (``forgetting``) and initial
  covariance ``P0 = initial_covariance · I`` around ``initial_guess``, a ``lax.scan`` over
  ``_rls_update``. With ``λ = 1`` and a huge ``P0`` it equals ``idim_ls`` (tested).
- ``idim_ls``: the batch least-squares solution of the same regression (the IDIM-LS standard).
- ``idim_iv``: instrumental variables (IDIM-IV, Janot et al. 2014): the instruments are the
  regressor of the simulated noise-free periodic steady state; removes the errors-in-variables
  bias of ``idim_ls``, with a covariance that propagates the filtered noise (see its docstring).

Weighting (``weighting``): ``"none"`` — ordinary least squares; ``"joint"`` (default) — each
joint's equations are weighted by ``1/σ_j²``, the residual variance of a preliminary ordinary
least-squares fit (two-stage; the two joints' equation errors differ by an order of magnitude,
so this is the stronger estimator).

Covariance: the sandwich ``P (Σ_n λ^{2(N−n)} Y_nᵀ W Σ_e W Y_n) P`` with ``Σ_e = diag(σ_j²)``
the residual variances of the final fit (``σ_j² = Σ_n e_nj² / (M − p/2)``); for ``λ = 1`` and no
weighting this is the textbook ``σ² (YᵀY)⁻¹``. It treats the equation errors as white; the
filtered-noise errors are not (they are band-limited and correlated in time), see
``docs/estimators.md`` for how far this is from the Monte Carlo spread.

Noise mean: the regression uses the angles themselves (gravity), so a noise mean (the paper's
uniform noise has mean 0.05 rad) biases it. ``measurement_offset`` [rad] is subtracted from the
angles before filtering; the estimator cannot know it, so the caller passes it if known (the
study passes ``noise_mean``). ``noise_std`` is not used (the equation errors are estimated from
the residuals).

Everything is ``jit``-compatible and ``vmap``-able over records; static options: ``unknowns``,
``derivative``, ``keep``, ``cutoff``, ``order``, ``threshold``, ``weighting``, ``history_points``; traced: ``forgetting``,
``initial_covariance``, ``initial_guess``, ``measurement_offset``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .. import linalg
from ..derivatives import default_cutoff, derivative_filter, noise_variance, periodic_derivatives
from ..excitation import Multisine
from ..integrate import applied_offset
from ..model import LINEAR_PARAMETERS, TwoLinkArm, regressor, validate_unknowns
from ..simulation import Record
from ..steady_state import periodic_steady_state
from .base import CONVERGED, FAILED, MAX_ITERATIONS, SINGULAR, Estimate, register

__all__ = ["rls", "idim_ls", "idim_iv", "regression_data", "recursive_least_squares", "history_indices"]


def history_indices(n_samples: int, points: int) -> np.ndarray:
    """Sample indices at which ``Estimate.history`` is recorded (ends of equal chunks; the last
    one is the final sample). ``record.t[history_indices(M, n)]`` gives the times."""
    points = max(1, min(int(points), n_samples))
    return (np.arange(1, points + 1) * n_samples) // points - 1


def _default_cutoff(excitation: Multisine, cutoff: int | None, keep: str, sample_step: float) -> int:
    if cutoff is not None:
        return int(cutoff)
    return default_cutoff(excitation.max_harmonic, round(excitation.period / sample_step), keep)


def regression_data(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    measurement_offset: ArrayLike = 0.0,
    derivative: str = "fourier",
    keep: str = "detected",
    cutoff: int | None = None,
    order: int = 4,
    threshold: float = 10.0,
) -> tuple[Float[Array, "M 2 p"], Float[Array, "M 2"]]:
    """The regression ``z_n = Y_n θ + e_n`` of the record: ``(Y, z)`` with ``z = tau − tau_known``.

    ``q, q', q''`` are the filtered angles and their derivatives (``jaxid.derivatives``) after
    subtracting ``measurement_offset``. Static: ``unknowns`` and the filter options.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    q = record.q - jnp.asarray(measurement_offset, dtype=record.q.dtype)
    q_f, qd, qdd = periodic_derivatives(
        q,
        record.sample_step,
        record.period,
        method=derivative,
        keep=keep,
        cutoff=_default_cutoff(excitation, cutoff, keep if derivative == "fourier" else "band", record.sample_step),
        lines=excitation.lines,
        order=order,
        threshold=threshold,
    )
    y, tau_known = regressor(nominal, q_f, qd, qdd, unknowns)
    return y, record.tau - tau_known


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


# -- batch least squares ---------------------------------------------------------------------


def _weighted_ls(y, z, weights):
    p = y.shape[-1]
    sw = jnp.sqrt(weights)
    a = (sw[None, :, None] * y).reshape(-1, p)
    b = (sw[None, :] * z).reshape(-1)
    theta = linalg.lstsq(a, b)[0]
    return theta, a


def _residual_variances(y, z, theta):
    n, _, p = y.shape
    r = z - y @ theta
    return jnp.sum(r**2, axis=0) / (n - p / 2)


def _joint_weights(y, z, weighting):
    if weighting == "none":
        return jnp.ones(y.shape[-2], y.dtype)
    theta0, _ = _weighted_ls(y, z, jnp.ones(y.shape[-2], y.dtype))
    return 1.0 / _residual_variances(y, z, theta0)


def _check_weighting(weighting):
    if weighting not in ("none", "joint"):
        raise ValueError(f"weighting must be 'none' or 'joint' (per-joint residual variances), got {weighting!r}.")


def _status(value, covariance, information):
    finite = jnp.all(jnp.isfinite(value)) & jnp.all(jnp.isfinite(covariance))
    singular = linalg.is_singular_information(information)
    return jnp.where(~finite, FAILED, jnp.where(singular, SINGULAR, CONVERGED)).astype(jnp.int32)


def _initial_guess(nominal, unknowns, initial_guess, initial_factor):
    if initial_guess is None:
        return nominal.parameter_vector(unknowns) * initial_factor
    guess = jnp.asarray(initial_guess, dtype=float)
    if guess.shape != (len(unknowns),):
        raise ValueError(f"initial_guess must have shape ({len(unknowns)},) for {list(unknowns)}, got {guess.shape}.")
    return guess


@register("idim_ls")
def idim_ls(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: ArrayLike = (0.0, 0.0),
    noise_std: ArrayLike | None = None,
    measurement_offset: ArrayLike = 0.0,
    derivative: str = "fourier",
    keep: str = "detected",
    cutoff: int | None = None,
    order: int = 4,
    threshold: float = 10.0,
    weighting: str = "joint",
) -> Estimate:
    """IDIM-LS: batch (weighted) least squares of the inverse-dynamics regression.

    See the module docstring for the regression, the filter options and the covariance.
    ``q0`` and ``noise_std`` are accepted for the common interface and not used. Returns an
    ``Estimate`` without history; status ``SINGULAR`` if the regressor is rank deficient,
    ``FAILED`` if the result is not finite.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    _check_weighting(weighting)
    y, z = regression_data(
        record,
        excitation,
        nominal,
        unknowns=unknowns,
        measurement_offset=measurement_offset,
        derivative=derivative,
        keep=keep,
        cutoff=cutoff,
        order=order,
        threshold=threshold,
    )
    weights = _joint_weights(y, z, weighting)
    theta, a = _weighted_ls(y, z, weights)
    sigma2 = _residual_variances(y, z, theta)
    information = a.T @ a
    inv = linalg.inverse(information)
    meat = jnp.einsum("j,njp,njq->pq", weights**2 * sigma2, y, y)
    covariance = inv @ meat @ inv
    return Estimate(theta, covariance, _status(theta, covariance, information), unknowns)


@register("rls")
def rls(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: ArrayLike = (0.0, 0.0),
    noise_std: ArrayLike | None = None,
    forgetting: float | Array = 1.0,
    initial_covariance: float | Array = 1e6,
    initial_guess: ArrayLike | None = None,
    initial_factor: float = 1.3,
    measurement_offset: ArrayLike = 0.0,
    derivative: str = "fourier",
    keep: str = "detected",
    cutoff: int | None = None,
    order: int = 4,
    threshold: float = 10.0,
    weighting: str = "joint",
    history_points: int = 200,
) -> Estimate:
    """Recursive least squares on the inverse-dynamics regression, one sample (two equations) per step.

    Args:
        forgetting: ``λ ∈ (0, 1]`` (``1``: no forgetting).
        initial_covariance: ``P0 = initial_covariance · I`` [parameter units²] (with the joint
            weights ``1/σ_j²`` applied to the equations, ``1e6`` is effectively uninformative).
        initial_guess: ``(p,)`` start; default ``initial_factor ×`` the nominal values of the
            unknowns (a guess 30 % off, so convergence plots start away from the truth).
        measurement_offset, derivative, keep, cutoff, order, weighting: see the module docstring.
        history_points: static number ``n ≤ 200`` of points in ``Estimate.history`` ``(n, p)``,
            taken at ``history_indices(M, n)``.

    Returns an ``Estimate``; ``FAILED`` if not finite, ``SINGULAR`` if the regressor is rank
    deficient. ``q0`` and ``noise_std`` are accepted for the common interface and not used.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    _check_weighting(weighting)
    y, z = regression_data(
        record,
        excitation,
        nominal,
        unknowns=unknowns,
        measurement_offset=measurement_offset,
        derivative=derivative,
        keep=keep,
        cutoff=cutoff,
        order=order,
        threshold=threshold,
    )
    p = len(unknowns)
    weights = _joint_weights(y, z, weighting)
    theta0 = _initial_guess(nominal, unknowns, initial_guess, initial_factor)
    cov0 = jnp.asarray(initial_covariance, dtype=y.dtype) * jnp.eye(p)
    theta, cov, acc, history = recursive_least_squares(y, z, theta0, cov0, weights=weights, forgetting=forgetting)
    sigma2 = _residual_variances(y, z, theta)
    covariance = cov @ jnp.einsum("j,jpq->pq", sigma2, acc) @ cov
    information = jnp.einsum("j,njp,njq->pq", weights, y, y)
    idx = history_indices(y.shape[0], history_points)
    return Estimate(theta, covariance, _status(theta, covariance, information), unknowns, history[idx])


# -- instrumental variables (IDIM-IV) --------------------------------------------------------


def _derivative_filter(q, record, excitation, *, derivative, keep, cutoff, order, threshold):
    """The filter ``q ↦ (q_f, q', q'')`` that ``regression_data`` applies to ``q``, frozen
    (``jaxid.derivatives.derivative_filter``: for ``keep="detected"`` the bins are decided on the
    measured angles and reused for the simulated instruments). Returns ``(map, cutoff)``."""
    cut = _default_cutoff(excitation, cutoff, keep if derivative == "fourier" else "band", record.sample_step)
    apply = derivative_filter(
        q,
        record.sample_step,
        record.period,
        method=derivative,
        keep=keep,
        cutoff=cut,
        lines=excitation.lines,
        order=order,
        threshold=threshold,
    )
    return apply, cut


def _iv_solve(zmat, y, z, weights):
    """``θ = (Zᵀ W Y)⁻¹ Zᵀ W z`` over all samples and joints; also returns ``Zᵀ W Y``."""
    cross = jnp.einsum("j,njp,njq->pq", weights, zmat, y)
    rhs = jnp.einsum("j,njp,nj->p", weights, zmat, z)
    return linalg.solve(cross, rhs), cross


@register("idim_iv")
def idim_iv(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: ArrayLike = (0.0, 0.0),
    noise_std: ArrayLike | None = None,
    measurement_offset: ArrayLike = 0.0,
    iterations: int = 3,
    derivative: str = "fourier",
    keep: str = "detected",
    cutoff: int | None = None,
    order: int = 4,
    threshold: float = 10.0,
    weighting: str = "joint",
    covariance: str = "delta",
    substeps: int = 1,
    newton_iterations: int = 20,
) -> Estimate:
    """IDIM-IV: instrumental variables on the inverse-dynamics regression (Janot, Vandanjon and
    Gautier, IEEE TCST 2014).

    IDIM-LS is biased because the noise of the angles enters the regressor ``Y(q, q', q'')``
    (errors in variables). IDIM-IV replaces ``Yᵀ`` in the normal equations by the regressor of a
    *noise-free simulated* trajectory, ``Z = Y(q_s, q_s', q_s'')``, which is correlated with ``Y``
    but not with the noise:

        θ_{k+1} = (Zₖᵀ W Y)⁻¹ Zₖᵀ W (τ − τ_known),

    starting from ``θ_0`` = IDIM-LS (same filter and weights). ``q_s`` is the periodic steady state
    of ``nominal`` with the unknowns set to ``θ_k`` under the applied torque (the excitation,
    with the record's constant torque offset), found by Newton shooting
    (``jaxid.steady_state.periodic_steady_state``, same RK4 and step as ``simulate``, warm-started
    from the previous iterate's orbit), tiled over the record's periods; ``q_s', q_s''`` come from
    the **same** periodic derivative filter as the measured angles (for ``keep="detected"`` the
    bins detected in the measured record). ``iterations`` (static, default 3) IV steps are taken;
    the estimate is consistent after the first (any noise-free instrument is), the iterations
    bring the instruments closer to the noise-free regressor (efficiency).

    Args:
        iterations: static number of IV steps after the IDIM-LS start.
        measurement_offset, derivative, keep, cutoff, order, threshold, weighting: as ``idim_ls``
            (the joint weights ``W = diag(1/σ_j²)`` come from the preliminary OLS fit and are kept).
        noise_std: angle noise std [rad] (scalar or per joint) for ``covariance="delta"``; if
            ``None`` it is estimated per joint from the spectrum above the cut-off
            (``jaxid.derivatives.noise_variance``).
        covariance: ``"delta"`` (default) — first-order propagation of white angle noise of
            variance ``σ²`` through the filter, the regressor and the IV solution with the
            instruments held fixed: ``Cov = σ² G Gᵀ``, ``G = ∂θ_IV/∂q_measured`` (by reverse-mode
            autodiff, ``p`` passes). It accounts for the time correlation of the filtered noise
            and for the noise entering both ``Y`` and ``τ_known``; it ignores second-order terms
            (the residual nonlinear bias, the instruments' dependence on ``θ̂``) and any
            non-noise misfit (derivative-filter truncation, model error). ``"white"`` — the
            textbook IV sandwich ``(ZᵀWY)⁻¹ (Σ_n Z_nᵀ W Σ_e W Z_n) (YᵀWZ)⁻¹`` with
            ``Σ_e = diag(σ_j²)`` the residual variances; it treats the equation errors as white
            and uncorrelated in time, which they are not (it underestimates like ``idim_ls``'s).
        substeps, newton_iterations: RK4 steps per sample and Newton iterations of the shooting.

    ``q0`` is the operating point of the simulation's starting guess. Status: ``FAILED`` if the
    value or covariance is not finite, ``SINGULAR`` if ``ZᵀWY`` is ill-conditioned (relative
    eigenvalue of its normalised symmetric part below 1e-12) or the regressor is rank deficient,
    ``MAX_ITERATIONS`` if the last shooting solve did not converge. ``jit``/``vmap``-compatible;
    static: ``unknowns``, ``iterations``, the filter options, ``weighting``, ``covariance``,
    ``substeps``, ``newton_iterations``. Cost: ``iterations`` shooting solves (each a few
    periods of RK4 with 4 tangents) on top of IDIM-LS.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    _check_weighting(weighting)
    if covariance not in ("delta", "white"):
        raise ValueError(f"covariance must be 'delta' (propagated angle noise) or 'white', got {covariance!r}.")
    if not (isinstance(iterations, int) and iterations >= 1):
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}.")
    offset = jnp.asarray(measurement_offset, dtype=record.q.dtype)
    q_meas = record.q - offset
    filt, cut = _derivative_filter(
        q_meas,
        record,
        excitation,
        derivative=derivative,
        keep=keep,
        cutoff=cutoff,
        order=order,
        threshold=threshold,
    )

    def regression(q):
        y, tau_known = regressor(nominal, *filt(q), unknowns)
        return y, record.tau - tau_known

    y, z = regression(q_meas)
    weights = jax.lax.stop_gradient(_joint_weights(y, z, weighting))
    theta, a = _weighted_ls(y, z, weights)

    # The applied torque is offset + u(t); the offset (G(q0) of the true arm) is read off the record.
    tau_offset = applied_offset(record, excitation)
    state = None
    zmat = y
    cross = a.T @ a
    orbit = None
    for _ in range(iterations):
        arm = nominal.with_parameters(unknowns, theta)
        orbit = periodic_steady_state(
            arm,
            excitation,
            q0=q0,
            offset=tau_offset,
            sample_step=record.sample_step,
            substeps=substeps,
            initial_state=state,
            relax_periods=1 if state is None else 0,
            max_iterations=newton_iterations,
        )
        state = orbit.initial_state
        q_sim = jnp.tile(orbit.q, (record.measured_periods, 1))
        zmat = regressor(nominal, *filt(q_sim), unknowns)[0]
        theta, cross = _iv_solve(zmat, y, z, weights)

    zmat = jax.lax.stop_gradient(zmat)
    if covariance == "delta":
        if noise_std is None:
            var = noise_variance(q_meas, record.measured_periods, above=cut)
        else:
            var = jnp.broadcast_to(jnp.asarray(noise_std, dtype=q_meas.dtype) ** 2, (2,))

        def estimate_of(q):
            yq, zq = regression(q)
            return _iv_solve(zmat, yq, zq, weights)[0]

        gain = jax.jacrev(estimate_of)(q_meas)  # (p, M, 2)
        cov = jnp.einsum("j,pnj,qnj->pq", var, gain, gain)
    else:
        sigma2 = _residual_variances(y, z, theta)
        inv = linalg.inverse(cross)
        meat = jnp.einsum("j,njp,njq->pq", weights**2 * sigma2, zmat, zmat)
        cov = inv @ meat @ inv.T
    cov = 0.5 * (cov + cov.T)
    status = _status(theta, cov, a.T @ a)
    scale = jnp.sqrt(jnp.abs(jnp.diag(cross))) + jnp.finfo(cross.dtype).tiny
    # ZᵀWY is a cross-Gram matrix: singular under the information-matrix rule of jaxid.linalg.
    cross_rcond = linalg.triangular_rcond(linalg.small_qr(cross / scale[:, None] / scale[None, :])[1])
    status = jnp.where((status == CONVERGED) & ~(cross_rcond >= linalg.INFORMATION_RCOND), SINGULAR, status)
    status = jnp.where((status == CONVERGED) & ~orbit.converged, MAX_ITERATIONS, status)
    return Estimate(theta, cov, status.astype(jnp.int32), unknowns)
