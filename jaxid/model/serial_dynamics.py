"""The dynamics kernels of a ``SerialArm`` (``jaxid.model.serial``): one arm, one state, unbatched.

Each ``_core_<kind>(arm, inertial, viscous, coulomb, armature, offset, gravity, *states, sincos)`` takes
the arm (a ``SerialArm``, read for its static geometry and Coulomb slope) and its leaves for one arm,
and evaluates one quantity by the spatial recursions of ``jaxid.model.spatial`` (Featherstone's
convention): the torque reading by recursive Newton–Euler plus armature, friction and offset
(``inverse``), ``q''`` by an unrolled Cholesky solve of the composite-rigid-body mass matrix
(``forward``, ``jaxid.linalg``: no LAPACK), the mass matrix with the armature (``mass``), the bias,
Coriolis and gravity torques (Newton–Euler at ``q'' = 0``, without gravity, at rest), the potential
energy. ``_evaluate`` broadcasts a core over the batch axes of the arm's leaves and the
states (``jnp.vectorize``, i.e. ``vmap``), one compiled program per arm structure and shapes on
concrete inputs; ``SerialArm``'s methods call it. The standard regressor has no per-state core:
``_regressor`` evaluates the whole batch at once (``spatial.rnea_regressor_batched`` for the links,
batch-minor; diagonal columns for the joint terms).

Loops over joints are Python loops unrolled at trace time (``n`` is static).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..linalg import cholesky, solve_triangular
from ..types import compiled_when_concrete
from .spatial import Joint, crba, joint_constants, rnea, rnea_regressor_batched

SinCos = Callable[[Array], tuple[Array, Array]]

_TWO_OVER_PI = 2 / np.pi


def _joints(arm) -> list[Joint]:
    """The trace-time constants of each joint (``jaxid.model.spatial.joint_constants``)."""
    return [
        joint_constants(*geometry)
        for geometry in zip(arm.joint_types, arm.axes, arm.parent_rotations, arm.parent_translations, strict=True)
    ]


def _transforms(arm, q: Array, sincos: SinCos | None) -> tuple[list[Joint], list[Array]]:
    """The joint constants and each link's motion transform ``X_i(q)`` (6×6) from its parent."""
    joints = _joints(arm)
    s, c = (jnp.sin(q), jnp.cos(q)) if sincos is None else sincos(q)
    xs = [j.x0 + c[i] * j.xc + s[i] * j.xs if j.revolute else j.x0 + q[i] * j.xc for i, j in enumerate(joints)]
    return joints, xs


def _friction(arm, viscous: Array, coulomb: Array, qd: Array) -> Array:
    """``fv q' + fc (2/π) atan(slope q')`` [N m]."""
    return viscous * qd + coulomb * _TWO_OVER_PI * jnp.arctan(arm.coulomb_slope * qd)


# -- cores: one arm, one state (unbatched); ``_evaluate`` broadcasts and vmaps them ---------------


def _core_inverse(arm, inertial, viscous, coulomb, armature, offset, gravity, q, qd, qdd, sincos=None):
    joints, xs = _transforms(arm, q, sincos)
    rigid = rnea(joints, xs, inertial, gravity, qd, qdd)
    return rigid + armature * qdd + _friction(arm, viscous, coulomb, qd) + offset


def _core_forward(arm, inertial, viscous, coulomb, armature, offset, gravity, q, qd, tau, sincos=None):
    joints, xs = _transforms(arm, q, sincos)
    mass = crba(joints, xs, inertial) + jnp.diag(armature)
    bias = rnea(joints, xs, inertial, gravity, qd, None)
    rhs = tau - offset - bias - _friction(arm, viscous, coulomb, qd)
    lower = cholesky(mass)
    return solve_triangular(lower.T, solve_triangular(lower, rhs, lower=True), lower=False)


def _core_mass(arm, inertial, viscous, coulomb, armature, offset, gravity, q, sincos=None):
    joints, xs = _transforms(arm, q, sincos)
    return crba(joints, xs, inertial) + jnp.diag(armature)


def _core_bias(arm, inertial, viscous, coulomb, armature, offset, gravity, q, qd, sincos=None):
    return rnea(*_transforms(arm, q, sincos), inertial, gravity, qd, None)


def _core_coriolis(arm, inertial, viscous, coulomb, armature, offset, gravity, q, qd, sincos=None):
    return rnea(*_transforms(arm, q, sincos), inertial, jnp.zeros(3), qd, None)


