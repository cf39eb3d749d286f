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

import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = [
    "RCOND",
    "INFORMATION_RCOND",
    "solve_2x2",
    "inverse_2x2",
    "small_qr",
    "upper_triangular_inverse",
    "lstsq",
    "triangular_rcond",
]

#: Relative singular value of a column-scaled matrix below which it is rank-deficient.
RCOND = 1e-10

#: The same rule for an information (Gram) matrix ``AᵀA``, whose singular values are the squares.
INFORMATION_RCOND = RCOND**2


def solve_2x2(a: Array, b: Array) -> Array:
    """``a⁻¹ b`` for ``a`` of shape ``(..., 2, 2)`` and ``b`` of shape ``(..., 2)``, by Cramer's rule.

    ``x1 = (a11 b1 − a01 b2) / det`` style, written out: no LAPACK call, exact for ``a`` exactly
    representable. A singular ``a`` gives ``inf``/``nan`` (check ``det`` yourself if it can be).
    """
    a00, a01, a10, a11 = a[..., 0, 0], a[..., 0, 1], a[..., 1, 0], a[..., 1, 1]
    det = a00 * a11 - a01 * a10
    return jnp.stack([a11 * b[..., 0] - a01 * b[..., 1], a00 * b[..., 1] - a10 * b[..., 0]], -1) / det[..., None]


def inverse_2x2(z: Array) -> Array:
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
