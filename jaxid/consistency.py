"""Physically consistent inertial parameters: the pseudo-inertia test and the log-Cholesky map.

**Pseudo-inertia** (Wensing, Kim, Slotine, "Linear matrix inequalities for physically consistent
inertial parameter identification", RA-L 2017). A link's 10 standard parameters about its frame
origin, ``φ = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]`` (``h = m c`` [kg m], ``Ī`` the
inertia tensor about the origin [kg m²], tensor entries as in URDF: ``Ixy = −∫ x y dm``; the layout
of ``jaxid.model.serial``), are those of some mass distribution iff its pseudo-inertia

    J = [[Σ, h], [hᵀ, m]] = ∫ [r; 1] [r; 1]ᵀ dm,      Σ = ∫ r rᵀ dm = ½ tr(Ī) 𝟙 − Ī,

is positive semidefinite (4×4, [kg m²] / [kg m] / [kg] blocks). ``J ⪰ 0`` implies ``m ≥ 0``, the
inertia about the centre of mass positive semidefinite and its triangle inequalities. The joint
parameters are consistent when armature ``Ia``, viscous ``fv`` and Coulomb ``fc`` friction are
non-negative (offsets are free).

**Log-Cholesky parametrisation** (Rucker, Wensing, "Smooth parameterization of rigid-body inertia",
RA-L 2022). Ten unconstrained numbers per link ``z = (α, d1, d2, d3, s12, s23, s13, t1, t2, t3)``
(``LOG_CHOLESKY_NAMES``) give the upper-triangular factor

    U = e^α [[e^d1, s12, s13, t1],
             [0,    e^d2, s23, t2],
             [0,    0,    e^d3, t3],
             [0,    0,    0,    1 ]],       J = U Uᵀ,

so ``m = e^{2α}``, ``c = t`` (the centre of mass [m]) and ``Σ − m c cᵀ`` (the second moment about
the centre of mass) is ``e^{2α}`` times the Gram matrix of the rows of the 3×3 block. Every real
``z`` gives a positive definite ``J`` (a consistent link with positive mass), and every positive
definite ``J`` comes from exactly one ``z`` (``log_cholesky_from_standard``). The boundary
``J ⪰ 0`` singular (a point mass, a rod, a plate) is approached as some of ``α, d_k → −∞``, never
reached. The same holds for the joint parameters, which this module maps by the **exponential**:
``Ia = e^{z_Ia}``, ``fv = e^{z_fv}``, ``fc = e^{z_fc}`` (positive; 0 is approached, not reached);
the offset is the identity.

**Consistent least squares** (``consistent_least_squares``): minimise over the standard vector
``φ`` (``SerialArm.standard_names`` order, ``14 n`` entries)

    ‖W φ − y‖² + λ ‖φ − φ_prior‖²,      φ = standard_from_unconstrained(z),

i.e. the squared norm of the residual ``[W φ(z) − y; √λ (φ(z) − φ_prior)]``, reduced once by a QR
factorisation to ``‖R φ(z) − c‖² + ρ₀²`` (``s`` rows whatever the number of samples). The cost is
strictly convex in ``φ`` and ``φ(z)`` is a diffeomorphism onto the interior of the consistent set,
so a stationary point in ``z`` is the constrained optimum (the solution of the same problem with
the LMIs ``J_i ⪰ 0``, ``Ia, fv, fc ≥ 0``) when that lies inside, and the optimum is approached
(``z → −∞`` in some coordinates) when it lies on the boundary: some ``J_i`` singular or some
friction at 0, which is the rule, not the exception, whenever the unconstrained estimate is
inconsistent. The tests compare it with an SDP solution (cvxpy + Clarabel).

Solvers. Gauss–Newton and Levenberg–Marquardt (optimistix) drop the curvature of the map, which is
what moves the boundary coordinates: on a UR5 with a short data set LM is still ~1e-4 (relative
cost) above the LMI optimum after 5000 steps. The default, ``"newton"``, takes Newton steps with
the exact Hessian of the cost in ``z`` (``jax.hessian``), Levenberg-damped with Moré's trust-region
rules, from the unconstrained solution projected inside the consistent set (with a margin,
``start_floor``: a coordinate started at the brink, ``e^d ≈ 0``, has a vanishing gradient and
cannot come back if the optimum needs it). On the UR5 tests it stops after 130–1100 iterations
(0.1–1 s on 2 CPU cores) with the cost within 3e-9 of Clarabel's (often below it) and the
identified base combinations within 6e-7. ``ConsistentEstimate.duality_gap`` bounds the distance
to the LMI optimum from the Lagrangian dual, without an SDP solver. Everything is pure JAX
(``jit``/``vmap``-able).

LAPACK. The QR reduction, the start's projection and the dual bound (``eigh`` of 4×4 blocks),
the ``s × s`` Cholesky factorisations of the Newton steps and the checks (``is_physically_consistent``,
``link_eigenvalues``: ``eigvalsh``) call LAPACK on CPU; ``consistent_least_squares`` is not one of
the batched study estimators that ``tests/test_lapack.py`` keeps LAPACK-free.
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .linalg import cholesky
from .model.interface import AbstractArm
from .model.serial import serial_standard_names
from .types import Status, require_float64

__all__ = [
    "LOG_CHOLESKY_NAMES",
    "DEFAULT_REGULARISATION",
    "ConsistentEstimate",
    "pseudo_inertia",
    "standard_from_pseudo_inertia",
    "log_cholesky_factor",
    "standard_from_log_cholesky",
    "log_cholesky_from_standard",
    "standard_from_unconstrained",
    "unconstrained_from_standard",
    "project_to_consistent",
    "link_eigenvalues",
    "is_physically_consistent",
    "consistent_least_squares",
]

#: The 10 log-Cholesky coordinates of a link, in this order (Rucker & Wensing 2022).
LOG_CHOLESKY_NAMES: tuple[str, ...] = ("alpha", "d1", "d2", "d3", "s12", "s23", "s13", "t1", "t2", "t3")

#: Default ``ρ`` of ``consistent_least_squares``: ``λ = ρ · tr(WᵀW) / s`` (``s`` parameters), i.e.
#: ``ρ`` times the mean eigenvalue of ``WᵀW``.
DEFAULT_REGULARISATION = 1e-6

#: Per-joint parameters kept non-negative (by ``exp``) in the standard vector's joint block.
_NON_NEGATIVE_JOINT_BLOCKS = 3  # Ia, fv, fc (then the free offsets)

Solver = Literal["newton", "levenberg_marquardt", "gauss_newton"]


# -- one link ----------------------------------------------------------------------------------


def _pseudo_inertia_basis() -> np.ndarray:
    """``B (10, 4, 4)``: the pseudo-inertia of the standard parameters ``φ`` is ``Σ_k φ_k B[k]``."""
    basis = np.zeros((10, 4, 4))
    basis[0, 3, 3] = 1.0  # m
    for k in range(3):  # h
        basis[1 + k, k, 3] = basis[1 + k, 3, k] = 1.0
    for k, (i, j) in enumerate(((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))):  # Σ = ½ tr(Ī) 𝟙 − Ī
        tensor = np.zeros((3, 3))
        tensor[i, j] = tensor[j, i] = 1.0
        basis[4 + k, :3, :3] = 0.5 * np.trace(tensor) * np.eye(3) - tensor
    return basis


_PSEUDO_INERTIA_BASIS = _pseudo_inertia_basis()


def pseudo_inertia(link: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 4 4"]:
    """The pseudo-inertia ``J = [[½ tr(Ī) 𝟙 − Ī, h], [hᵀ, m]]`` ``(..., 4, 4)`` of a link's 10 standard
    parameters ``[m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]`` about its frame origin ``(..., 10)``.

    Linear in ``link`` (``Σ_k φ_k B_k`` with constant ``B_k``); the link is physically realisable
    iff ``J ⪰ 0`` (Wensing et al. 2017). Units: ``Σ`` block kg m², ``h`` kg m, ``m`` kg. Batch axes
    lead; ``jit``/``vmap``/``grad``-able.
    """
    link = jnp.asarray(link, dtype=float)
    if link.shape[-1:] != (10,):
        raise ValueError(f"pseudo_inertia needs a trailing axis of 10 standard parameters, got {link.shape}.")
    return jnp.tensordot(link, _PSEUDO_INERTIA_BASIS, axes=1)


def standard_from_pseudo_inertia(pseudo: Float[ArrayLike, "*b 4 4"]) -> Float[Array, "*b 10"]:
    """Inverse of ``pseudo_inertia``: ``m = J₃₃``, ``h = J[:3, 3]``, ``Ī = tr(Σ) 𝟙 − Σ`` (the
    symmetric part of ``J`` is read: upper triangle and diagonal). ``(..., 4, 4) → (..., 10)``."""
    j = jnp.asarray(pseudo, dtype=float)
    if j.shape[-2:] != (4, 4):
        raise ValueError(f"standard_from_pseudo_inertia needs trailing axes (4, 4), got {j.shape}.")
    trace = j[..., 0, 0] + j[..., 1, 1] + j[..., 2, 2]
    return jnp.stack(
        [
            j[..., 3, 3],
            j[..., 0, 3],
            j[..., 1, 3],
            j[..., 2, 3],
            trace - j[..., 0, 0],
            -j[..., 0, 1],
            -j[..., 0, 2],
            trace - j[..., 1, 1],
            -j[..., 1, 2],
            trace - j[..., 2, 2],
        ],
        axis=-1,
    )


def log_cholesky_factor(z: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 4 4"]:
    """The upper-triangular factor ``U`` ``(..., 4, 4)`` of ``J = U Uᵀ`` from the log-Cholesky
    coordinates ``z = (α, d1, d2, d3, s12, s23, s13, t1, t2, t3)`` ``(..., 10)`` (module docstring)."""
    z = jnp.asarray(z, dtype=float)
    if z.shape[-1:] != (10,):
        raise ValueError(f"log_cholesky_factor needs a trailing axis of 10 coordinates, got {z.shape}.")
    alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3 = jnp.moveaxis(z, -1, 0)
    zero, one = jnp.zeros_like(alpha), jnp.ones_like(alpha)
    rows = (
        (jnp.exp(d1), s12, s13, t1),
        (zero, jnp.exp(d2), s23, t2),
        (zero, zero, jnp.exp(d3), t3),
        (zero, zero, zero, one),
    )
    u = jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)
    return jnp.exp(alpha)[..., None, None] * u


def standard_from_log_cholesky(z: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 10"]:
    """The standard parameters ``(..., 10)`` of the link with log-Cholesky coordinates ``z``
    ``(..., 10)``: ``standard_from_pseudo_inertia(U Uᵀ)``. Every finite ``z`` gives a consistent
    link (``J ≻ 0`` in exact arithmetic; ``m = e^{2α}`` [kg], centre of mass ``t`` [m])."""
    u = log_cholesky_factor(z)
    return standard_from_pseudo_inertia(u @ jnp.swapaxes(u, -1, -2))


def _upper_cholesky(a: Float[Array, "4 4"]) -> Float[Array, "4 4"]:
    """Upper-triangular ``U`` with ``a = U Uᵀ``: ``P L P`` with ``L`` the lower Cholesky factor of
    ``P a P`` (``P`` the exchange matrix). LAPACK-free (``jaxid.linalg.cholesky``)."""
    flip = jnp.flip(a, axis=(-2, -1))
    return jnp.flip(cholesky(flip), axis=(-2, -1))


def log_cholesky_from_standard(link: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 10"]:
    """Inverse of ``standard_from_log_cholesky`` ``(..., 10) → (..., 10)``, for a link whose
    pseudo-inertia is positive definite: ``α = ½ log m``, ``t = h / m`` and the rest from the
    upper Cholesky factor ``U`` of ``J`` (``d_k = log(U_kk / U_33)``, ``s_ij = U_ij / U_33``).

    A link that is not strictly consistent (``J`` singular or indefinite) gives ``-inf`` or
    ``nan`` entries; no exception (traceable). The round trip is exact to round-off.
    """
    j = pseudo_inertia(link)
    u = jnp.vectorize(_upper_cholesky, signature="(4,4)->(4,4)")(j)
    scale = u[..., 3, 3]
    return jnp.stack(
        [
            jnp.log(scale),
            jnp.log(u[..., 0, 0] / scale),
            jnp.log(u[..., 1, 1] / scale),
            jnp.log(u[..., 2, 2] / scale),
            u[..., 0, 1] / scale,
            u[..., 1, 2] / scale,
            u[..., 0, 2] / scale,
            u[..., 0, 3] / scale,
            u[..., 1, 3] / scale,
            u[..., 2, 3] / scale,
        ],
        axis=-1,
    )


# -- a whole arm -------------------------------------------------------------------------------


def _dof(standard: Array) -> int:
    s = standard.shape[-1] if standard.ndim else 0
    if s == 0 or s % 14:
        raise ValueError(
            f"a SerialArm standard vector has 14 n entries (10 per link, 4 per joint), got a trailing axis of {s}."
        )
    return s // 14


def _as_standard(arm_or_standard: AbstractArm | ArrayLike) -> Array:
    """The standard vector of a ``SerialArm`` (``ValueError`` for another arm type), or the array."""
    if isinstance(arm_or_standard, AbstractArm):
        names = tuple(arm_or_standard.standard_names)
        if len(names) % 14 or names != serial_standard_names(len(names) // 14):
            raise ValueError(
                "physical consistency needs a SerialArm's standard vector (10 link parameters per link, then Ia, fv, "
                f"fc, off per joint); {type(arm_or_standard).__name__} has {list(names)[:4]}…; load the arm with "
                "jaxid.model.urdf.load_arm."
            )
        return arm_or_standard.standard_parameters()
    return jnp.asarray(arm_or_standard, dtype=float)


def standard_from_unconstrained(z: Float[ArrayLike, "*b s"]) -> Float[Array, "*b s"]:
    """The standard vector ``(..., 14 n)`` of an unconstrained vector ``z`` ``(..., 14 n)`` laid out
    like it: per link the 10 log-Cholesky coordinates (``standard_from_log_cholesky``), then per
    joint ``log Ia``, ``log fv``, ``log fc`` (mapped by ``exp``) and the offset (identity). Every
    finite ``z`` gives a physically consistent arm; ``jit``/``vmap``/``grad``-able."""
    z = jnp.asarray(z, dtype=float)
    n = _dof(z)
    batch = z.shape[:-1]
    links = standard_from_log_cholesky(z[..., : 10 * n].reshape(*batch, n, 10)).reshape(*batch, 10 * n)
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    return jnp.concatenate([links, jnp.exp(z[..., 10 * n : k]), z[..., k:]], axis=-1)


def unconstrained_from_standard(standard: Float[ArrayLike, "*b s"]) -> Float[Array, "*b s"]:
    """Inverse of ``standard_from_unconstrained`` ``(..., 14 n) → (..., 14 n)``, for an arm whose
    links have positive definite pseudo-inertias and whose ``Ia``, ``fv``, ``fc`` are positive
    (``project_to_consistent`` makes them so). Otherwise the affected entries are ``-inf``/``nan``."""
    standard = jnp.asarray(standard, dtype=float)
    n = _dof(standard)
    batch = standard.shape[:-1]
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    z_links = log_cholesky_from_standard(standard[..., : 10 * n].reshape(*batch, n, 10)).reshape(*batch, 10 * n)
    return jnp.concatenate([z_links, jnp.log(standard[..., 10 * n : k]), standard[..., k:]], axis=-1)


def project_to_consistent(standard: Float[ArrayLike, "*b s"], *, floor: float = 1e-6) -> Float[Array, "*b s"]:
    """A strictly consistent standard vector near ``standard`` ``(..., 14 n)``: each link's
    pseudo-inertia with its eigenvalues raised to at least ``floor · λ_max(J_i)`` (the nearest such
    matrix in the Frobenius norm), each ``Ia``, ``fv``, ``fc`` raised to at least ``floor ·`` the
    largest magnitude of its kind (``floor`` [SI] when all are 0); offsets kept. A strictly
    consistent input with margins above the floors is returned unchanged (to round-off).

    Used for starting values (``unconstrained_from_standard`` of the result is finite). Uses
    ``jnp.linalg.eigh`` on the 4×4 blocks (a LAPACK call on CPU).
    """
    standard = jnp.asarray(standard, dtype=float)
    n = _dof(standard)
    batch = standard.shape[:-1]
    j = pseudo_inertia(standard[..., : 10 * n].reshape(*batch, n, 10))
    w, v = jnp.linalg.eigh(j)
    w = jnp.maximum(w, floor * jnp.max(jnp.abs(w), axis=-1, keepdims=True))
    links = standard_from_pseudo_inertia(jnp.einsum("...ij,...j,...kj->...ik", v, w, v))
    k = 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n
    joints = standard[..., 10 * n : k].reshape(*batch, _NON_NEGATIVE_JOINT_BLOCKS, n)
    scale = jnp.max(jnp.abs(joints), axis=-1, keepdims=True)
    joints = jnp.maximum(joints, floor * jnp.where(scale > 0, scale, 1.0))
    return jnp.concatenate(
        [links.reshape(*batch, 10 * n), joints.reshape(*batch, _NON_NEGATIVE_JOINT_BLOCKS * n), standard[..., k:]],
        axis=-1,
    )


def link_eigenvalues(arm_or_standard: AbstractArm | Float[ArrayLike, "*b s"]) -> Float[Array, "*b n 4"]:
    """Eigenvalues (ascending) of each link's pseudo-inertia ``(..., n, 4)`` [kg m² scale] of a
    ``SerialArm`` or its standard vector ``(..., 14 n)``. Uses ``jnp.linalg.eigvalsh`` (LAPACK on CPU)."""
    standard = _as_standard(arm_or_standard)
    n = _dof(standard)
    links = standard[..., : 10 * n].reshape(*standard.shape[:-1], n, 10)
    return jnp.linalg.eigvalsh(pseudo_inertia(links))


def is_physically_consistent(
    arm_or_standard: AbstractArm | Float[ArrayLike, "*b s"], *, tolerance: float = 1e-9
) -> Bool[Array, "*b"]:
    """Whether a ``SerialArm`` (or its standard vector ``(..., 14 n)``) is physically consistent:
    every link's pseudo-inertia ``J_i ⪰ 0`` and every ``Ia``, ``fv``, ``fc ≥ 0``.

    ``tolerance`` (relative): link ``i`` passes when ``λ_min(J_i) ≥ −tolerance · λ_max(J_i)``;
    a joint parameter passes when it is ``≥ −tolerance ·`` the largest magnitude of its kind
    (so an SDP solution that sits on the boundary up to solver round-off passes). Returns a boolean
    array with the batch shape; traceable (see ``link_eigenvalues`` for the LAPACK call).
    """
    standard = _as_standard(arm_or_standard)
    n = _dof(standard)
    eig = link_eigenvalues(standard)
    links_ok = jnp.all(eig[..., 0] >= -tolerance * jnp.abs(eig[..., -1]), axis=-1)
    joints = standard[..., 10 * n : 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n].reshape(
        *standard.shape[:-1], _NON_NEGATIVE_JOINT_BLOCKS, n
    )
    scale = jnp.max(jnp.abs(joints), axis=-1, keepdims=True)
    joints_ok = jnp.all(joints >= -tolerance * scale, axis=(-2, -1))
    return links_ok & joints_ok


# -- consistent least squares ------------------------------------------------------------------


class ConsistentEstimate(eqx.Module):
    """The result of ``consistent_least_squares`` (``s = 14 n`` standard parameters).

    Attributes:
        standard: ``(s,)`` the estimate ``φ(ẑ)`` in ``standard_names`` order.
        coordinates: ``(s,)`` ``ẑ``, the unconstrained coordinates it was found in (per link the
            log-Cholesky ``LOG_CHOLESKY_NAMES``, per joint ``log Ia``, ``log fv``, ``log fc``, offset).
        consistent: ``()`` bool, true by construction (every finite ``ẑ`` maps to positive definite
            pseudo-inertias and positive ``Ia, fv, fc``); false only if ``ẑ`` is not finite or an
            ``exp`` underflowed to 0.
        cost: ``()`` ``‖W φ − y‖² + λ ‖φ − φ_prior‖²`` at the estimate [N² m²].
        data_cost: ``()`` ``‖W φ − y‖²`` alone.
        least_squares: ``(s,)`` the unconstrained minimiser of the same cost (regularised least
            squares, no consistency constraint), for comparison; ``least_squares_cost`` its cost.
        least_squares_cost: ``()``.
        duality_gap: ``()`` a certified bound on ``cost −`` the LMI problem's optimum (``J_i ⪰ 0``,
            ``Ia, fv, fc ≥ 0``), from its Lagrangian dual at multipliers read off the gradient: the
            estimate is within ``duality_gap`` of the SDP solution's cost without solving the SDP.
            Conservative where ``WᵀW + λ𝟙`` is ill-conditioned (it lags the cost's convergence).
        regularisation: ``()`` the absolute ``λ`` used [N² m² per squared parameter unit].
        iterations: ``()`` int, optimiser steps taken.
        status: ``()`` int ``Status``: ``CONVERGED``, ``MAX_ITERATIONS`` or ``FAILED``.
        names: the standard names (static).
    """

    standard: Float[Array, " s"]
    coordinates: Float[Array, " s"]
    consistent: Bool[Array, ""]
    cost: Float[Array, ""]
    data_cost: Float[Array, ""]
    least_squares: Float[Array, " s"]
    least_squares_cost: Float[Array, ""]
    duality_gap: Float[Array, ""]
    regularisation: Float[Array, ""]
    iterations: Int[Array, ""]
    status: Int[Array, ""]
    names: tuple[str, ...] = eqx.field(static=True)


def _method(solver, rtol: float, atol: float, linear_solver):
    """The optimistix solver for ``solver`` (``None`` for ``"newton"``, this module's own)."""
    if isinstance(solver, optx.AbstractLeastSquaresSolver):
        return solver
    kwargs = {} if linear_solver is None else {"linear_solver": linear_solver}
    if solver == "newton":
        return None
    if solver == "levenberg_marquardt":
        return optx.LevenbergMarquardt(rtol=rtol, atol=atol, **kwargs)
    if solver == "gauss_newton":
        return optx.GaussNewton(rtol=rtol, atol=atol, **kwargs)
    raise ValueError(
        f"solver must be 'newton', 'levenberg_marquardt', 'gauss_newton' or an optimistix least-squares solver, "
        f"got {solver!r}."
    )


#: Damping bounds of ``_trust_region_newton`` (relative to the largest Hessian diagonal entry).
_DAMPING_START, _DAMPING_MIN, _DAMPING_MAX = 1e-3, 1e-15, 1e15


def _trust_region_newton(cost, z0: Array, *, offset: Array, rtol: float, max_steps: int) -> tuple[Array, Array, Array]:
    """Minimise ``cost(z)`` from ``z0`` by Newton steps with the exact Hessian (``jax.hessian``),
    damped as Levenberg does: ``(H + μ h 𝟙) δ = −g`` with ``h = max |H_kk|`` and ``μ`` raised ×4
    while ``H + μ h 𝟙`` is not positive definite (Cholesky not finite) or the step does not
    decrease the cost enough (gain ratio ``< 1e-4``), lowered ÷4 after a step whose gain ratio
    exceeds 0.75 (Moré's trust-region rules). Unlike Gauss–Newton the Hessian keeps the curvature
    of the log-Cholesky and ``exp`` maps, which is what drives coordinates to ``−∞`` at a constant
    rate when the optimum is on the consistency boundary.

    Stops when an accepted step's predicted decrease is ``≤ rtol · (cost + offset)`` (``offset``: a
    constant left out of ``cost``, so that the test is relative to the full cost) or when ``μ`` passes
    ``1e15`` (no step decreases the cost at working precision): ``CONVERGED``; after ``max_steps``
    iterations (accepted or not): ``MAX_ITERATIONS``. Returns ``(z, iterations, status)``.
    """
    value_and_grad = jax.value_and_grad(cost)
    hessian = jax.hessian(cost)
    eye = jnp.eye(z0.shape[0], dtype=z0.dtype)

    def derivatives(z):
        f, g = value_and_grad(z)
        return f, g, hessian(z)

    def keep_going(state):
        *_, k, done = state
        return (k < max_steps) & ~done

    def step(state):
        z, f, g, h, mu, k, _ = state
        lower = jnp.linalg.cholesky(h + mu * jnp.max(jnp.abs(jnp.diag(h))) * eye)
        positive = jnp.all(jnp.isfinite(lower))
        delta = -jax.scipy.linalg.cho_solve((jnp.where(positive, lower, eye), True), g)
        delta = jnp.where(positive, delta, 0.0)
        predicted = -(g @ delta + 0.5 * delta @ h @ delta)
        trial = z + delta
        f_trial = cost(trial)
        ratio = (f - f_trial) / predicted
        accept = positive & (predicted > 0) & jnp.isfinite(f_trial) & (ratio > 1e-4)
        mu = jnp.where(accept, jnp.where(ratio > 0.75, mu / 4, mu), mu * 4)
        z, f, g, h = jax.lax.cond(accept, lambda: (trial, *derivatives(trial)), lambda: (z, f, g, h))
        done = (accept & (predicted <= rtol * jnp.abs(f + offset))) | (mu > _DAMPING_MAX)
        return z, f, g, h, jnp.maximum(mu, _DAMPING_MIN), k + 1, done

    state = (z0, *derivatives(z0), jnp.asarray(_DAMPING_START, dtype=z0.dtype), jnp.asarray(0), jnp.asarray(False))
    z, f, *_, k, done = jax.lax.while_loop(keep_going, step, state)
    finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(z))
    status = jnp.where(done, Status.CONVERGED, Status.MAX_ITERATIONS)
    return z, k, jnp.where(finite, status, Status.FAILED)


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


def consistent_least_squares(
    regressor: Float[ArrayLike, "*rows s"],
    torque: Float[ArrayLike, "..."],
    arm: AbstractArm,
    *,
    prior: Float[ArrayLike, " _s"] | None = None,
    regularisation: float | Float[ArrayLike, ""] = DEFAULT_REGULARISATION,
    solver: Solver | optx.AbstractLeastSquaresSolver = "newton",
    linear_solver=None,
    start: Float[ArrayLike, " _s"] | None = None,
    start_floor: float = 1e-2,
    rtol: float = 1e-12,
    atol: float = 1e-14,
    max_steps: int = 5_000,
) -> ConsistentEstimate:
    """Physically consistent least squares of a ``SerialArm``'s standard parameters, no SDP solver.

    Minimises ``‖W φ − y‖² + λ ‖φ − φ_prior‖²`` over ``φ = standard_from_unconstrained(z)`` (every
    ``z`` consistent; module docstring). The small ``λ`` and the prior make the minimiser unique
    along the directions the motion does not identify (``14 n − rank`` of them, e.g. 26 of 84 for
    a UR5) and barely move the identified combinations.

    How: one QR factorisation ``[W y; √λ 𝟙 √λ φ_prior] → [R c; 0 ρ₀]`` turns the cost into
    ``‖R φ − c‖² + ρ₀²`` (``s`` rows whatever the number of samples); ``R⁻¹ c`` is the unconstrained
    minimiser (``least_squares``). The iteration starts from ``z₀ = unconstrained_from_standard(
    project_to_consistent(start, floor=start_floor))``, ``start`` defaulting to that unconstrained
    minimiser (so it begins next to the answer in every direction the constraints leave alone;
    starting from the prior instead costs thousands of steps on a short data set). Where the
    constrained optimum is inside the consistent set it converges in tens of steps; where it lies on
    the boundary (a link whose ``J`` is singular, a friction at 0) the coordinates run towards
    ``−∞`` and the default Newton solver needs a few hundred to a thousand steps (UR5 tests: cost
    within 3e-9 and identified base combinations within 6e-7 of an SDP solution).

    Args:
        regressor: ``W`` ``(..., s)`` rows of ``SerialArm.standard_regressor`` stacked (any leading
            shape, flattened; ``s = 14 n``), e.g. ``(samples, n, s)``.
        torque: ``y`` with ``regressor``'s leading shape [N m, N].
        arm: the ``SerialArm`` (its names and, by default, its values as the prior).
        prior: ``φ_prior`` ``(s,)``; default ``arm.standard_parameters()`` (e.g. its URDF values).
            Need not be consistent.
        regularisation: ``ρ``, with ``λ = ρ · tr(WᵀW) / s`` (``ρ`` times the mean eigenvalue of
            ``WᵀW``); default ``DEFAULT_REGULARISATION = 1e-6``. Must be positive.
        solver: ``"newton"`` (default: exact Hessian, Levenberg-damped trust region, this module),
            ``"levenberg_marquardt"`` or ``"gauss_newton"`` (optimistix, on the residual
            ``R φ(z) − c``; slow when the optimum is on the boundary, see the module docstring) or
            an optimistix least-squares solver instance (then ``rtol``, ``atol``, ``linear_solver``
            are its own).
        linear_solver: a lineax solver for the optimistix solvers (default theirs, ``lineax.QR``).
        start: a standard vector to start from (default: the unconstrained minimiser), projected
            to strict consistency by ``project_to_consistent(start, floor=start_floor)``.
        start_floor: the projection's relative floor (eigenvalues of ``J``, ``Ia``, ``fv``, ``fc``).
        rtol: ``"newton"`` stops when a step's predicted decrease is below ``rtol`` times the cost;
            for optimistix, its relative tolerance (steps in ``z`` and residuals).
        atol: optimistix's absolute tolerance (not used by ``"newton"``).
        max_steps: iteration limit (then ``status = MAX_ITERATIONS``; the estimate is still the
            last iterate, consistent).

    Returns a ``ConsistentEstimate`` (estimate, consistency flag, costs, the unconstrained
    solution, iterations, status).

    Raises ``ValueError`` (before compiling) for float32, shapes that do not match the arm, a
    regularisation that is not positive or an unknown solver. Pure JAX: ``jit``-able (the arm's
    geometry static, arrays traced) and ``vmap``-able over data; concrete inputs run as one
    compiled program (``eqx.filter_jit``). Calls LAPACK on CPU (module docstring).
    """
    require_float64("consistent_least_squares")
    names = tuple(arm.standard_names)
    s = len(names)
    _as_standard(arm)
    w = jnp.asarray(regressor, dtype=float)
    y = jnp.asarray(torque, dtype=float)
    if w.ndim < 2 or w.shape[-1] != s:
        raise ValueError(f"regressor must have a trailing axis of {s} (the arm's standard_names), got {w.shape}.")
    if y.shape != w.shape[:-1]:
        raise ValueError(f"torque must have the regressor's leading shape {w.shape[:-1]}, got {y.shape}.")
    prior = arm.standard_parameters() if prior is None else jnp.asarray(prior, dtype=float)
    if prior.shape != (s,):
        raise ValueError(f"prior must have shape ({s},) (the arm's standard_names, no batch axes), got {prior.shape}.")
    if start is not None:
        start = jnp.asarray(start, dtype=float)
        if start.shape != (s,):
            raise ValueError(f"start must have shape ({s},) (the arm's standard_names), got {start.shape}.")
    if not isinstance(regularisation, jax.core.Tracer) and not float(regularisation) > 0:
        raise ValueError(f"regularisation must be positive (it makes the minimiser unique), got {regularisation!r}.")
    _method(solver, rtol, atol, linear_solver)  # unknown solver: ValueError now
    return _fit(
        w.reshape(-1, s),
        y.reshape(-1),
        prior,
        start,
        jnp.asarray(regularisation, dtype=float),
        solver=solver,
        linear_solver=linear_solver,
        rtol=float(rtol),
        atol=float(atol),
        max_steps=int(max_steps),
        start_floor=float(start_floor),
        names=names,
    )


@eqx.filter_jit
def _fit(w, y, prior, start, rho, *, solver, linear_solver, rtol, atol, max_steps, start_floor, names):
    m, s = w.shape
    n = s // 14
    lam = rho * jnp.sum(w * w) / s
    root = jnp.sqrt(lam)
    # ‖W φ − y‖² + λ ‖φ − φ_prior‖² = ‖R φ − c‖² + ρ₀² from one QR of the augmented system.
    augmented = jnp.concatenate(
        [jnp.concatenate([w, y[:, None]], axis=1), jnp.concatenate([root * jnp.eye(s), root * prior[:, None]], axis=1)]
    )
    r_full = jnp.linalg.qr(augmented, mode="r")
    r, c, rest = r_full[:s, :s], r_full[:s, s], r_full[s, s] ** 2
    least_squares = jax.scipy.linalg.solve_triangular(r, c, lower=False)

    def residual(z, _):
        return r @ standard_from_unconstrained(z) - c

    z0 = unconstrained_from_standard(
        project_to_consistent(least_squares if start is None else start, floor=start_floor)
    )
    method = _method(solver, rtol, atol, linear_solver)
    if method is None:
        z, iterations, status = _trust_region_newton(
            lambda z: jnp.sum(residual(z, None) ** 2), z0, offset=rest, rtol=rtol, max_steps=max_steps
        )
    else:
        sol = optx.least_squares(residual, method, z0, max_steps=max_steps, throw=False)
        z, iterations = sol.value, jnp.asarray(sol.stats["num_steps"])
        status = jnp.where(
            sol.result == optx.RESULTS.successful,
            Status.CONVERGED,
            jnp.where(sol.result == optx.RESULTS.nonlinear_max_steps_reached, Status.MAX_ITERATIONS, Status.FAILED),
        )
    phi = standard_from_unconstrained(z)
    cost = jnp.sum((r @ phi - c) ** 2) + rest
    data_cost = jnp.sum((w @ phi - y) ** 2)
    diagonal = jnp.diagonal(log_cholesky_factor(z[: 10 * n].reshape(n, 10)), axis1=-2, axis2=-1)
    positive = phi[10 * n : 10 * n + _NON_NEGATIVE_JOINT_BLOCKS * n]
    finite = jnp.all(jnp.isfinite(z)) & jnp.isfinite(cost)
    consistent = finite & jnp.all(diagonal > 0) & jnp.all(positive > 0)
    return ConsistentEstimate(
        standard=phi,
        coordinates=z,
        consistent=consistent,
        cost=cost,
        data_cost=data_cost,
        least_squares=least_squares,
        least_squares_cost=rest,
        duality_gap=_duality_gap(phi, r, c),
        regularisation=lam,
        iterations=iterations,
        status=jnp.where(finite, status, Status.FAILED).astype(jnp.int32),
        names=names,
    )