def _core_gravity(arm, inertial, viscous, coulomb, armature, offset, gravity, q, sincos=None):
    return rnea(*_transforms(arm, q, sincos), inertial, gravity, None, None)


def _core_potential(arm, inertial, viscous, coulomb, armature, offset, gravity, q, sincos=None):
    s, c = (jnp.sin(q), jnp.cos(q)) if sincos is None else sincos(q)
    pose = jnp.eye(4)
    weighted = jnp.zeros(4)
    for i, j in enumerate(_joints(arm)):
        pose = pose @ (j.t0 + c[i] * j.tc + s[i] * j.ts if j.revolute else j.t0 + q[i] * j.tc)
        # T_i (h_i, m_i) = (R_i h_i + m_i p_i, m_i): the first moment in base coordinates.
        weighted = weighted + pose @ jnp.concatenate([inertial[i, 1:4], inertial[i, :1]])
    return -gravity @ weighted[:3]


def _regressor(arm, leaves: tuple[Array, ...], q: Array, qd: Array, qdd: Array) -> Array:
    """The standard regressor ``(..., n, 14 n)`` over the broadcast batch axes of the arm's leaves and
    the states, all samples at once: the rigid part by ``spatial.rnea_regressor_batched`` (batch-minor,
    elementwise over the batch: much faster than a vmap of ``spatial.rnea_regressor``, equal to it to
    round-off); the joint terms are diagonal: armature q'', viscous q', Coulomb (2/π) atan(slope q'),
    offset 1. Depends on the geometry, gravity and Coulomb slope only."""
    n = arm.dof
    cores = (2, 1, 1, 1, 1, 1, 1, 1, 1)  # core dimensions of inertial, …, gravity, q, qd, qdd
    arrays = (*leaves, q, qd, qdd)
    batch = jnp.broadcast_shapes(*(x.shape[: x.ndim - k] for x, k in zip(arrays, cores, strict=True)))
    size = int(np.prod(batch, dtype=int))

    def leading(x: Array) -> Array:  # (*batch, d) -> (size, d)
        return jnp.broadcast_to(x, (*batch, x.shape[-1])).reshape(size, x.shape[-1])

    gravity, q, qd, qdd = (leading(x) for x in (leaves[-1], q, qd, qdd))
    rigid = rnea_regressor_batched(_joints(arm), q.T, gravity.T, qd.T, qdd.T)  # (n, 10 n, size)
    # the joint columns are built batch-leading (only the rigid part is transposed)
    sign = _TWO_OVER_PI * jnp.arctan(arm.coulomb_slope * qd)  # the Coulomb column of _friction
    eye = jnp.eye(n, dtype=qdd.dtype)
    joint = [eye * x[:, None, :] for x in (qdd, qd, sign)] + [jnp.broadcast_to(eye, (size, n, n))]
    y = jnp.concatenate([jnp.moveaxis(rigid, -1, 0), *joint], axis=-1)
    return y.reshape(*batch, n, 14 * n)


_CORES = {
    "inverse": _core_inverse,
    "forward": _core_forward,
    "mass": _core_mass,
    "bias": _core_bias,
    "coriolis": _core_coriolis,
    "gravity": _core_gravity,
    "potential": _core_potential,
}

_SIGNATURES = {
    "inverse": ("(n),(n),(n)", "(n)"),
    "forward": ("(n),(n),(n)", "(n)"),
    "mass": ("(n)", "(n,n)"),
    "bias": ("(n),(n)", "(n)"),
    "coriolis": ("(n),(n)", "(n)"),
    "gravity": ("(n)", "(n)"),
    "potential": ("(n)", "()"),
}


@compiled_when_concrete
def _evaluate(arm, kind: str, sincos: SinCos | None, *states: Array) -> Array:
    """``_core_<kind>`` of ``arm`` broadcast over the batch axes of the arm's leaves and the states (vmap);
    one compiled program per arm structure and shapes on concrete inputs. The regressor is evaluated
    for the whole batch at once (``_regressor``; ``sincos`` is not used there)."""
    leaves = (arm.inertial, arm.viscous, arm.coulomb, arm.armature, arm.offset, arm.gravity)
    if kind == "regressor":
        return _regressor(arm, leaves, *states)
    states_signature, out = _SIGNATURES[kind]
    signature = f"(n,t),(n),(n),(n),(n),(d),{states_signature}->{out}"
    core = _CORES[kind]
    return jnp.vectorize(lambda *args: core(arm, *args, sincos=sincos), signature=signature)(*leaves, *states)
