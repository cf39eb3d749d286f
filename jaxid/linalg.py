"""Linear algebra on small matrices, LAPACK-free, with one singularity policy.

Every small solve, inverse and least-squares fit in jaxid goes through this module, so that

- the code compiles to plain XLA arithmetic (no LAPACK custom call): jaxlib's CPU LAPACK kernels
  split a batched call over XLA's intra-op thread pool and block until the pieces finish; two such
  calls running concurrently in one compiled program (e.g. two per-joint fits, or a fit next to an
  optimiser loop) can occupy every pool thread and wait on each other forever — a deadlock seen on
  2 cores for batches of a few hundred trials (``docs/`` has a reproducer). ``tests/test_lapack.py``
  enforces this for every estimator and the batched simulator;
- one rule decides when a problem is **singular**: a matrix is treated as singular when its
  relative smallest singular value, after scaling its columns (or rows and columns of a symmetric
  information matrix) to unit size, is below ``RCOND`` (``is_singular``, ``scaled_rcond``).

Functions work on the trailing matrix axes and are ``jit``/``vmap``/``grad``-compatible.
"""

from __future__ import annotations

from typing import Any

import equinox.internal as eqxi
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, ArrayLike, Float, Inexact

# lineax's helpers for flattening operator input/output structures (as its own solvers use them).
from lineax._solver.misc import pack_structures, ravel_vector, transpose_packed_structures, unravel_solution

__all__ = [
    "RCOND",
    "INFORMATION_RCOND",
    "solve",
    "inverse",
    "cholesky",
    "solve_triangular",
    "information_rcond",
    "is_singular_information",
    "SmallSolver",
    "solve_2x2",
    "inverse_2x2",
    "small_qr",
    "upper_triangular_inverse",
    "lstsq",
    "triangular_rcond",
]

#: Relative size of the smallest diagonal entry of ``R`` (``A = QR`` of the column-scaled ``A``),
#: an estimate of its relative smallest singular value, below which ``A`` counts as rank-deficient.
RCOND = 1e-7

#: The same rule for an information (Gram) matrix ``AᵀA``, whose singular values are the squares.
INFORMATION_RCOND = RCOND**2


def solve_2x2(a: ArrayLike, b: ArrayLike) -> Array:
    """``a⁻¹ b`` for ``a`` of shape ``(..., 2, 2)`` and ``b`` of shape ``(..., 2)``, by Cramer's rule.

    ``x1 = (a11 b1 − a01 b2) / det`` style, written out: no LAPACK call, exact for ``a`` exactly
    representable. A singular ``a`` gives ``inf``/``nan`` (check ``det`` yourself if it can be).
    """
    a00, a01, a10, a11 = a[..., 0, 0], a[..., 0, 1], a[..., 1, 0], a[..., 1, 1]
    det = a00 * a11 - a01 * a10
    return jnp.stack([a11 * b[..., 0] - a01 * b[..., 1], a00 * b[..., 1] - a10 * b[..., 0]], -1) / det[..., None]


def inverse_2x2(z: ArrayLike) -> Array:
    """Closed-form inverse of a stack of 2x2 matrices ``(..., 2, 2)`` (real or complex)."""
    a, b, c, d = z[..., 0, 0], z[..., 0, 1], z[..., 1, 0], z[..., 1, 1]
    det = a * d - b * c
    return jnp.stack([jnp.stack([d, -b], -1), jnp.stack([-c, a], -1)], -2) / det[..., None, None]


def small_qr(a: Float[Array, "n p"]) -> tuple[Float[Array, "n p"], Float[Array, "p p"]]:
    """Thin QR of a tall matrix with few columns by classical Gram–Schmidt with
    re-orthogonalisation (CGS2), unrolled over the static column count; no LAPACK call."""
    n, p = a.shape
    qs = []
    r = jnp.zeros((p, p), dtype=a.dtype)
    for j in range(p):
        v = a[:, j]
        coef = jnp.zeros((j,), dtype=a.dtype)
        if j:
            q = jnp.stack(qs, axis=1)
            for _ in range(2):
                c = q.T @ v
                v = v - q @ c
                coef = coef + c
        norm = jnp.sqrt(jnp.sum(v * v))
        r = r.at[:j, j].set(coef).at[j, j].set(norm)
        qs.append(v / jnp.where(norm > 0, norm, 1.0))
    return jnp.stack(qs, axis=1), r


