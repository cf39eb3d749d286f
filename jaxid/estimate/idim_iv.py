"""IDIM-IV: instrumental variables on the inverse-dynamics regression (Janot et al. 2014).

The instruments are the regressor of the simulated noise-free periodic steady state; this removes
the errors-in-variables bias of ``idim_ls``, with a covariance that propagates the filtered noise
(see ``idim_iv``'s docstring). The regression, filter options and weighting are those of
``jaxid.estimate.regression``; ``idim_iv`` is also importable from ``jaxid.estimate.rls``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike

from .. import linalg
from ..excitation.multisine import Multisine
from ..measure.derivatives import derivative_filter, noise_variance
from ..model import LINEAR_PARAMETERS, TwoLinkArm, regressor, validate_unknowns
from ..simulation.integrate import applied_offset
from ..simulation.open_loop import Record
from ..simulation.steady_state import periodic_steady_state
from .base import CONVERGED, MAX_ITERATIONS, SINGULAR, Estimate, register
from .regression import _check_weighting, _default_cutoff, _joint_weights, _residual_variances, _status, _weighted_ls

__all__ = ["idim_iv"]


def _derivative_filter(q, record, excitation, *, derivative, keep, cutoff, order, threshold):
    """The filter ``q ↦ (q_f, q', q'')`` that ``regression_data`` applies to ``q``, frozen
    (``jaxid.measure.derivatives.derivative_filter``: for ``keep="detected"`` the bins are decided on the
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
    (``jaxid.simulation.steady_state.periodic_steady_state``, same RK4 and step as ``simulate``, warm-started
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
            (``jaxid.measure.derivatives.noise_variance``).
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
