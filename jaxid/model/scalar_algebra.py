"""Trace-time algebra on scalar terms for ``jaxid.model.unrolled``: a term is a 0-d array (a ``(B,)``
vector under ``vmap``) or a Python float, a compile-time constant, so a product with a zero is never
emitted and a unit factor costs nothing; 3-vectors and 3×3 matrices are tuples of terms; and the two
unrolled solves of a small symmetric system (Cholesky, and ``LDLᵀ`` for a matrix that need not be positive
definite).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = [
    "Term",
    "Vec",
    "Mat",
    "ZERO",
    "snap",
    "mul",
    "total",
    "neg",
    "add",
    "sub",
    "scale",
    "dot",
    "cross",
    "matvec",
    "tmatvec",
    "cholesky_solve",
    "ldl_solve",
]

Term = Array | float
Vec = tuple[Term, Term, Term]
Mat = tuple[Vec, Vec, Vec]

_SNAP = 4 * float(np.finfo(float).eps)


def snap(x: float) -> float:
    x = float(x)
    for exact in (0.0, 1.0, -1.0):
        if abs(x - exact) <= _SNAP:
            return exact
    return x


def mul(a: Term, b: Term) -> Term:
    if isinstance(b, float) and not isinstance(a, float):
        a, b = b, a
    if isinstance(a, float):
        if a == 0.0:
            return 0.0
        if isinstance(b, float):
            return a * b
        if a == 1.0:
            return b
        if a == -1.0:
            return -b
    return a * b


def total(terms: Sequence[Term]) -> Term:
    const, out = 0.0, None
    for t in terms:
        if isinstance(t, float):
            const += t
        else:
            out = t if out is None else out + t
    if out is None:
        return const
    return out if const == 0.0 else out + const


def neg(a: Term) -> Term:
    return -a


def add(u: Vec, v: Vec) -> Vec:
    return tuple(total((a, b)) for a, b in zip(u, v, strict=True))


def sub(u: Vec, v: Vec) -> Vec:
    return tuple(total((a, neg(b))) for a, b in zip(u, v, strict=True))


def scale(s: Term, v: Vec) -> Vec:
    return tuple(mul(s, a) for a in v)


def dot(u: Sequence[Term], v: Sequence[Term]) -> Term:
    return total([mul(a, b) for a, b in zip(u, v, strict=True)])


def cross(u: Vec, v: Vec) -> Vec:
    return (
        total((mul(u[1], v[2]), neg(mul(u[2], v[1])))),
        total((mul(u[2], v[0]), neg(mul(u[0], v[2])))),
        total((mul(u[0], v[1]), neg(mul(u[1], v[0])))),
    )


def matvec(m: Mat, v: Vec) -> Vec:
    return tuple(dot(row, v) for row in m)


def tmatvec(m: Mat, v: Vec) -> Vec:
    """``mᵀ v``."""
    return tuple(dot((m[0][k], m[1][k], m[2][k]), v) for k in range(3))


ZERO: Vec = (0.0, 0.0, 0.0)


def cholesky_solve(h: list[list[Term]], b: list[Term]) -> list[Term]:
    """``x`` with ``H x = b`` (``h`` the lower triangle) by an unrolled Cholesky factorisation; a
    matrix that is not positive definite gives ``nan`` (as ``jaxid.linalg.cholesky``)."""
    n = len(b)
    low = [[None] * n for _ in range(n)]
    inv = [None] * n
    for j in range(n):
        d = total([h[j][j], *(neg(low[j][k] * low[j][k]) for k in range(j))])
        diag = jnp.sqrt(d)
        inv[j] = 1.0 / diag
        low[j][j] = diag
        for i in range(j + 1, n):
            low[i][j] = total([h[i][j], *(neg(low[i][k] * low[j][k]) for k in range(j))]) * inv[j]
    y = [None] * n
    for i in range(n):
        y[i] = total([b[i], *(neg(low[i][k] * y[k]) for k in range(i))]) * inv[i]
    x = [None] * n
    for i in range(n - 1, -1, -1):
        x[i] = total([y[i], *(neg(low[k][i] * x[k]) for k in range(i + 1, n))]) * inv[i]
    return x


def ldl_solve(h: list[list[Term]], b: list[Term]) -> list[Term]:
    """``x`` with ``H x = b`` (``h`` the lower triangle) by an unrolled ``LDLᵀ`` factorisation (``L`` unit
    lower triangular, ``D`` diagonal, no pivoting, no square root): for a symmetric matrix whose leading
    minors are not zero, positive definite or not."""
    n = len(b)
    low = [[None] * n for _ in range(n)]  # L below the diagonal
    scaled = [[None] * n for _ in range(n)]  # L[j][k] d[k]
    d, inv = [None] * n, [None] * n
    for j in range(n):
        for i in range(j):
            scaled[j][i] = total([h[j][i], *(neg(scaled[j][k] * low[i][k]) for k in range(i))])
            low[j][i] = scaled[j][i] * inv[i]
        d[j] = total([h[j][j], *(neg(scaled[j][k] * low[j][k]) for k in range(j))])
        inv[j] = 1.0 / d[j]
    y = [None] * n
    for i in range(n):
        y[i] = total([b[i], *(neg(low[i][k] * y[k]) for k in range(i))])
    x = [None] * n
    for i in range(n - 1, -1, -1):
        x[i] = total([y[i] * inv[i], *(neg(low[k][i] * x[k]) for k in range(i + 1, n))])
    return x
