"""Time-domain baselines on the inverse-dynamics regression: RLS and batch least squares (IDIM-LS).

The regression, its derivative-filter options (``derivative``, ``keep``, ``cutoff``, ``order``,
``threshold``), the ``weighting`` and the ``measurement_offset`` are described in
``jaxid.estimate.regression``.

- ``rls``: recursive least squares with forgetting factor ``λ`` (``forgetting``) and initial
  covariance ``P0 = initial_covariance · I`` around ``initial_guess``, a ``lax.scan`` over
  ``_rls_update``. With ``λ = 1`` and a huge ``P0`` it equals ``idim_ls`` (tested).
- ``idim_ls``: the batch least-squares solution of the same regression (the IDIM-LS standard).
- ``idim_iv`` (``jaxid.estimate.idim_iv``, re-exported here): instrumental variables
  (IDIM-IV, Janot et al. 2014) on the same regression.

Covariance: the sandwich ``P (Σ_n λ^{2(N−n)} Y_nᵀ W Σ_e W Y_n) P`` with ``Σ_e = diag(σ_j²)``
the residual variances of the final fit (``σ_j² = Σ_n e_nj² / (M − p/2)``); for ``λ = 1`` and no
weighting this is the textbook ``σ² (YᵀY)⁻¹``. It treats the equation errors as white; the
filtered-noise errors are not (they are band-limited and correlated in time), see
``docs/estimators.md`` for how far this is from the Monte Carlo spread.

Everything is ``jit``-compatible and ``vmap``-able over records; static options: ``unknowns``,
``derivative``, ``keep``, ``cutoff``, ``order``, ``threshold``, ``weighting``, ``history_points``; traced: ``forgetting``,
``initial_covariance``, ``initial_guess``, ``measurement_offset``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .. import linalg
from ..excitation.multisine import Multisine
from ..model import LINEAR_PARAMETERS, TwoLinkArm, validate_unknowns
from ..simulation.open_loop import Record
from .base import Estimate, register
from .idim_iv import idim_iv
from .kalman.filters import recursive_least_squares
from .regression import (
    _check_weighting,
    _joint_weights,
    _residual_variances,
    _status,
    _weighted_ls,
    history_indices,
    regression_data,
)

__all__ = ["rls", "idim_ls", "idim_iv", "regression_data", "history_indices"]


# -- the estimators ----------------------------------------------------------------------------


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
    initial_factor: float | Array = 1.3,
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
