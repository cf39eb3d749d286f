"""IDIM-LS's one least-squares kernel, pure JAX (``jit``/``vmap``-able): weighted least squares on
stacked regression rows with its rank, condition number and covariance (white residuals, or the
Newey-West sandwich over correlated rows: ``ls_covariance``). ``idim_ls`` (on logs) and the benchmark's batched
trials (``jaxid.benchmark.batched``) both call it. Beside it, ``bounded_solve``: least squares within bounds (the
sign-bounded fit of the benchmark's batched program)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..consistency.covariance import _bartlett_meat

__all__ = ["LSFit", "bounded_solve", "checked_lags", "ls_covariance", "ls_kernel", "newey_west"]


def newey_west(bread, scores_rows, residual, block: int, lags: int, rows=None):
    """``N/(N − p) · B M Bᵀ``, symmetrised: the Newey-West covariance of a least-squares (``B =
    (AᵀA)⁻¹``, scores ``A``) or IV (``B = (ZᵀW)⁻¹``, scores ``Z``) estimate, ``M`` the Bartlett
    estimate over ``lags`` row times of ``block`` rows (``consistency.covariance._bartlett_meat``).
    ``rows``: ``N`` without zero padding (default all of ``scores_rows``). On numpy arrays (a host-side
    caller, e.g. ``idim_iv``) it computes in numpy, else in JAX."""
    n_rows, p = scores_rows.shape
    rows = n_rows if rows is None else rows
    host = all(isinstance(a, np.ndarray) for a in (bread, scores_rows, residual))
    xp = np if host else jnp
    meat = _bartlett_meat(xp.asarray(scores_rows), xp.asarray(residual), block, lags, xp)
    sandwich = rows / xp.maximum(rows - p, 1) * bread @ meat @ bread.T
    return 0.5 * (sandwich + sandwich.T)


def ls_covariance(inverse, a, weighted_residual, joints: int, lags: int, rows=None):
    """A least-squares estimate's covariance in the unit-norm coordinates of ``a`` (``(rows, p)``, ``inverse`` its
    ``(aᵀa)⁻¹``, ``weighted_residual`` ``(rows,)``, ``joints`` rows per sample): ``σ̂² (aᵀa)⁻¹`` with ``σ̂² = Σ r² /
    max(rows − p, 1)`` for ``lags = 0``, else the Newey-West sandwich over ``lags`` sample times (``newey_west``).
    ``rows``: without zero padding (default all). The one formula of IDIM-LS (``ls_kernel``), sign-bounded LS
    (``idim_ls(bounds=…)``) and RLS (``idim_rls``, with its ``P_N`` for ``(aᵀa)⁻¹``), on logs and in the benchmark's
    batched program; in numpy on numpy arrays, else in JAX."""
    n_rows, p = a.shape
    rows = n_rows if rows is None else rows
    if lags == 0:
        xp = np if all(isinstance(x, np.ndarray) for x in (inverse, a, weighted_residual)) else jnp
        return xp.sum(weighted_residual**2) / xp.maximum(rows - p, 1) * inverse
    return newey_west(inverse, a, weighted_residual, joints, lags, rows)


def checked_lags(lags, default: int) -> int:
    """``lags`` (rows over which residuals correlate, for ``ls_covariance``) checked, or ``default`` for ``None``
    (``idim_ls`` and ``idim_rls``: ``correlation_lags``); ``ValueError`` (one line) if not a whole number ≥ 0."""
    if lags is None:
        return int(default)
    if int(lags) != lags or lags < 0:
        raise ValueError(f"lags must be a non-negative whole number of rows, got {lags!r}.")
    return int(lags)


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


def _jnp_rank_condition(a, s=None, rows=None):
    """``_rank_condition`` in JAX: NumPy's ``matrix_rank`` tolerance, scale-free condition number.
    ``s``: ``a``'s singular values if known (``jnp.linalg.lstsq`` returns them, as LAPACK's ``gelsd``
    does NumPy's: no second SVD). ``rows``: ``a``'s rows without zero padding (default all)."""
    s = jnp.linalg.svd(a, compute_uv=False) if s is None else s
    size = max(a.shape) if rows is None else jnp.maximum(rows, a.shape[1])
    tol = size * jnp.finfo(a.dtype).eps * s[0]
    cond = jnp.where(s[-1] > 0, s[0] / s[-1], jnp.inf)
    return jnp.sum(s > tol), cond


#: ``solver = "cholqr"`` is trusted up to this scale-free condition number: CholeskyQR2's ``Q`` is then
#: orthogonal to working precision (Yamamoto, Nakatsukasa, Yanagisawa & Fukaya 2015: for
#: ``κ(A) ≲ u^{-1/2} ≈ 7e7``), so its ``R``, solution and singular values are those of a Householder QR.
#: Beyond it (or a non-finite factor: a rank-deficient ``A``) ``idim_ls`` solves again by ``"svd"``.
CHOLQR_CONDITION = 1e7


def _cholqr_solve(a, b, first: bool = False):
    """``(x, s, inverse)``: the least-squares solution of ``a x ≈ b``, ``a``'s singular values and
    ``(aᵀa)⁻¹``, by CholeskyQR2 (``R₁ = chol(aᵀa)``, ``Q₁ = a R₁⁻¹``, ``R₂ = chol(Q₁ᵀQ₁)``, ``R = R₂R₁``,
    ``x = R⁻¹ R₂⁻ᵀ Q₁ᵀ b``) and the SVD of the ``p × p`` ``R``: four passes of matrix products over the
    tall ``a``, where LAPACK's SVD-based ``gelsd`` (``jnp.linalg.lstsq``) bidiagonalises it (2.3 s
    against ~0.2 s for 42 000 × 58 on this machine). Exact for ``CHOLQR_CONDITION``-conditioned ``a``;
    a rank-deficient ``a`` gives non-finite results (the caller then takes ``"svd"``). Zero rows
    (padding) change nothing."""
    from jax.scipy.linalg import solve_triangular

    r1 = jnp.linalg.cholesky(a.T @ a).T
    q1 = solve_triangular(r1, a.T, trans=1).T
    r2 = jnp.linalg.cholesky(q1.T @ q1).T
    r = r2 @ r1
    x = solve_triangular(r, solve_triangular(r2, q1.T @ b, trans=1))
    r_inv = solve_triangular(r, jnp.eye(a.shape[1], dtype=a.dtype))
    return x, jnp.linalg.svd(r, compute_uv=False), r_inv @ r_inv.T


def _svd_solve(a, b, first: bool = False):
    """``(x, s, inverse)`` as ``_cholqr_solve``, by LAPACK's SVD-based ``gelsd`` (``jnp.linalg.lstsq``)."""
    x, _, _, s = jnp.linalg.lstsq(a, b)
    return x, s, jnp.linalg.inv(a.T @ a)


