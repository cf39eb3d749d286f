"""The interior-point (barrier) solver of ``consistent_least_squares`` on the LMIs ``J_i ⪰ 0``,
``Ia, fv, fc ≥ 0``, and the Lagrangian duality gap that certifies its stop (and any iterate's
distance to the LMI optimum, without an SDP solver). Pure JAX; ``jaxid.estimate.consistency.least_squares``
holds the problem and its other solvers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ...types import Status
from .parametrisation import _NON_NEGATIVE_JOINT_BLOCKS, _PSEUDO_INERTIA_BASIS

#: Interior-point constants (``_interior_point``): the barrier weight's growth per centring and the
#: Newton decrement ``λ² / 2`` below which the barrier problem counts as centred (self-concordant
#: units: affine invariant, so no scaling of the cost enters).
_BARRIER_GROWTH, _CENTRED = 20.0, 1e-3
#: Step lengths tried along each Newton direction (the damped ``1 / (1 + λ)``, always feasible and
#: decreasing for a self-concordant barrier, is tried as well).
_STEPS = 0.5 ** np.arange(8)


def _link_barrier(phi: Array, n: int) -> tuple[Array, Array]:
    """``(−Σ log det J_i, all J_i ≻ 0)`` of the links of a standard vector (``(n, 4, 4)`` Cholesky)."""
    j = jnp.tensordot(phi[: 10 * n].reshape(n, 10), _PSEUDO_INERTIA_BASIS, axes=1)
    lower = jnp.linalg.cholesky(j)
    diagonal = jnp.diagonal(lower, axis1=-2, axis2=-1)
    ok = jnp.all(jnp.isfinite(diagonal) & (diagonal > 0))
    return -2.0 * jnp.sum(jnp.log(jnp.where(ok, diagonal, 1.0))), ok


def _barrier(phi: Array, n: int) -> Array:
    """The logarithmic barrier of the consistent set, ``−Σ log det J_i − Σ log p_j`` over the links and
    ``p = (Ia, fv, fc)``; ``+inf`` outside the open set. Self-concordant, parameter ``ν = 7 n``."""
    links, ok = _link_barrier(phi, n)
    p = phi[10 * n : 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n]
    ok = ok & jnp.all(p > 0)
    return jnp.where(ok, links - jnp.sum(jnp.log(jnp.where(ok, p, 1.0))), jnp.inf)


def _barrier_derivatives(phi: Array, n: int) -> tuple[Array, Array]:
    """Gradient ``(s,)`` and Hessian ``(s, s)`` of ``_barrier`` at a strictly consistent ``φ``:
    per link ``−tr(J⁻¹ B_k)`` and ``tr(J⁻¹ B_k J⁻¹ B_l)`` (``B_k`` the pseudo-inertia basis), per
    joint bound ``−1/p`` and ``1/p²``; zero for the offsets."""
    s = phi.shape[0]
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    j = jnp.tensordot(phi[: 10 * n].reshape(n, 10), _PSEUDO_INERTIA_BASIS, axes=1)
    g = jnp.einsum("nab,kbc->nkac", jnp.linalg.inv(j), _PSEUDO_INERTIA_BASIS)  # J⁻¹ B_k
    link_gradient = -jnp.einsum("nkaa->nk", g)
    link_hessian = jnp.einsum("nkab,nlba->nkl", g, g)
    p = phi[10 * n : k]
    gradient = jnp.concatenate([link_gradient.reshape(-1), -1.0 / p, jnp.zeros(s - k)])
    hessian = jnp.zeros((s, s), dtype=phi.dtype)
    for i in range(n):
        hessian = hessian.at[10 * i : 10 * i + 10, 10 * i : 10 * i + 10].set(link_hessian[i])
    index = jnp.arange(10 * n, k)
    hessian = hessian.at[index, index].set(1.0 / p**2)
    return gradient, hessian


def _dual_gap(phi: Array, a: Array, r: Array, c: Array) -> Array:
    """``‖R φ − c‖² − d(a)``, ``d(a) = min_ψ ‖R ψ − c‖² − aᵀψ = −‖u‖² − 2 uᵀc`` (``u = R⁻ᵀ a / 2``):
    the duality gap of a feasible ``φ`` and the multipliers whose gradient is ``a`` (``a_k = ⟨Λ_i, B_k⟩``
    for a link, ``ν_j`` for a joint bound, 0 for the offsets). When the ``Λ_i ⪰ 0`` and ``ν ≥ 0``,
    weak duality makes it an upper bound on ``‖R φ − c‖² −`` the LMI problem's optimum."""
    u = 0.5 * jax.scipy.linalg.solve_triangular(r, a, trans="T", lower=False)
    return jnp.sum((r @ phi - c) ** 2) + u @ u + 2.0 * u @ c


