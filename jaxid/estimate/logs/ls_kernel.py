"""IDIM-LS's one least-squares kernel, pure JAX (``jit``/``vmap``-able): weighted least squares on
stacked regression rows with its rank, condition number and covariance (white residuals, or the
Newey-West sandwich over correlated rows). ``idim_ls`` (on logs) and the benchmark's batched trials
(``jaxid.benchmark.batched``) both call it."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..consistency.covariance import _bartlett_meat

__all__ = ["LSFit", "ls_kernel", "newey_west"]


def newey_west(bread, scores_rows, residual, block: int, lags: int):
    """``N/(N − p) · B M Bᵀ``, symmetrised: the Newey-West covariance of a least-squares (``B =
    (AᵀA)⁻¹``, scores ``A``) or IV (``B = (ZᵀW)⁻¹``, scores ``Z``) estimate, ``M`` the Bartlett
    estimate over ``lags`` row times of ``block`` rows (``consistency.covariance._bartlett_meat``)."""
    rows, p = scores_rows.shape
    meat = _bartlett_meat(jnp.asarray(scores_rows), jnp.asarray(residual), block, lags)
    sandwich = rows / max(rows - p, 1) * bread @ meat @ bread.T
    return 0.5 * (sandwich + sandwich.T)


class LSFit(eqx.Module):
    """What ``ls_kernel`` returns (arrays; a leading trial axis under ``vmap``).

    theta, covariance: the estimate and ``σ̂² (AᵀA)⁻¹`` mapped back from unit-norm columns.
    rank, condition: of the final (weighted, unit-norm) regressor ``A``. residual_std: ``(n,)`` per
    joint, unweighted. sigma: the weights' ``σ_j``. first_rank: rank of the first (unweighted) problem,
    the one a rank-deficient regressor is refused on; first_scaled, first_scale: that problem's
    unit-norm matrix and column norms (to name its null directions, ``_check_rank``).
    """

    theta: jax.Array
    covariance: jax.Array
    rank: jax.Array
    condition: jax.Array
    residual_std: jax.Array
    sigma: jax.Array
    first_rank: jax.Array
    first_scaled: jax.Array | None = None
    first_scale: jax.Array | None = None


def _jnp_unit_columns(a):
    scale = jnp.linalg.norm(a, axis=0)
    return jnp.where(scale > 0, scale, 1.0)


def _jnp_rank_condition(a, s=None):
    """``_rank_condition`` in JAX: NumPy's ``matrix_rank`` tolerance, scale-free condition number.
    ``s``: ``a``'s singular values if known (``jnp.linalg.lstsq`` returns them, as LAPACK's ``gelsd``
    does NumPy's: no second SVD)."""
    s = jnp.linalg.svd(a, compute_uv=False) if s is None else s
    tol = max(a.shape) * jnp.finfo(a.dtype).eps * s[0]
    cond = jnp.where(s[-1] > 0, s[0] / s[-1], jnp.inf)
    return jnp.sum(s > tol), cond


def ls_kernel(w, y, weighted: bool = True, keep_first: bool = True, lags: int = 0) -> LSFit:
    """IDIM-LS on stacked rows, pure JAX (``jit``/``vmap``-able): the one least-squares kernel of
    ``idim_ls`` (on logs) and the benchmark's batched trials (``jaxid.benchmark.batched``).

    ``w`` ``(rows, n, p)``, ``y`` ``(rows, n)``. Ordinary LS on unit-norm columns; with ``weighted``
    each joint's rows divided by its residual std ``σ_j = √(Σ r² / (rows − p/n))`` and solved again
    (Gautier's rule); covariance ``σ̂² (AᵀA)⁻¹`` with the weighted residual variance
    ``σ̂² = Σ (r/σ)² / max(rows·n − p, 1)``; ranks with NumPy's ``matrix_rank`` tolerance. A
    rank-deficient problem is not refused here (``first_rank < p``: the caller's status or error).
    ``keep_first``: also return the first problem's matrix (for ``_check_rank``'s message).
    ``lags`` ``L > 0``: the residuals of neighbouring rows are correlated (low-passed, decimated rows:
    ``correlation_lags``), and the covariance is the Newey-West sandwich ``(AᵀA)⁻¹ M (AᵀA)⁻¹ ·
    rows/(rows − p)`` with ``M`` the Bartlett estimate over ``L`` row times of the scores ``Aₜᵀ eₜ``
    (``jaxid.estimate.consistency.covariance._bartlett_meat``, as the consistent LS). ``L = 0``: the
    covariance above, for independent residuals.
    """
    rows, joints, p = w.shape
    scale0 = _jnp_unit_columns(w.reshape(-1, p))
    a0 = (w / scale0).reshape(-1, p)
    if weighted:
        x0, _, _, s0 = jnp.linalg.lstsq(a0, y.reshape(-1))
        first_rank, _ = _jnp_rank_condition(a0, s0)
        resid = y - jnp.einsum("njp,p->nj", w / scale0, x0)
        sigma = jnp.sqrt(jnp.sum(resid**2, axis=0) / (rows - p / joints))
    else:
        first_rank, _ = _jnp_rank_condition(a0)
        sigma = jnp.ones(joints, w.dtype)
    ws = (w / sigma[None, :, None]).reshape(-1, p)
    scale = _jnp_unit_columns(ws)
    a = ws / scale
    x, _, _, s = jnp.linalg.lstsq(a, (y / sigma).reshape(-1))
    theta = x / scale
    resid = y - jnp.einsum("njp,p->nj", w, theta)
    inverse = jnp.linalg.inv(a.T @ a)
    if lags == 0:
        variance = jnp.sum((resid / sigma) ** 2) / max(a.shape[0] - p, 1)
        covariance = variance * inverse / jnp.outer(scale, scale)
    else:
        covariance = newey_west(inverse, a, (resid / sigma).reshape(-1), joints, lags) / jnp.outer(scale, scale)
    rank, condition = _jnp_rank_condition(a, s)
    return LSFit(
        theta,
        covariance,
        rank,
        condition,
        jnp.sqrt(jnp.mean(resid**2, axis=0)),
        sigma,
        first_rank,
        a0 if keep_first else None,
        scale0 if keep_first else None,
    )


_ls_kernel_jit = jax.jit(ls_kernel, static_argnums=(2, 3, 4))
