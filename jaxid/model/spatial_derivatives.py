"""Analytic first derivatives of a ``SerialArm``'s inverse dynamics: ``∂τ/∂q``, ``∂τ/∂q'``, ``∂τ/∂q''``.

Recursive Newton–Euler (``jaxid.model.spatial.rnea``) differentiated by hand, in its own frames
(Featherstone's convention, as ``spatial``): the tangents of every link's velocity, acceleration and
force ride along as extra columns of the same ``(6, 1 + k n, B)`` stacks as the primal (column 0), so a
transform, an inertia or a cross product acts on all of them at once. The only terms that are not the
primal's own operations applied to the tangents are a joint's angle entering its own transform,
``∂X_i/∂q_i = −(S_i×) X_i`` (revolute ``X_i = diag(Rᵀ, Rᵀ) X_tree``; prismatic ``X_i = (1 + q_i M) X_tree``
with ``M² = 0``; both ``−[S_i]× X_i``), hence

- forward: ``∂(X_i v)/∂q_i = (X_i v) × S_i`` for the parent's velocity and acceleration (``Joint.bias``),
  ``∂v_i/∂q'_i = S_i``, ``∂a_i/∂q'_i = v_i × S_i``, ``∂a_i/∂q''_i = S_i``, and ``∂a_i ⊃ (∂v_i × S_i) q'_i``;
- link force ``f = I a + v ×* I v``: ``∂f = I ∂a + ∂v ×* I v + v ×* I ∂v``;
- backward: ``∂(X_iᵀ F_i)/∂q_i = X_iᵀ (S_i ×* F_i)``.

Why: output error's Jacobian passes and the EKF's transition Jacobian need ``∂τ/∂(q, q')`` at every RK4
stage; reverse mode through ``rnea`` (``n`` cotangents) was 8× a Newton–Euler pass (docs/performance.md,
"Output error's Jacobian pass"). Equal to ``jax.jacfwd`` of ``SerialArm.inverse_dynamics`` to round-off
(``tests/test_spatial_derivatives.py``). Batch-minor as ``spatial.rnea_regressor_batched`` (the helpers are
``spatial``'s); ``inverse_dynamics_derivatives`` is one state.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from .serial import _split
from .serial_dynamics import _TWO_OVER_PI, _friction, _joints
from .spatial import _INERTIA_BASIS, _apply, _apply_constant, _crm, _cross, _transform, _varying

__all__ = ["DIRECTIONS", "rnea_tangents", "inverse_dynamics_derivatives"]

#: The directions a derivative can be taken in, in the order of the columns.
DIRECTIONS = ("q", "qd", "qdd")


def _force_cross(v: Array, f: Array) -> Array:
    """``v ×* f`` for motions ``v (6, a, B)`` and forces ``f (6, b, B)``, broadcast over the middle axis."""
    w, u = v[:3], v[3:]
    return jnp.concatenate([_cross(w, f[:3]) + _cross(u, f[3:]), _cross(w, f[3:])])


def _transform_transposed(x: Array, forces: Array) -> Array:
    """``Xᵀ f`` for ``X = [[E, 0], [L, E]]`` ``(6, 6, B)`` and forces ``(6, m, B)``: ``(Eᵀ n + Lᵀ f, Eᵀ f)``."""
    e, lower = jnp.swapaxes(x[:3, :3], 0, 1), jnp.swapaxes(x[3:, :3], 0, 1)
    return jnp.concatenate([_apply(e, forces[:3]) + _apply(lower, forces[3:]), _apply(e, forces[3:])])


def rnea_tangents(joints, q: Array, inertial: Array, gravity: Array, qd: Array, qdd: Array, wrt: tuple[str, ...]):
    """Rigid-body joint forces and their derivatives for a batch of states, batch-minor: ``q, qd, qdd (n, B)``,
    ``inertial (n, 10)`` and ``gravity (3,)`` shared. Returns ``(τ (n, B), ∂τ/∂w (n, k n, B))`` with the
    ``k = len(wrt)`` blocks of ``n`` columns in the order of ``wrt`` (a tuple of ``DIRECTIONS``)."""
    unknown = [w for w in wrt if w not in DIRECTIONS]
    if unknown:
        raise ValueError(f"rnea_tangents: unknown direction(s) {unknown}; use some of {DIRECTIONS}.")
    n, batch = len(joints), q.shape[1:]
    first = {w: 1 + k * n for k, w in enumerate(wrt)}
    inertias = jnp.tensordot(inertial, _INERTIA_BASIS, axes=1)
    c, s = jnp.cos(q), jnp.sin(q)
    shape = (6, 1 + len(wrt) * n, *batch)
    v = jnp.zeros(shape, q.dtype)
    a = jnp.zeros(shape, q.dtype).at[3:, 0].set(-jnp.reshape(gravity, (3,) + (1,) * len(batch)))
    forces, transforms = [], []
    for i, joint in enumerate(joints):
        x = _varying(joint, q[i], c[i], s[i])
        transforms.append(x)
        v, a = _transform(x, v), _transform(x, a)
        if "q" in first:  # the joint's angle in its own transform
            v = v.at[:, first["q"] + i].add(_apply_constant(joint.bias, v[:, 0]))
            a = a.at[:, first["q"] + i].add(_apply_constant(joint.bias, a[:, 0]))
        axis = jnp.asarray(joint.motion, q.dtype).reshape((6,) + (1,) * len(batch))
        v = v.at[:, 0].add(axis * qd[i])
        if "qd" in first:
            v = v.at[:, first["qd"] + i].add(axis)
        v_cross_s = _apply_constant(joint.bias, v)  # v × S for every column
        a = a.at[:, 0].add(axis * qdd[i]) + v_cross_s * qd[i]
        if "qd" in first:
            a = a.at[:, first["qd"] + i].add(v_cross_s[:, 0])
        if "qdd" in first:
            a = a.at[:, first["qdd"] + i].add(axis)
        iv = jnp.tensordot(inertias[i], v, axes=1)
        # I a + v ×* I v, and its tangents I ∂a + ∂v ×* I v + v ×* I ∂v (column 0 takes the last term once).
        force = jnp.tensordot(inertias[i], a, axes=1) + _force_cross(v, iv[:, :1]) + _force_cross(v[:, :1], iv)
        forces.append(force.at[:, 0].add(-_force_cross(v[:, :1], iv[:, :1])[:, 0]))
    rows, child = [None] * n, None
    for i in range(n - 1, -1, -1):
        force = forces[i] if child is None else forces[i] + child
        rows[i] = _apply_constant(joints[i].motion[None], force)[0]
        child = _transform_transposed(transforms[i], force)
        if "q" in first:
            s_cross_f = _apply_constant(-_crm(joints[i].motion).T, force[:, 0])  # S ×* F
            child = child.at[:, first["q"] + i].add(_transform_transposed(transforms[i], s_cross_f[:, None])[:, 0])
    out = jnp.stack(rows)
    return out[:, 0], out[:, 1:]


def inverse_dynamics_derivatives(
    arm, standard: Float[Array, " s"], q: Array, qd: Array, qdd: Array, wrt: tuple[str, ...] = ("q", "qd")
) -> tuple[Float[Array, " n"], tuple[Float[Array, "n n"], ...]]:
    """One state of ``arm`` (a ``SerialArm``; its geometry, gravity and Coulomb slope) with standard parameters
    ``standard`` ``(14 n,)``: ``(τ, (∂τ/∂w for w in wrt))``, ``τ`` its ``inverse_dynamics`` (rigid body, armature,
    friction, offset) and each Jacobian ``(n, n)``."""
    n = arm.dof
    inertial, armature, viscous, coulomb, offset = _split(jnp.asarray(standard), n)
    rigid, tangents = rnea_tangents(
        _joints(arm), q[:, None], inertial, jnp.asarray(arm.gravity), qd[:, None], qdd[:, None], wrt
    )
    tau = rigid[:, 0] + armature * qdd + _friction(arm, viscous, coulomb, qd) + offset
    slope = arm.coulomb_slope
    joint = {
        "q": jnp.zeros(n, q.dtype),
        "qd": viscous + coulomb * _TWO_OVER_PI * slope / (1 + (slope * qd) ** 2),
        "qdd": armature,
    }
    blocks = tuple(tangents[:, k * n : (k + 1) * n, 0] + jnp.diag(joint[w]) for k, w in enumerate(wrt))
    return tau, blocks