def upper_triangular_inverse(r: Float[Array, "p p"]) -> Float[Array, "p p"]:
    """Inverse of an upper-triangular matrix by unrolled back substitution; no LAPACK call."""
    p = r.shape[0]
    rows = [None] * p
    eye = jnp.eye(p, dtype=r.dtype)
    for i in range(p - 1, -1, -1):
        acc = eye[i]
        for k in range(i + 1, p):
            acc = acc - r[i, k] * rows[k]
        rows[i] = acc / r[i, i]
    return jnp.stack(rows, axis=0)


def triangular_rcond(r: Float[Array, "p p"]) -> Float[Array, ""]:
    """``min |r_ii| / max |r_ii|`` of a triangular factor: the rank estimate used by ``lstsq``."""
    d = jnp.abs(jnp.diag(r))
    return jnp.min(d) / jnp.max(d)


def lstsq(
    a: Float[Array, "n p"], b: Float[Array, " n"], rcond: float = RCOND
) -> tuple[Float[Array, " p"], Float[Array, "p n"], Array]:
    """``argmin ||a θ − b||`` by a thin QR of the column-scaled ``a`` (``small_qr``, no LAPACK).

    Returns ``(θ, pinv, singular)``: the solution, the pseudo-inverse ``(p, n)`` and a bool that
    is ``True`` if ``a`` is rank-deficient (a diagonal entry of ``R`` below ``rcond`` times the
    largest) or not finite; the solution is then not to be used (the deficient directions are
    regularised so that it stays finite).
    """
    scale = jnp.sqrt(jnp.sum(a * a, axis=0))
    scale = jnp.where(scale > 0, scale, 1.0)
    q, r = small_qr(a / scale)
    d = jnp.abs(jnp.diag(r))
    singular = ~(jnp.all(jnp.isfinite(r)) & (jnp.min(d) > rcond * jnp.max(d)))
    r_safe = r + jnp.diag(jnp.where(d > rcond * jnp.max(d), 0.0, 1.0))
    pinv = upper_triangular_inverse(r_safe) @ q.T / scale[:, None]
    return pinv @ b, pinv, singular


def solve(a: Inexact[Array, "n n"], b: Array) -> Array:
    """``a⁻¹ b`` for a small square ``a`` ``(n, n)`` and ``b`` ``(n,)`` or ``(n, k)``, real or complex.

    Gaussian elimination with partial pivoting, unrolled over the static ``n`` (meant for
    ``n ≲ 12``); no LAPACK call. A singular ``a`` gives ``inf``/``nan`` (test it with the policy
    functions first where it can be).
    """
    n = a.shape[0]
    vector = b.ndim == 1
    m = jnp.concatenate([a, b[:, None] if vector else b], axis=1).astype(jnp.result_type(a, b))
    for j in range(n):
        pivot = j + jnp.argmax(jnp.abs(m[j:, j]))
        row_j, row_p = m[j], m[pivot]
        m = m.at[pivot].set(row_j).at[j].set(row_p)
        factors = m[j + 1 :, j] / m[j, j]
        m = m.at[j + 1 :].add(-factors[:, None] * m[j])
    x = [None] * n
    for i in range(n - 1, -1, -1):
        acc = m[i, n:]
        for k in range(i + 1, n):
            acc = acc - m[i, k] * x[k]
        x[i] = acc / m[i, i]
    out = jnp.stack(x, axis=0)
    return out[:, 0] if vector else out


def inverse(a: Inexact[Array, "n n"]) -> Inexact[Array, "n n"]:
    """``a⁻¹`` of a small square matrix, real or complex (``solve(a, I)``); no LAPACK call."""
    return solve(a, jnp.eye(a.shape[0], dtype=a.dtype))


