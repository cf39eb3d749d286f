"""The covariance of a consistent least-squares estimate: least squares on the tangent space of the
constraint face it ends on (``ACTIVE_TOLERANCE``), a sandwich with the residual variance and an optional
Newey-West (Bartlett) correction for residuals correlated over neighbouring rows. Pure JAX."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .parametrisation import _NON_NEGATIVE_JOINT_BLOCKS, _PSEUDO_INERTIA_BASIS

#: A link's pseudo-inertia eigenvalue (relative to its largest) or a joint bound's ``Ia``, ``fv``,
#: ``fc`` (relative to the largest of its kind) at or below which the constraint counts as active in
#: ``_constrained_covariance``. At the interior-point solutions of the shipped benchmarks active
#: eigenvalues are 1e-12-3e-7, inactive ones ≥ 1e-3 (rarely 1e-4).
ACTIVE_TOLERANCE = 1e-5


def _bartlett_meat(w: ArrayLike, residual: ArrayLike, block: int, lags: int, xp=jnp) -> ArrayLike:
    """``Σ_{|l| ≤ L} (1 − |l|/(L+1)) Σ_t g_t g_{t+l}ᵀ`` ``(s, s)``, ``g_t = W_tᵀ e_t`` the score of the
    ``t``-th block of ``block`` rows (one sample time: its joints): the Newey–West (Bartlett) estimate
    of the covariance of ``Wᵀ e`` when the residuals of neighbouring samples are correlated (filtered
    rows decimated at a few rows per cut-off period), ``L = lags`` samples. ``xp``: ``jax.numpy`` (in
    compiled programs) or ``numpy`` (on host arrays: op-by-op JAX would compile each operation again for
    every new row count)."""
    scores = xp.einsum("tbs,tb->ts", w.reshape(-1, block, w.shape[-1]), residual.reshape(-1, block))
    meat = scores.T @ scores
    for lag in range(1, lags + 1):
        cross = scores[lag:].T @ scores[:-lag]
        meat = meat + (1.0 - lag / (lags + 1.0)) * (cross + cross.T)
    return meat


def _constrained_covariance(
    phi: Array, r: Array, lam: Array, data_cost: Array, rows: int | Array, correlated: tuple | None = None
) -> tuple[Array, Array]:
    """``(covariance (s, s), active count)`` of the constrained estimate ``φ̂`` of
    ``min ‖W φ − y‖² + λ ‖φ − φ_prior‖²`` over the consistent set, ``RᵀR = WᵀW + λ𝟙``.

    Active face: per link the eigenvectors ``V₀`` of ``J_i`` whose eigenvalue is ``≤ ACTIVE_TOLERANCE ·
    λ_max(J_i)``; per joint the ``Ia``, ``fv``, ``fc`` ``≤ ACTIVE_TOLERANCE ·`` the largest of their kind.
    The tangent space of that face is ``{δφ : V₀ᵀ δJ_i V₀ = 0, δp_active = 0}`` (the tangent space of
    the positive semidefinite matrices of that rank); to first order the estimate moves in it as the
    least squares restricted to it does, so with ``Π`` its orthogonal projector and
    ``A = Π (Π H Π + 𝟙 − Π)⁻¹ Π`` (the inverse of ``H = RᵀR`` on that space):
    ``cov = σ̂² A WᵀW A`` (a sandwich: ``λ`` is not data), ``σ̂² = data_cost / (rows − tr(A WᵀW))``.
    With no active constraint this is least squares' ``σ̂² (WᵀW)⁻¹`` on the identified combinations.
    ``correlated = (W, e, block, lags)``: the meat ``σ̂² WᵀW`` is replaced by ``_bartlett_meat`` (times
    ``rows / (rows − tr(A WᵀW))``), for residuals correlated over ``lags`` neighbouring samples.
    What it leaves out: the variance of *whether* a constraint is active (an estimate that hits the
    boundary by noise has a truncated, not Gaussian, law there); the benchmark's coverage column
    measures what that costs."""
    s = phi.shape[0]
    n = s // 14
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    j = jnp.tensordot(phi[: 10 * n].reshape(n, 10), _PSEUDO_INERTIA_BASIS, axes=1)
    values, vectors = jnp.linalg.eigh(j)
    active = values <= ACTIVE_TOLERANCE * values[:, -1:]  # (n, 4)
    first, second = np.triu_indices(4)
    # Row (a, b) of link i: ⟨v_a v_bᵀ, B_m⟩ for m = 1..10, kept when both v_a, v_b are active.
    rows_links = jnp.einsum(
        "nas,mst,nbt->nabm", vectors.swapaxes(-1, -2)[:, :, :], _PSEUDO_INERTIA_BASIS, vectors.swapaxes(-1, -2)
    )
    rows_links = rows_links[:, first, second, :] * (active[:, first] & active[:, second])[..., None]  # (n, 10, 10)
    rows_links = rows_links / jnp.maximum(jnp.linalg.norm(rows_links, axis=-1, keepdims=True), 1e-300)
    block = jnp.zeros((n, 10, s), dtype=phi.dtype)
    for i in range(n):
        block = block.at[i, :, 10 * i : 10 * i + 10].set(rows_links[i])
    p = phi[10 * n : k].reshape(_NON_NEGATIVE_JOINT_BLOCKS, n)
    joint_active = (p <= ACTIVE_TOLERANCE * jnp.max(jnp.abs(p), axis=1, keepdims=True)).reshape(-1)
    rows_joints = jnp.eye(s, dtype=phi.dtype)[10 * n : k] * joint_active[:, None]
    constraints = jnp.concatenate([block.reshape(-1, s), rows_joints])
    eigenvalues, basis = jnp.linalg.eigh(constraints.T @ constraints)
    normal = (eigenvalues > 1e-8).astype(phi.dtype)  # the span of the active constraints' rows
    projector = jnp.eye(s, dtype=phi.dtype) - (basis * normal) @ basis.T
    hessian = r.T @ r
    gram = hessian - lam * jnp.eye(s, dtype=phi.dtype)  # WᵀW
    inverse = projector @ jnp.linalg.inv(projector @ hessian @ projector + jnp.eye(s) - projector) @ projector
    inverse = 0.5 * (inverse + inverse.T)
    dof = jnp.maximum(rows - jnp.trace(inverse @ gram), 1.0)
    if correlated is None:
        covariance = data_cost / dof * inverse @ gram @ inverse
    else:
        covariance = rows / dof * inverse @ _bartlett_meat(*correlated) @ inverse
    return 0.5 * (covariance + covariance.T), jnp.sum(normal).astype(jnp.int32)
