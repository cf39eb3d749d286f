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

The solver over this parametrisation is ``jaxid.estimate.consistency.least_squares``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from ...linalg import cholesky
from ...model.interface import AbstractArm
from ...model.serial import serial_standard_names

__all__ = [
    "LOG_CHOLESKY_NAMES",
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
]

#: The 10 log-Cholesky coordinates of a link, in this order (Rucker & Wensing 2022).
LOG_CHOLESKY_NAMES: tuple[str, ...] = ("alpha", "d1", "d2", "d3", "s12", "s23", "s13", "t1", "t2", "t3")

#: Per-joint parameters kept non-negative (by ``exp``) in the standard vector's joint block.
_NON_NEGATIVE_JOINT_BLOCKS = 3  # Ia, fv, fc (then the free offsets)


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