def _interior_point(
    r: Array, c: Array, phi0: Array, lower_bound: Array, *, gap_tolerance: Array, max_steps: int
) -> tuple[Array, Array, Array, Array]:
    """Minimise ``‖R φ − c‖²`` over the consistent set (``J_i ⪰ 0``, ``Ia, fv, fc ≥ 0``) by a
    barrier method (Boyd & Vandenberghe, *Convex Optimization*, §11.3): Newton steps on
    ``t ‖R φ − c‖² + barrier(φ)`` (``_barrier``, self-concordant, ``ν = 7 n``) from the strictly
    consistent ``φ₀``, each along the exact Newton direction with the best of the step lengths
    ``_STEPS`` and the damped ``1/(1+λ)`` (``λ`` the Newton decrement: that one always stays inside
    and decreases), ``t`` raised ×``_BARRIER_GROWTH`` whenever ``λ²/2 ≤ _CENTRED``; starting at
    ``t₀ = ν / (‖R φ₀ − c‖² − lower_bound)``.

    Certified stop: the multipliers ``Λ_i = J_i⁻¹ / t``, ``ν_j = 1 / (t p_j)`` are dual feasible at
    every iterate, so ``_dual_gap`` at them bounds the distance to the LMI optimum (``ν / t`` at an
    exact centre); it stops when that bound is ``≤ gap_tolerance`` (``CONVERGED``), or after
    ``max_steps`` Newton steps (``MAX_ITERATIONS``). Returns ``(φ, iterations, status, gap)``.
    Fixed shapes throughout (a ``lax.while_loop``): ``vmap``-able.
    """
    s = phi0.shape[0]
    n = s // 14
    nu = 7.0 * n
    gram = 2.0 * r.T @ r
    steps = jnp.asarray(_STEPS, dtype=phi0.dtype)

    def gap_of(phi, t):
        gradient, _ = _barrier_derivatives(phi, n)
        return jnp.minimum(_dual_gap(phi, -gradient / t, r, c), _duality_gap(phi, r, c))

    def keep_going(state):
        *_, k, done = state
        return (k < max_steps) & ~done

    def step(state):
        phi, t, _, k, _ = state
        gradient, hessian = _barrier_derivatives(phi, n)
        g = t * gram @ phi - 2.0 * t * r.T @ c + gradient
        h = t * gram + hessian
        lower = jnp.linalg.cholesky(h)
        delta = -jax.scipy.linalg.cho_solve((lower, True), g)
        decrement = -(g @ delta)  # λ²
        centred = 0.5 * decrement <= _CENTRED
        lengths = jnp.concatenate([steps, (1.0 / (1.0 + jnp.sqrt(jnp.maximum(decrement, 0.0))))[None]])
        # The change of the objective along the step, the quadratic part in closed form (no
        # cancellation of t ‖R φ − c‖² against itself once t is large).
        e, rd = r @ phi - c, r @ delta
        changes = t * (2.0 * lengths * (e @ rd) + lengths**2 * (rd @ rd))
        changes = changes + jax.vmap(lambda a: _barrier(phi + a * delta, n))(lengths) - _barrier(phi, n)
        best = jnp.argmin(jnp.where(jnp.isfinite(changes), changes, jnp.inf))
        moved = phi + lengths[best] * delta
        ok = jnp.isfinite(changes[best]) & jnp.all(jnp.isfinite(delta)) & (changes[best] < 0)
        # No decrease at working precision: the barrier problem is as centred as it gets.
        centred = centred | ~ok
        phi = jnp.where(centred, phi, moved)
        t = jnp.where(centred, t * _BARRIER_GROWTH, t)
        gap = gap_of(phi, t)
        done = (gap <= gap_tolerance) | ~jnp.isfinite(t)
        return phi, t, gap, k + 1, done

    f0 = jnp.sum((r @ phi0 - c) ** 2)
    t0 = nu / jnp.maximum(f0 - lower_bound, jnp.finfo(phi0.dtype).tiny)
    state = (phi0, t0, gap_of(phi0, t0), jnp.asarray(0), gap_of(phi0, t0) <= gap_tolerance)
    phi, _, gap, k, done = jax.lax.while_loop(keep_going, step, state)
    converged = gap <= gap_tolerance
    status = jnp.where(converged, Status.CONVERGED, jnp.where(done, Status.FAILED, Status.MAX_ITERATIONS))
    return phi, k, status, gap


