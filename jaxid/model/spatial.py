"""Spatial algebra and the rigid-body recursions of a serial chain (the kernels of ``SerialArm``).

Spatial algebra in Featherstone's convention (*Rigid Body Dynamics Algorithms*, 2008): a motion
vector is ``(ω, v)`` (angular velocity, linear velocity of the point at the frame origin), a force
``(n, f)`` (moment about the origin, force), both 6-vectors in the coordinates of a link frame. The
motion transform from the parent frame to link ``i`` is ``X_i = [[E, 0], [−E [p]×, E]]`` with ``E``
the rotation from parent to link coordinates and ``p`` the link's origin in the parent frame; forces
go back with ``X_iᵀ``. ``X_i`` is linear in ``(cos q_i, sin q_i)`` (revolute) or in ``q_i``
(prismatic) with constant 6×6 coefficients computed from the static geometry at trace time, so a
joint costs a few small matrix products (few operations to compile).

Forces and inertias: a link's spatial inertia ``[[Ī, [h]×], [[h]×ᵀ, m 1]]`` is linear in its 10
standard parameters ``[m, m cx, m cy, m cz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]`` about its frame origin
(``_INERTIA_BASIS``). ``rnea`` (recursive Newton–Euler) gives the rigid-body joint forces, ``crba``
(composite rigid body algorithm) the rigid-body mass matrix, ``rnea_regressor`` the joint forces'
regressor in the links' standard parameters (the recursion of Atkeson et al. 1986, as Pinocchio's
``computeJointTorqueRegressor``), all for one arm and one state,
unrolled over the joints at trace time; ``jaxid.model.serial`` adds armature, friction and offsets
and batches them. ``rnea_regressor_batched`` is the same regressor for a batch of states held
batch-minor (the batch is the last axis of every array), written as elementwise products and short
sums that XLA fuses into loops over the batch (a vmap of ``rnea_regressor`` is a chain of tiny
batched matrix products, slow on CPU).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = [
    "Joint",
    "joint_constants",
    "rnea",
    "crba",
    "rnea_regressor",
    "rnea_regressor_batched",
    "rnea_regressor_entries",
]

# -- spatial algebra: numpy constants, built at trace time from the static geometry -------------


def _skew(a) -> np.ndarray:
    """``[a]×``: ``[a]× b = a × b``."""
    return np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])


def _plucker(rotation: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """Motion transform parent → child of a child frame with axes ``rotation`` (columns, in parent
    coordinates) and origin ``origin`` (parent coordinates): ``[[E, 0], [−E [p]×, E]]``, ``E = Rᵀ``."""
    x = np.zeros((6, 6))
    x[:3, :3] = x[3:, 3:] = rotation.T
    x[3:, :3] = -rotation.T @ _skew(origin)
    return x


def _blocks(m: np.ndarray) -> np.ndarray:
    """``diag(m, m)``, 6×6."""
    return np.kron(np.eye(2), m)


def _crm(v: np.ndarray) -> np.ndarray:
    """Motion cross-product matrix ``v×`` of ``v = (ω, u)``: ``[[ω×, 0], [u×, ω×]]``."""
    x = np.zeros((6, 6))
    x[:3, :3] = x[3:, 3:] = _skew(v[:3])
    x[3:, :3] = _skew(v[3:])
    return x


#: ``v ×* = −(v×)ᵀ = Σ_j v_j _CRF[j]`` (force cross product as a constant bilinear form).
_CRF = np.stack([-_crm(e).T for e in np.eye(6)])


def _inertia_basis() -> np.ndarray:
    """``B (10, 6, 6)``: the spatial inertia of the standard parameters ``θ`` is ``Σ_k θ_k B[k]``."""
    basis = np.zeros((10, 6, 6))
    basis[0, 3:, 3:] = np.eye(3)
    for k in range(3):
        h = np.eye(3)[k]
        basis[1 + k, :3, 3:] = _skew(h)
        basis[1 + k, 3:, :3] = _skew(h).T
    for k, (i, j) in enumerate(((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))):
        basis[4 + k, :3, :3][i, j] = basis[4 + k, :3, :3][j, i] = 1.0
    return basis


_INERTIA_BASIS = _inertia_basis()


class Joint(NamedTuple):
    """Constants of one joint. Revolute: ``X(q) = x0 + cos q xc + sin q xs`` and the pose
    ``T(q) = t0 + cos q tc + sin q ts`` (4×4, link in parent); prismatic: ``X = x0 + q xc``,
    ``T = t0 + q tc`` (``xs``, ``ts`` unused). ``motion``: ``S`` (6,); ``bias``: ``−[S]×`` (so that
    ``v × (S q') = (bias @ v) q'``)."""

    revolute: bool
    x0: np.ndarray
    xc: np.ndarray
    xs: np.ndarray
    t0: np.ndarray
    tc: np.ndarray
    ts: np.ndarray
    motion: np.ndarray
    bias: np.ndarray


def joint_constants(kind: str, axis, rotation, origin) -> Joint:
    a, tree_r, tree_p = np.asarray(axis), np.asarray(rotation), np.asarray(origin)
    tree = _plucker(tree_r, tree_p)
    outer = np.outer(a, a)
    zero4 = np.zeros((4, 4))
    t0 = np.eye(4)
    t0[:3, 3] = tree_p
    if kind == "revolute":
        # Rot(a, q) = a aᵀ + cos q (1 − a aᵀ) + sin q [a]×; X = diag(Rotᵀ, Rotᵀ) X_tree.
        t0[:3, :3] = tree_r @ outer
        tc, ts = zero4.copy(), zero4.copy()
        tc[:3, :3] = tree_r @ (np.eye(3) - outer)
        ts[:3, :3] = tree_r @ _skew(a)
        x0, xc, xs = _blocks(outer) @ tree, _blocks(np.eye(3) - outer) @ tree, -_blocks(_skew(a)) @ tree
        motion = np.concatenate([a, np.zeros(3)])
    else:
        # X = plucker(1, q a) X_tree = X_tree + q [[0, 0], [−[a]×, 0]] X_tree.
        t0[:3, :3] = tree_r
        tc, ts = zero4.copy(), zero4
        tc[:3, 3] = tree_r @ a
        shift = np.zeros((6, 6))
        shift[3:, :3] = -_skew(a)
        x0, xc, xs = tree, shift @ tree, np.zeros((6, 6))
        motion = np.concatenate([np.zeros(3), a])
    return Joint(kind == "revolute", x0, xc, xs, t0, tc, ts, motion, -_crm(motion))


# -- the recursions: one arm, one state (unbatched) -------------------------------------------


def rnea(
    joints: list[Joint],
    xs: list[Array],
    inertial: Array,
    gravity: Array,
    qd: Array | None,
    qdd: Array | None,
) -> Array:
    """Rigid-body joint forces ``(n,)`` by recursive Newton–Euler; ``None`` velocities or
    accelerations are zero (their terms are left out)."""
    inertias = jnp.tensordot(inertial, _INERTIA_BASIS, axes=1)  # (n, 6, 6)
    v = None
    acc = jnp.concatenate([jnp.zeros(3), -gravity])  # gravity as a base acceleration
    forces = []
    for i, joint in enumerate(joints):
        acc = xs[i] @ acc
        if qdd is not None:
            acc = acc + joint.motion * qdd[i]
        if qd is not None:
            v = joint.motion * qd[i] if v is None else xs[i] @ v + joint.motion * qd[i]
            acc = acc + (joint.bias @ v) * qd[i]
        force = inertias[i] @ acc
        if v is not None:
            force = force + jnp.tensordot(v, _CRF, axes=1) @ (inertias[i] @ v)
        forces.append(force)
    tau = [None] * len(joints)
    child = None
    for i in range(len(joints) - 1, -1, -1):
        force = forces[i] if child is None else forces[i] + child
        tau[i] = joints[i].motion @ force
        child = xs[i].T @ force
    return jnp.stack(tau)


def crba(joints: list[Joint], xs: list[Array], inertial: Array) -> Array:
    """Rigid-body mass matrix ``(n, n)`` by the composite rigid body algorithm.

    Composite inertias ``Ic_{i−1} += X_iᵀ Ic_i X_i``; the forces ``Ic_i S_i`` of all columns are carried
    towards the base together (a 6×n matrix whose column ``i ≥ j`` is column ``i``'s force in link
    ``j``), so that row ``j`` of the upper triangle is ``S_jᵀ F_j``.
    """
    n = len(joints)
    inertias = jnp.tensordot(inertial, _INERTIA_BASIS, axes=1)
    composite = [inertias[i] for i in range(n)]
    for i in range(n - 1, 0, -1):
        composite[i - 1] = composite[i - 1] + xs[i].T @ composite[i] @ xs[i]
    unit = np.eye(n)
    rows = [None] * n
    forces = None
    for j in range(n - 1, -1, -1):
        column = jnp.outer(composite[j] @ joints[j].motion, unit[j])
        forces = column if forces is None else xs[j + 1].T @ forces + column
        rows[j] = joints[j].motion @ forces
    upper = jnp.stack(rows)
    return upper + upper.T - jnp.diag(jnp.diag(upper))


def rnea_regressor(joints: list[Joint], xs: list[Array], gravity: Array, qd: Array, qdd: Array) -> Array:
    """``Y (n, 10 n)`` with ``rnea(joints, xs, inertial, gravity, qd, qdd) = Y @ inertial.ravel()``.

    The forward pass of ``rnea`` gives each link's velocity ``v_i`` and acceleration ``a_i`` (gravity
    as a base acceleration); link ``i``'s force ``I_i a_i + v_i ×* I_i v_i`` is ``A_i θ_i`` with column
    ``k`` of ``A_i`` (6×10) ``B_k a_i + v_i ×* B_k v_i`` (``B = _INERTIA_BASIS``). Joint ``j`` carries
    the forces of links ``i ≥ j``, transported to its frame: the 6×10n matrix of every link's columns
    goes towards the base as ``crba``'s forces do, and row ``j`` is ``S_jᵀ`` times it. Exact (no
    differentiation): equal to the Jacobian of ``rnea`` in ``inertial`` to round-off.
    """
    n = len(joints)
    v = None
    acc = jnp.concatenate([jnp.zeros(3), -gravity])
    blocks = []
    for i, joint in enumerate(joints):
        acc = xs[i] @ acc + joint.motion * qdd[i]
        v = joint.motion * qd[i] if v is None else xs[i] @ v + joint.motion * qd[i]
        acc = acc + (joint.bias @ v) * qd[i]
        # (6, 10): B_k a + (v ×*) B_k v for the 10 basis inertias.
        blocks.append(
            jnp.einsum("kab,b->ak", _INERTIA_BASIS, acc)
            + jnp.tensordot(v, _CRF, axes=1) @ jnp.einsum("kab,b->ak", _INERTIA_BASIS, v)
        )
    rows = [None] * n
    forces = None
    for j in range(n - 1, -1, -1):
        # Columns of links j..n−1 in link j's frame (those of links < j are zero: not yet added).
        own = jnp.zeros((6, 10 * n)).at[:, 10 * j : 10 * (j + 1)].set(blocks[j])
        forces = own if forces is None else xs[j + 1].T @ forces + own
        rows[j] = joints[j].motion @ forces
    return jnp.stack(rows)


# -- the regressor for a batch of states, batch-minor ----------------------------------------------


def _apply_constant(matrix: np.ndarray, vectors: Array) -> Array:
    """``matrix @ vectors`` over the leading axis of ``vectors`` for a constant ``matrix``. A matrix
    with at most one nonzero per row, each ``±1`` (the inertia basis, the bias of an axis-aligned
    joint), is a signed gather of rows: the same numbers as the product (the other terms are exact
    zeros), without its multiplications by zero. Otherwise one ``dot`` whose other dimension is the
    whole batch (a plain matrix product, fast), written so that the graph stays small."""
    matrix = np.asarray(matrix)
    if np.all(np.count_nonzero(matrix, axis=1) <= 1) and np.all(np.isin(matrix, (-1.0, 0.0, 1.0))):
        index = np.argmax(matrix != 0, axis=1)
        sign = matrix[np.arange(matrix.shape[0]), index]
        return jnp.asarray(sign, dtype=vectors.dtype).reshape((-1,) + (1,) * (vectors.ndim - 1)) * vectors[index]
    return jnp.tensordot(jnp.asarray(matrix, dtype=vectors.dtype), vectors, axes=1)


def _apply(matrix: Array, vectors: Array) -> Array:
    """``matrix (r, c, B) @ vectors (c, m, B)`` per sample: ``(r, m, B)`` as a short sum over ``c``."""
    out = matrix[:, 0, None, :] * vectors[0]
    for b in range(1, matrix.shape[1]):
        out = out + matrix[:, b, None, :] * vectors[b]
    return out


def _cross(a: Array, b: Array) -> Array:
    """``a × b`` along the leading axis (length 3), broadcasting the others."""
    return jnp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _varying(joint: Joint, q: Array, c: Array, s: Array) -> Array:
    """The 6×6 transform ``X(q)`` of ``joint`` for a batch, ``(6, 6, B)``."""
    if joint.revolute:
        return joint.x0[..., None] + joint.xc[..., None] * c + joint.xs[..., None] * s
    return joint.x0[..., None] + joint.xc[..., None] * q


def _transform(x: Array, vectors: Array) -> Array:
    """Motion transform ``X = [[E, 0], [L, E]]`` ``(6, 6, B)`` applied to motion vectors ``(6, m, B)``."""
    e, lower = x[:3, :3], x[3:, :3]
    angular = vectors[:3]
    return jnp.concatenate([_apply(e, angular), _apply(lower, angular) + _apply(e, vectors[3:])])


def rnea_regressor_batched(joints: list[Joint], q: Array, gravity: Array, qd: Array, qdd: Array) -> Array:
    """``rnea_regressor`` for a batch of states, batch-minor: ``q, qd, qdd (n, B)``, ``gravity (3, B)``
    → ``Y (n, 10 n, B)``.

    Same quantities, other association: ``Y[j, link i] = S_jᵀ X_{j+1}ᵀ ⋯ X_iᵀ A_i = s_{j,i}ᵀ A_i``
    with ``s_{j,i} = X_i ⋯ X_{j+1} S_j`` (joint ``j``'s motion axis in link ``i``'s frame), carried
    forward with the velocity and acceleration (one transform of a ``(6, i + 1, B)`` stack per
    joint) instead of carrying 6×10n force matrices backward; ``A_i`` (6×10, ``B_k a_i + v_i ×* B_k
    v_i``) as in ``rnea_regressor``. Every product is an elementwise multiply of batch-long rows and
    a sum over a short leading axis, but for the constant matrices (one ``dot`` each over the whole
    batch). Equal to ``rnea_regressor`` to round-off.
    """
    n = len(joints)
    batch = q.shape[-1:]
    blocks = []
    for i, axes, columns in _links(joints, q, gravity, qd, qdd, [np.arange(10)] * n):
        # rows j ≤ i: s_{j,i}ᵀ A_i; rows j > i are zero.
        rows = _apply(jnp.swapaxes(axes, 0, 1), columns)  # (i + 1, 10, B)
        blocks.append(jnp.concatenate([rows, jnp.zeros((n - i - 1, 10) + batch, rows.dtype)]))
    return jnp.concatenate(blocks, axis=1)


def rnea_regressor_entries(
    joints: list[Joint], q: Array, gravity: Array, qd: Array, qdd: Array, entries: np.ndarray
) -> Array:
    """The entries ``entries`` (a boolean ``(n, 10 n)`` mask, rows ``j ≤`` link ``i`` only) of
    ``rnea_regressor_batched``'s ``Y``, ``(count, B)`` in the order of ``np.flatnonzero(entries)``: the
    same operations for those entries (the same numbers), the others (and the columns ``A_i`` no
    wanted entry uses) not computed."""
    parts, flat = regressor_entry_parts(joints, q, gravity, qd, qdd, entries)
    if not parts:
        return jnp.zeros((0,) + q.shape[-1:], q.dtype)
    return jnp.concatenate(parts)[np.argsort(np.concatenate(flat))]


def regressor_entry_parts(joints: list[Joint], q: Array, gravity: Array, qd: Array, qdd: Array, entries: np.ndarray):
    """``rnea_regressor_entries`` per link, unsorted: ``(parts, flat)``, ``parts[i] (count_i, B)`` the
    entries ``flat[i]`` (flat indices into ``(n, 10 n)``) of one link's columns."""
    n = len(joints)
    entries = np.asarray(entries, dtype=bool).reshape(n, n, 10)  # (row j, link i, column k)
    if np.any(entries & ~np.triu(np.ones((n, n), dtype=bool))[..., None]):
        raise ValueError("entries of row j > link i are zeros of the regressor: not computed; ask for j ≤ i only")
    wanted = [np.flatnonzero(entries[:, i].any(axis=0)) for i in range(n)]
    parts, flat = [], []
    for i, axes, columns in _links(joints, q, gravity, qd, qdd, wanted):
        rows, ks = np.nonzero(entries[: i + 1, i])
        if rows.size == 0:
            continue
        position = np.searchsorted(wanted[i], ks)
        out = axes[0, rows] * columns[0, position]
        for b in range(1, 6):  # the order of ``_apply``'s sum
            out = out + axes[b, rows] * columns[b, position]
        parts.append(out)
        flat.append(rows * 10 * n + 10 * i + ks)
    return parts, flat