def cholesky(a: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """Lower Cholesky factor ``L`` (``a = L Lᵀ``) of a small symmetric positive definite matrix,
    unrolled over the static ``n``; no LAPACK call. Not positive definite: ``nan`` entries."""
    n = a.shape[0]
    cols = []
    for j in range(n):
        v = a[:, j]
        for k in range(j):
            v = v - cols[k] * cols[k][j]
        d = jnp.sqrt(v[j])
        col = jnp.where(jnp.arange(n) >= j, v / d, 0.0)
        cols.append(col)
    return jnp.stack(cols, axis=1)


def solve_triangular(t: Float[Array, "n n"], b: Array, *, lower: bool) -> Array:
    """``t⁻¹ b`` for a small triangular ``t`` by unrolled substitution; ``b`` ``(n,)`` or ``(n, k)``."""
    n = t.shape[0]
    x = [None] * n
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        acc = b[i]
        others = range(i) if lower else range(i + 1, n)
        for k in others:
            acc = acc - t[i, k] * x[k]
        x[i] = acc / t[i, i]
    return jnp.stack(x, axis=0)


def information_rcond(a: Float[Array, "p p"]) -> Float[Array, ""]:
    """Rank measure of a symmetric positive semi-definite (information, Gram) matrix: scale it to
    unit diagonal, then ``min / max`` of the pivots of its Cholesky (LDLᵀ) factorisation.

    For a Gram matrix ``AᵀA`` this is the square of ``lstsq``'s measure on ``A`` (the pivots
    are the squared diagonal of ``R`` in ``A = QR``); 0 for a rank-deficient or non-finite
    matrix. No LAPACK call.
    """
    p = a.shape[0]
    d = jnp.sqrt(jnp.abs(jnp.diag(a)))
    d = jnp.where(d > 0, d, 1.0)
    s = a / d[:, None] / d[None, :]
    pivots = []
    cols = []
    for j in range(p):
        v = s[:, j]
        for k in range(j):
            v = v - cols[k] * cols[k][j] / pivots[k]
        pivots.append(v[j])
        cols.append(jnp.where(jnp.arange(p) >= j, v, 0.0))
    piv = jnp.stack(pivots)
    ratio = jnp.min(piv) / jnp.max(piv)
    return jnp.where(jnp.all(jnp.isfinite(piv)) & (ratio > 0), ratio, 0.0)


def is_singular_information(a: Float[Array, "p p"], rcond: float = INFORMATION_RCOND) -> Array:
    """The one singularity rule for an information (Gram) matrix: ``information_rcond(a) < rcond``
    (``rcond = RCOND²``: the same threshold ``lstsq`` applies to the regressor itself)."""
    return ~(information_rcond(a) >= rcond)


class SmallSolver(lx.AbstractLinearSolver):
    """A lineax linear solver for small dense operators built from this module's routines (no
    LAPACK call): square systems by ``solve``, tall ones by least squares (``small_qr``), wide
    ones by the minimum-norm solution. Pass it to optimistix (``linear_solver=SmallSolver()``,
    ``adjoint=optx.ImplicitAdjoint(linear_solver=SmallSolver())``) so that optimisers inside a
    batched sweep stay LAPACK-free. Assumes full rank, like ``lineax.QR``.
    """

    def init(self, operator, options: dict[str, Any]):
        del options
        matrix = operator.as_matrix()
        return matrix, eqxi.Static(False), pack_structures(operator)

    def compute(self, state, vector, options: dict[str, Any]):
        del options
        matrix, transposed, packed = state
        if transposed.value:
            matrix = matrix.T
        b = ravel_vector(vector, packed)
        m, n = matrix.shape
        if m == n:
            x = solve(matrix, b)
        elif m > n:
            q, r = small_qr(matrix)
            x = solve_triangular(r, q.T @ b, lower=False)
        else:
            q, r = small_qr(matrix.T)
            x = q @ solve_triangular(r.T, b, lower=True)
        return unravel_solution(x, packed), lx.RESULTS.successful, {}

    def transpose(self, state, options: dict[str, Any]):
        matrix, transposed, packed = state
        return (matrix, eqxi.Static(not transposed.value), transpose_packed_structures(packed)), {}

    def conj(self, state, options: dict[str, Any]):
        matrix, transposed, packed = state
        return (matrix.conj(), transposed, packed), {}

    def assume_full_rank(self):
        return True
