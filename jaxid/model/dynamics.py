"""The public dynamics functions: one per quantity, for any ``AbstractArm`` (they call its methods).

All are pure and work unchanged under ``jit``, ``vmap`` and ``grad``; the arm's parameters are
array leaves, so a sweep over their values never recompiles. Shapes: ``q``, ``qd``, ``qdd``,
``tau`` are ``(..., n)`` (``n = arm.dof``) and broadcast against the arm's leading batch axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._two_link import SinCos
from .interface import AbstractArm
from .parameters import validate_unknowns

__all__ = [
    "mass_matrix",
    "coriolis_forces",
    "gravity_torque",
    "friction_torque",
    "forward_dynamics",
    "inverse_dynamics",
    "holding_torque",
    "kinetic_energy",
    "potential_energy",
    "energy",
    "regressor",
    "standard_parameters",
    "standard_regressor",
    "arm_from_standard",
]


def mass_matrix(arm: AbstractArm, q: Float[ArrayLike, "*b n"]) -> Float[Array, "... n n"]:
    """Inertia matrix ``D(q)`` [kg m²] (rotor inertia included), shape ``(..., n, n)``."""
    return arm.mass_matrix(q)


def coriolis_forces(
    arm: AbstractArm, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"]
) -> Float[Array, "... n"]:
    """Coriolis and centrifugal torques ``C(q, q') q'`` [N m]."""
    return arm.coriolis_forces(q, qd)


def gravity_torque(arm: AbstractArm, q: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
    """Gravity torques ``G(q)`` [N m]; zero at the hanging equilibrium ``q = 0``."""
    return arm.gravity_torque(q)


def friction_torque(arm: AbstractArm, qd: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
    """Joint friction ``fv q' + fc (2/π) atan(coulomb_slope q')`` [N m] (no offset)."""
    return arm.friction_torque(qd)


def forward_dynamics(
    arm: AbstractArm,
    q: Float[ArrayLike, "*b n"],
    qd: Float[ArrayLike, "*b n"],
    tau: Float[ArrayLike, "*b n"],
    *,
    sincos: SinCos | None = None,
) -> Float[Array, "... n"]:
    """Joint accelerations ``q''`` [rad/s²] from ``D q'' = tau − offset − C q' − G − F(q')``.

    The one dynamics function every simulator and filter uses. For ``TwoLinkArm`` the 2x2 solve is
    written out (Cramer's rule) and the trigonometric functions are evaluated once;
    ``sincos(q) -> (sin q, cos q)`` (on the ``(..., 2)`` angles) replaces ``jnp.sin``/``jnp.cos``.
    """
    return arm.forward_dynamics(q, qd, tau, sincos=sincos)


def inverse_dynamics(
    arm: AbstractArm,
    q: Float[ArrayLike, "*b n"],
    qd: Float[ArrayLike, "*b n"],
    qdd: Float[ArrayLike, "*b n"],
    *,
    sincos: SinCos | None = None,
) -> Float[Array, "... n"]:
    """Joint torque reading ``tau = D q'' + C q' + G + F(q') + offset`` [N m]."""
    return arm.inverse_dynamics(q, qd, qdd, sincos=sincos)


def holding_torque(arm: AbstractArm, q0: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
    """The torque reading that holds the arm at rest at ``q0``: ``inverse_dynamics(arm, q0, 0, 0)``.

    For ``TwoLinkArm`` this is ``G(q0) + offset`` (bit-for-bit ``gravity_torque`` without offset).
    """
    return arm.holding_torque(q0)


def kinetic_energy(arm: AbstractArm, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"]) -> Float[Array, "..."]:
    """Kinetic energy ``½ q'ᵀ D(q) q'`` [J] (links and rotors)."""
    return arm.kinetic_energy(q, qd)


def potential_energy(arm: AbstractArm, q: Float[ArrayLike, "*b n"]) -> Float[Array, "..."]:
    """Gravitational potential energy [J], zero reference at the joint-1 height."""
    return arm.potential_energy(q)


def energy(arm: AbstractArm, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"]) -> Float[Array, "..."]:
    """Total mechanical energy [J]; conserved without friction, offset and input torque."""
    return kinetic_energy(arm, q, qd) + potential_energy(arm, q)


def regressor(
    arm: AbstractArm,
    q: Float[ArrayLike, "*b n"],
    qd: Float[ArrayLike, "*b n"],
    qdd: Float[ArrayLike, "*b n"],
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
) -> tuple[Float[Array, "*b n p"], Float[Array, "*b n"]]:
    """Linear-in-parameters form ``tau = Y(q, q', q'') theta + tau_known``.

    ``theta = arm.parameter_vector(unknowns)``; ``unknowns`` must be a subset of
    ``arm.regressor_parameters`` (for ``TwoLinkArm``, ``REGRESSOR_PARAMETERS``:
    ``m1 m2 J1 J2 fv1 fv2 fc1 fc2 Ir off1 off2``), the parameters the
    dynamics are linear in with the lengths, centres of mass, gravity, gear ratio and Coulomb
    slope fixed. ``Y`` is the exact Jacobian of the inverse dynamics in ``theta`` and
    ``tau_known`` the torque with those parameters set to zero. (``standard_regressor`` is the
    parameterisation in which *all* inertial parameters enter linearly.)

    Returns:
        ``(Y, tau_known)`` of shapes ``(..., n, p)`` and ``(..., n)``.
    """
    unknowns = validate_unknowns(unknowns, arm.regressor_parameters)
    q, qd, qdd = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)
    batch = jnp.broadcast_shapes(q.shape[:-1], qd.shape[:-1], qdd.shape[:-1])
    zero = jnp.zeros((len(unknowns),))
    n = q.shape[-1]

    def tau_of(theta: Array) -> Array:
        return inverse_dynamics(arm.with_parameters(unknowns, theta), q, qd, qdd)

    # The map is affine in theta, so one forward-mode Jacobian is exact; the torque at theta = 0
    # comes out of the same pass (traced: an arm with the unknowns at zero, e.g. massless, is a
    # point of the affine map, not a physical arm, so the arm's value checks do not apply).
    y, tau_known = jax.jacfwd(lambda theta: (tau_of(theta),) * 2, has_aux=True)(zero)
    return jnp.broadcast_to(y, (*batch, n, len(unknowns))), jnp.broadcast_to(tau_known, (*batch, n))


def standard_parameters(arm: AbstractArm) -> Float[Array, "*batch s"]:
    """The arm's standard parameters in ``arm.standard_names`` order (``STANDARD_NAMES`` for the
    two-link arm: ``I1 m1r1 m1 I2 m2r2 m2 Ir fv1 fv2 fc1 fc2 off1 off2``, ``I_i = J_i + m_i r_i²``)."""
    return arm.standard_parameters()


def standard_regressor(
    arm: AbstractArm,
    q: Float[ArrayLike, "*b n"],
    qd: Float[ArrayLike, "*b n"],
    qdd: Float[ArrayLike, "*b n"],
) -> Float[Array, "*b n s"]:
    """``Y`` with ``inverse_dynamics(arm, q, qd, qdd) == Y @ standard_parameters(arm)``.

    The arm supplies only what is known: for ``TwoLinkArm`` ``l1``, gravity, the gear ratio and the
    Coulomb slope (its masses, inertias and friction do not enter ``Y``). Written out; exact to
    round-off. Shape ``(..., n, s)``.
    """
    return arm.standard_regressor(q, qd, qdd)


def arm_from_standard(arm: AbstractArm, standard: Float[ArrayLike, "*batch s"]) -> AbstractArm:
    """The arm with standard parameters ``standard``; the known geometry (lengths, gravity, gear
    ratio, Coulomb slope) is taken from ``arm``.

    For ``TwoLinkArm``: ``r_i = (m_i r_i) / m_i`` and ``J_i = I_i − m_i r_i²``, so it needs the masses
    themselves; motion data identify only the base parameters (``base_parameters``), so map back
    only with the masses known or fixed by some other means. Raises ``ValueError`` for a concrete
    vector that is not physically consistent. Traceable.
    """
    return arm.with_standard_parameters(standard)