def _links(joints: list[Joint], q: Array, gravity: Array, qd: Array, qdd: Array, wanted: list[np.ndarray]):
    """Per link ``i``: ``(i, axes, columns)``, ``axes (6, i + 1, B)`` the ``s_{j,i}`` and ``columns (6,
    len(wanted[i]), B)`` the columns ``wanted[i]`` of ``A_i`` (``rnea_regressor_batched``'s recursion)."""
    batch = q.shape[-1:]
    c, s = jnp.cos(q), jnp.sin(q)
    basis = _INERTIA_BASIS.transpose(1, 0, 2)  # [a, k]: B_k[a, :]
    acc = jnp.concatenate([jnp.zeros((3,) + batch, q.dtype), -gravity])[:, None]  # (6, 1, B)
    v = None
    axes = None  # (6, i, B): s_{j, i−1} for j < i
    for i, joint in enumerate(joints):
        motion = joint.motion[:, None, None]
        stack = [acc] if v is None else [acc, v, axes]
        moved = _transform(_varying(joint, q[i], c[i], s[i]), jnp.concatenate(stack, axis=1))
        acc = moved[:, :1] + motion * qdd[i]
        v = motion * qd[i] if i == 0 else moved[:, 1:2] + motion * qd[i]
        acc = acc + _apply_constant(joint.bias, v) * qd[i]
        own = jnp.broadcast_to(motion, (6, 1) + batch)
        axes = own if i == 0 else jnp.concatenate([moved[:, 2:], own], axis=1)
        # A_i (6, 10, B): B_k a + v ×* (B_k v) = B_k a + (ω × n + u × f, ω × f) for B_k v = (n, f).
        ks = np.asarray(wanted[i])
        if ks.size == 0:
            yield i, axes, None
            continue
        rows = basis[:, ks].reshape(6 * ks.size, 6)
        inertia_acc = _apply_constant(rows, acc[:, 0]).reshape(6, ks.size, *batch)
        inertia_v = _apply_constant(rows, v[:, 0]).reshape(6, ks.size, *batch)
        omega, u = v[:3], v[3:]
        bias = jnp.concatenate([_cross(omega, inertia_v[:3]) + _cross(u, inertia_v[3:]), _cross(omega, inertia_v[3:])])
        yield i, axes, inertia_acc + bias
