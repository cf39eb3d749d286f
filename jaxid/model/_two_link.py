"""The two-link arm's equations, written out once (the arithmetic behind ``TwoLinkArm``'s methods).

Every function takes the arm as its first argument and reads only its fields, so this module
imports nothing from jaxid. Shapes: ``q``, ``qd``, ``qdd``, ``tau`` are ``(..., 2)`` and broadcast
against the arm's leading batch axes.

The optional terms (Coulomb friction, rotor inertia, torque offset) are evaluated only when named
in the arm's static ``active_terms``: an arm without them runs exactly the rigid-body arithmetic
(bit-for-bit, also under ``jit``, where XLA's contraction of ``a * b + c`` into fused multiply-adds
would otherwise change the last bits) at the rigid-body cost (two float64 ``atan`` per evaluation
roughly double the cost of a fixed-step RK4 step).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array

SinCos = Callable[[Array], tuple[Array, Array]]

#: The optional terms of the dynamics, in the order of ``TwoLinkArm.active_terms``.
OPTIONAL_TERMS = ("coulomb", "rotor", "offset")


def active(arm, term: str) -> bool:
    return term in getattr(arm, "active_terms", OPTIONAL_TERMS)


_TWO_OVER_PI = 2 / jnp.pi


def trig(q: Array, sincos: SinCos | None = None) -> tuple[Array, Array, Array, Array, Array]:
    """``sin q1, cos q1, sin q2, cos q2, sin(q1 + q2)``; the last from the addition formula.

    ``sincos(q) -> (sin q, cos q)`` on the ``(..., 2)`` angles replaces ``jnp.sin``/``jnp.cos``
    (the fast simulator supplies its own range reduction and evaluates it once per stage).
    """
    if sincos is None:
        s1, c1 = jnp.sin(q[..., 0]), jnp.cos(q[..., 0])
        s2, c2 = jnp.sin(q[..., 1]), jnp.cos(q[..., 1])
    else:
        s, c = sincos(q)
        s1, c1, s2, c2 = s[..., 0], c[..., 0], s[..., 1], c[..., 1]
    s12 = s1 * c2 + c1 * s2
    return s1, c1, s2, c2, s12


def mass_entries(arm, c2: Array) -> tuple[Array, Array, Array]:
    """``d11, d12, d22`` of ``D(q)``, rotor inertia included (the lab model's reflected terms)."""
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    j1, j2 = arm.inertias[..., 0], arm.inertias[..., 1]
    d22 = j2 + m2 * r2**2
    d12 = d22 + m2 * l1 * r2 * c2
    d11 = j1 + m1 * r1**2 + m2 * l1**2 + d22 + 2 * m2 * l1 * r2 * c2
    if active(arm, "rotor"):
        ir, gr = arm.rotor_inertia, arm.gear_ratio
        d11, d12, d22 = d11 + (gr**2 + 1) * ir, d12 - gr * ir, d22 + gr**2 * ir
    return d11, d12, d22


def coupling(arm, s2: Array) -> Array:
    """``h = m2 l1 r2 sin q2``, the factor of the Coriolis and centrifugal torques."""
    return arm.masses[..., 1] * arm.lengths[..., 0] * arm.com[..., 1] * s2


def coriolis(h: Array, qd: Array) -> Array:
    v1, v2 = qd[..., 0], qd[..., 1]
    return jnp.stack([-h * (2 * v1 * v2 + v2**2), h * v1**2], -1)


def gravity(arm, s1: Array, s12: Array) -> Array:
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    g2 = arm.gravity * m2 * r2 * s12
    g1 = arm.gravity * (m1 * r1 + m2 * l1) * s1 + g2
    return jnp.stack([g1, g2], -1)


def smooth_sign(arm, qd: Array) -> Array:
    """``(2/π) atan(slope q')``: tends to ``sign(q')``, slope ``2 slope / π`` at zero."""
    return _TWO_OVER_PI * jnp.arctan(arm.coulomb_slope * qd)


def friction(arm, qd: Array) -> Array:
    """``fv q' + fc (2/π) atan(slope q')`` per joint [N m]."""
    viscous = arm.friction * qd
    return viscous + arm.coulomb * smooth_sign(arm, qd) if active(arm, "coulomb") else viscous


def forward(arm, q: Array, qd: Array, tau: Array, sincos: SinCos | None = None) -> Array:
    """``q''`` from ``D q'' = tau − offset − C q' − G − F(q')`` (Cramer's rule on the 2x2, one division)."""
    # Written per joint, not on (..., 2) stacks: under vmap the fast simulator's RK4 step then keeps
    # every quantity a contiguous (B,) array (stacked intermediates made it ~1.35x slower).
    s1, _, s2, c2, s12 = trig(q, sincos)
    d11, d12, d22 = mass_entries(arm, c2)
    tau1, tau2 = tau[..., 0], tau[..., 1]
    if active(arm, "offset"):
        tau1, tau2 = tau1 - arm.torque_offset[..., 0], tau2 - arm.torque_offset[..., 1]
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    v1, v2 = qd[..., 0], qd[..., 1]
    h = m2 * l1 * r2 * s2
    grav2 = arm.gravity * m2 * r2 * s12
    rhs1 = tau1 + h * (2 * v1 + v2) * v2 - arm.gravity * (m1 * r1 + m2 * l1) * s1 - grav2 - arm.friction[..., 0] * v1
    rhs2 = tau2 - h * v1 * v1 - grav2 - arm.friction[..., 1] * v2
    if active(arm, "coulomb"):
        sign = smooth_sign(arm, qd)
        rhs1, rhs2 = rhs1 - arm.coulomb[..., 0] * sign[..., 0], rhs2 - arm.coulomb[..., 1] * sign[..., 1]
    inv_det = 1 / (d11 * d22 - d12 * d12)
    return jnp.stack([(d22 * rhs1 - d12 * rhs2) * inv_det, (d11 * rhs2 - d12 * rhs1) * inv_det], -1)


def inverse(arm, q: Array, qd: Array, qdd: Array, sincos: SinCos | None = None) -> Array:
    """``tau = D q'' + C q' + G + F(q') + offset``."""
    s1, _, s2, c2, s12 = trig(q, sincos)
    d11, d12, d22 = mass_entries(arm, c2)
    dq = jnp.stack([d11 * qdd[..., 0] + d12 * qdd[..., 1], d12 * qdd[..., 0] + d22 * qdd[..., 1]], -1)
    tau = dq + coriolis(coupling(arm, s2), qd) + gravity(arm, s1, s12) + friction(arm, qd)
    return tau + arm.torque_offset if active(arm, "offset") else tau


def potential(arm, q: Array) -> Array:
    """Gravitational potential energy [J], zero reference at the joint-1 height."""
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    c1 = jnp.cos(q[..., 0])
    c12 = jnp.cos(q[..., 0] + q[..., 1])
    return -arm.gravity * (m1 * r1 * c1 + m2 * (l1 * c1 + r2 * c12))


def standard_vector(arm) -> Array:
    """The 13 standard parameters in ``STANDARD_NAMES`` order, shape ``(..., 13)``."""
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    j1, j2 = arm.inertias[..., 0], arm.inertias[..., 1]
    ir = jnp.broadcast_to(arm.rotor_inertia, m1.shape)
    return jnp.stack(
        [
            j1 + m1 * r1**2,
            m1 * r1,
            m1,
            j2 + m2 * r2**2,
            m2 * r2,
            m2,
            ir,
            arm.friction[..., 0],
            arm.friction[..., 1],
            arm.coulomb[..., 0],
            arm.coulomb[..., 1],
            arm.torque_offset[..., 0],
            arm.torque_offset[..., 1],
        ],
        -1,
    )


def standard_regressor(arm, q: Array, qd: Array, qdd: Array, sincos: SinCos | None = None) -> Array:
    """``Y (..., 2, 13)`` with ``inverse(arm, q, qd, qdd) == Y @ standard_vector(arm)``.

    Known: ``l1``, ``g``, ``gr`` and the Coulomb slope. Columns in ``STANDARD_NAMES`` order.
    """
    s1, _, s2, c2, s12 = trig(q, sincos)
    l1, g, gr = arm.lengths[..., 0], arm.gravity, arm.gear_ratio
    a1, a2 = qdd[..., 0], qdd[..., 1]
    v1, v2 = qd[..., 0], qd[..., 1]
    sign = smooth_sign(arm, qd)
    shape = jnp.broadcast_shapes(a1.shape, s1.shape, v1.shape, jnp.shape(l1), jnp.shape(g), jnp.shape(gr))
    zero, one = jnp.zeros(shape), jnp.ones(shape)
    rows = (
        (
            a1,  # I1
            g * s1,  # m1 r1
            zero,  # m1 (only through I1 and m1 r1)
            a1 + a2,  # I2
            l1 * c2 * (2 * a1 + a2) - l1 * s2 * (2 * v1 * v2 + v2**2) + g * s12,  # m2 r2
            l1**2 * a1 + g * l1 * s1,  # m2
            (gr**2 + 1) * a1 - gr * a2,  # Ir
            v1,  # fv1
            zero,  # fv2
            sign[..., 0],  # fc1
            zero,  # fc2
            one,  # off1
            zero,  # off2
        ),
        (
            zero,
            zero,
            zero,
            a1 + a2,
            l1 * c2 * a1 + l1 * s2 * v1**2 + g * s12,
            zero,
            -gr * a1 + gr**2 * a2,
            zero,
            v2,
            zero,
            sign[..., 1],
            zero,
            one,
        ),
    )
    return jnp.stack([jnp.stack([jnp.broadcast_to(c, shape) for c in row], -1) for row in rows], -2)