def _adjoint_inverse() -> np.ndarray:
    """``K (16, 10)``: the symmetric 4×4 matrix ``Λ`` (flattened) with ``⟨Λ, J(e_k)⟩ = g_k`` for a
    10-vector ``g``, i.e. the inverse of the adjoint of the linear map ``pseudo_inertia``."""
    adjoint = _PSEUDO_INERTIA_BASIS.reshape(10, 16)
    symmetric = np.zeros((16, 10))  # the 10 upper-triangle entries of a symmetric 4×4 matrix
    for index, (i, j) in enumerate(zip(*np.triu_indices(4), strict=True)):
        symmetric[4 * i + j, index] = symmetric[4 * j + i, index] = 1.0
    return symmetric @ np.linalg.inv(adjoint @ symmetric)


_ADJOINT_INVERSE = _adjoint_inverse()


def _duality_gap(phi: Array, r: Array, c: Array) -> Array:
    """An upper bound on ``‖R φ − c‖² − min over the consistent set`` (the LMI problem's optimum):
    the Lagrangian dual of ``min ‖R ψ − c‖²  s.t.  J_i(ψ) ⪰ 0, Ia, fv, fc ≥ 0`` at multipliers read
    off the gradient ``g = 2 Rᵀ (R φ − c)`` (per link the symmetric ``Λ_i`` with ``⟨Λ_i, J(·)⟩ = g_i``,
    its negative eigenvalues set to 0; ``ν = max(g, 0)`` for the joint bounds, 0 for the offsets):
    ``d = −‖u‖² − 2 uᵀ c`` with ``u = R⁻ᵀ a / 2``, ``a`` the gradient those multipliers stand for.
    Weak duality makes ``cost − d ≥ cost − optimum`` for any feasible ``φ``; it tends to 0 at the
    optimum, more slowly than the cost itself where ``R`` is ill-conditioned."""
    s = phi.shape[0]
    n = s // 14
    g = 2.0 * r.T @ (r @ phi - c)
    multipliers = (g[: 10 * n].reshape(n, 10) @ _ADJOINT_INVERSE.T).reshape(n, 4, 4)
    eigenvalues, vectors = jnp.linalg.eigh(multipliers)
    multipliers = jnp.einsum("kij,kj,klj->kil", vectors, jnp.maximum(eigenvalues, 0.0), vectors)
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    a = jnp.concatenate(
        [
            (multipliers.reshape(n, 16) @ _PSEUDO_INERTIA_BASIS.reshape(10, 16).T).reshape(-1),
            jnp.maximum(g[10 * n : k], 0.0),
            jnp.zeros(s - k),
        ]
    )
    u = 0.5 * jax.scipy.linalg.solve_triangular(r, a, trans="T", lower=False)
    return jnp.sum((r @ phi - c) ** 2) + u @ u + 2.0 * u @ c