def _qr_solve(a, b, first: bool = False):
    """``(x, s, inverse)`` as ``_cholqr_solve``, by ``a = Q R`` (``[a | b]``'s ``R`` factor gives ``Qᵀ b``, so
    ``Q`` is never formed) and the ``p × p`` ``R`` (``a``'s singular values are ``R``'s): what LAPACK's
    ``gelsd`` does for a tall matrix (a QR first), on ``p + 1`` columns; ``a⁺ b = R⁺ Qᵀ b``, singular values
    below ``lstsq``'s cut-off (``eps · max(rows, p) · s₀``) dropped as it drops them, ``(aᵀa)⁻¹ = V S⁻² Vᵀ``
    by the SVD ``R = U S Vᵀ``. ``first`` (the unweighted problem, whose solution only gives the weights):
    the singular values alone and, at full rank, back substitution ``x = R⁻¹ Qᵀ b`` (a ``lax.cond``: the
    SVD's vectors only for a rank-deficient ``R``), no inverse. The final solve stays on the SVD: the
    consistent LS, which starts from its residual std, moved by 1e-10 of its held-out RMSE on the tiny
    benchmark with back substitution (1e-13 with the SVD). Under ``vmap`` (the benchmark's trials, rows of
    ~1000 × 60) faster than ``lstsq``'s SVD of all rows."""
    from jax.scipy.linalg import solve_triangular

    rows, p = a.shape
    r = jnp.linalg.qr(jnp.concatenate([a, b[:, None]], axis=1), mode="r")
    factor, qtb = r[:p, :p], r[:p, p]

    def pseudo_inverse(_):
        u, s, vt = jnp.linalg.svd(factor)
        cut = jnp.finfo(a.dtype).eps * max(rows, p) * s[0]
        inv = jnp.where(s > cut, 1.0 / jnp.where(s > cut, s, 1.0), 0.0)
        return vt.T @ (inv * (u.T @ qtb)), s, (vt.T * inv**2) @ vt

    if not first:
        return pseudo_inverse(None)
    s = jnp.linalg.svd(factor, compute_uv=False)
    cut = jnp.finfo(a.dtype).eps * max(rows, p) * s[0]
    x = jax.lax.cond(s[-1] > cut, lambda _: solve_triangular(factor, qtb), lambda _: pseudo_inverse(None)[0], None)
    return x, s, None


_SOLVERS = {"svd": _svd_solve, "cholqr": None, "qr": _qr_solve}


def ls_kernel(
    w, y, weighted: bool = True, keep_first: bool = True, lags: int = 0, solver: str = "svd", count=None
) -> LSFit:
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
    ``solver``: ``"svd"`` (LAPACK's ``gelsd``, any rank), ``"qr"`` (``_qr_solve``: a QR of ``[A | b]`` and
    the SVD of its ``R``, any rank; the benchmark's batched trials) or ``"cholqr"`` (CholeskyQR2,
    ``_cholqr_solve``: an order of magnitude faster on a fit's tall rows, exact up to ``CHOLQR_CONDITION``;
    the caller checks ``condition`` and the results' finiteness and falls back). ``count``: the number of rows before zero
    padding (traced; default all): ``idim_ls`` pads the rows to a few sizes so that fits on different
    numbers of rows (folds, cut-offs, runs of any length) share compiled programs; zero rows change
    neither the solution nor the scores.
    """
    rows, joints, p = w.shape
    if solver not in _SOLVERS:
        raise ValueError(f"ls_kernel: solver must be one of {list(_SOLVERS)}, got {solver!r}.")
    solve = _cholqr_solve if solver == "cholqr" else _SOLVERS[solver]
    n_rows = rows if count is None else count
    scale0 = _jnp_unit_columns(w.reshape(-1, p))
    a0 = (w / scale0).reshape(-1, p)
    if weighted:
        x0, s0, _ = solve(a0, y.reshape(-1), first=True)
        first_rank, _ = _jnp_rank_condition(a0, s0, n_rows * joints)
        resid = y - jnp.einsum("njp,p->nj", w / scale0, x0)
        sigma = jnp.sqrt(jnp.sum(resid**2, axis=0) / (n_rows - p / joints))
    else:
        first_rank, _ = _jnp_rank_condition(a0, None, n_rows * joints)
        sigma = jnp.ones(joints, w.dtype)
    ws = (w / sigma[None, :, None]).reshape(-1, p)
    scale = _jnp_unit_columns(ws)
    a = ws / scale
    x, s, inverse = solve(a, (y / sigma).reshape(-1))
    theta = x / scale
    resid = y - jnp.einsum("njp,p->nj", w, theta)
    weighted = (resid / sigma).reshape(-1)
    covariance = ls_covariance(inverse, a, weighted, joints, lags, n_rows * joints) / jnp.outer(scale, scale)
    rank, condition = _jnp_rank_condition(a, s, n_rows * joints)
    return LSFit(
        theta,
        covariance,
        rank,
        condition,
        jnp.sqrt(jnp.sum(resid**2, axis=0) / n_rows),
        sigma,
        first_rank,
        a0 if keep_first else None,
        scale0 if keep_first else None,
    )


_ls_kernel_jit = jax.jit(ls_kernel, static_argnums=(2, 3, 4, 5))


#: Passes of ``bounded_solve``'s active-set loop allowed, per parameter (Lawson–Hanson ends in far fewer: a pass
#: fixes or frees a parameter, and the start already fixes those the unbounded solution puts out of bounds).
BOUNDED_PASSES = 3


def bounded_solve(a, b, lower, upper):
    """``(x, passes, converged)``: ``min |a x − b|`` subject to ``lower ≤ x ≤ upper`` (``±inf``: no bound), pure JAX
    (``jit``/``vmap``-able): the active-set method of Lawson and Hanson for bounds (Stark and Parker's BVLS,
    scipy's ``lsq_linear(method="bvls")``) on the ``p × p`` factor ``R`` of ``a``'s QR (``[a | b]``'s ``R`` gives
    ``Qᵀ b``).

    Start: the unbounded solution clipped, the parameters it puts outside their bounds fixed there. Each pass
    solves for the free parameters with the fixed ones held (a QR of ``R``'s free columns stacked on the fixed
    ones' unit rows). If that point is feasible it is taken, and of the fixed parameters whose gradient points
    into their bound's interior (a KKT multiplier of the wrong sign) the worst is freed; if none, the solution is
    found. If not feasible, the step towards it stops at the first bound it meets, and the parameters there are
    fixed. At most ``BOUNDED_PASSES · p`` passes; ``converged`` is ``False`` if they run out."""
    from jax.scipy.linalg import solve_triangular

    p = a.shape[1]
    r = jnp.linalg.qr(jnp.concatenate([a, b[:, None]], axis=1), mode="r")
    factor, qtb = r[:p, :p], r[:p, p]
    lower, upper = jnp.broadcast_to(lower, (p,)), jnp.broadcast_to(upper, (p,))
    unbounded = solve_triangular(factor, qtb)
    tiny = 1e-12 * (1.0 + jnp.abs(unbounded))
    x0 = jnp.clip(unbounded, lower, upper)
    fixed0 = (unbounded < lower) | (unbounded > upper)
    gradient_tol = 1e-12 * (1.0 + jnp.linalg.norm(qtb))

    def subproblem(x, fixed):
        free = ~fixed
        held = factor @ jnp.where(fixed, x, 0.0)
        stacked = jnp.concatenate([factor * free[None, :], jnp.diag(fixed.astype(a.dtype))])
        q, rr = jnp.linalg.qr(stacked)
        z = solve_triangular(rr, q.T @ jnp.concatenate([qtb - held, jnp.zeros(p, a.dtype)]))
        return jnp.where(fixed, x, z)

    def body(state):
        x, fixed, passes, _ = state
        z = subproblem(x, fixed)
        feasible = jnp.all(fixed | ((z >= lower - tiny) & (z <= upper + tiny)))
        # Feasible: take it; free the fixed parameter whose multiplier has the wrong sign by the most.
        zc = jnp.clip(z, lower, upper)
        gradient = factor.T @ (factor @ zc - qtb)
        at_lower, at_upper = fixed & (zc <= lower), fixed & (zc >= upper)
        wrong = jnp.where(at_lower, -gradient, jnp.where(at_upper, gradient, -jnp.inf))
        worst = jnp.argmax(wrong)
        done = wrong[worst] <= gradient_tol
        freed = fixed.at[worst].set(jnp.where(done, fixed[worst], False))
        # Not feasible: step towards z as far as the bounds allow, fix the parameters the step stops at.
        step = z - x
        out_low, out_high = ~fixed & (z < lower), ~fixed & (z > upper)
        ratio = jnp.where(out_low, (lower - x) / jnp.where(out_low, step, 1.0), jnp.inf)
        ratio = jnp.where(out_high, (upper - x) / jnp.where(out_high, step, 1.0), ratio)
        alpha = jnp.clip(jnp.min(ratio), 0.0, 1.0)
        moved = x + alpha * step
        hit = (out_low | out_high) & (ratio <= alpha + 1e-12)
        moved = jnp.where(hit & out_low, lower, jnp.where(hit & out_high, upper, moved))
        return (
            jnp.where(feasible, zc, moved),
            jnp.where(feasible, freed, fixed | hit),
            passes + 1,
            feasible & done,
        )

    def going(state):
        return ~state[3] & (state[2] < BOUNDED_PASSES * p)

    x, _, passes, converged = jax.lax.while_loop(going, body, (x0, fixed0, jnp.asarray(0), jnp.asarray(False)))
    return x, passes, converged
