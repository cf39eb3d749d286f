"""``SerialArm`` dynamics written out joint by joint on scalars: the fast path of batched simulation.

The generic ``SerialArm`` methods work on ``(n,)`` joint vectors with 6×6 Plücker matrices. Under
``vmap`` every one of those small matrix products becomes a batched ``dot`` of its own (the batch as
the leading axis, a few multiply-adds per call), which dominated the batched closed-loop simulator.
Here the same mathematics is written for **one trial on scalars**: every joint quantity is a tuple
of 0-d arrays, spatial vectors are pairs of 3-vectors, transforms are a 3×3 rotation and a
translation, and the loops over joints, rows and columns are unrolled at trace time. Under ``vmap``
each scalar becomes a contiguous ``(B,)`` vector and the whole step is elementwise arithmetic that
XLA fuses and vectorises along the batch. The static geometry is folded in as Python floats, so a
product with a zero entry is never emitted and a unit entry costs nothing (a URDF's joint axes and
quarter-turn frames are mostly zeros and ones; entries within ``4 eps`` of ``0`` or ``±1`` in the
rotations, e.g. ``cos(π/2) = 6e-17``, are taken as exact).

What is computed, per call (Featherstone 2008, motion ``(ω, v)``, force ``(n, f)``; the transform
from a parent to link ``i`` is ``(E_i, r_i)``: ``X (ω, v) = (E ω, E (v − r × ω))``,
``Xᵀ (n, f) = (Eᵀ n + r × Eᵀ f, Eᵀ f)``):

- ``forward_dynamics``: the bias forces ``C q' + G`` by recursive Newton–Euler at ``q'' = 0``, the
  mass matrix by the composite rigid body algorithm (composite inertias kept as 10 standard
  parameters, moved to the parent frame by the parallel-axis rule), armature on its diagonal, the
  friction and offset of ``SerialArm``, then an unrolled Cholesky solve. The same algorithms as
  ``SerialArm.forward_dynamics`` in another arithmetic order: the two agree to round-off
  (``tests/test_unrolled.py``: 1e-12 relative).
- ``inverse_dynamics``: recursive Newton–Euler plus armature, friction and offset.

Both take the arm's leaves already split into scalars (``split_parameters``, done once per trial
outside a time loop so that the loop carries ``(B,)`` vectors) and the sines and cosines of the
revolute joints' angles, so a caller can compute them once per stage and materialise them. Pure,
``jit``/``vmap``/``grad``-compatible; no LAPACK.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .scalar_algebra import (
    ZERO,
    Mat,
    Term,
    Vec,
    add,
    cholesky_solve,
    cross,
    dot,
    ldl_solve,
    matvec,
    mul,
    neg,
    scale,
    snap,
    sub,
    tmatvec,
    total,
)

_TWO_OVER_PI = 2 / np.pi


# -- geometry and parameters ---------------------------------------------------------------------


class _JointGeometry(NamedTuple):
    """Constants of one joint as Python floats. Revolute: ``E(q) = e0 + cos q ec + sin q es``,
    ``r`` fixed; prismatic: ``E = e0``, ``r(q) = r + q rq``. ``axis``: the joint axis in the link frame."""

    revolute: bool
    axis: Vec
    e0: Mat
    ec: Mat
    es: Mat
    r: Vec
    rq: Vec


def _floats(m) -> tuple:
    return tuple(tuple(snap(x) for x in row) for row in np.asarray(m))


def joint_geometry(arm) -> tuple[_JointGeometry, ...]:
    """The static geometry of a ``SerialArm`` as trace-time constants (one entry per joint)."""
    out = []
    for kind, axis, rotation, origin in zip(
        arm.joint_types, arm.axes, arm.parent_rotations, arm.parent_translations, strict=True
    ):
        a, tree_r, p = np.asarray(axis, dtype=float), np.asarray(rotation, dtype=float), np.asarray(origin)
        outer = np.outer(a, a)
        skew = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
        r = tuple(float(x) for x in p)
        if kind == "revolute":
            # E = Rot(a, q)ᵀ R_treeᵀ = (a aᵀ + cos q (1 − a aᵀ) − sin q [a]×) R_treeᵀ.
            e0, ec, es = outer @ tree_r.T, (np.eye(3) - outer) @ tree_r.T, -skew @ tree_r.T
            out.append(_JointGeometry(True, tuple(snap(x) for x in a), _floats(e0), _floats(ec), _floats(es), r, ZERO))
        else:
            zero = np.zeros((3, 3))
            rq = tuple(snap(x) for x in tree_r @ a)
            geometry = _JointGeometry(
                False, tuple(snap(x) for x in a), _floats(tree_r.T), _floats(zero), _floats(zero), r, rq
            )
            out.append(geometry)
    return tuple(out)


class UnrolledParameters(NamedTuple):
    """A ``SerialArm``'s leaves split into scalars (0-d arrays; ``(B,)`` vectors under ``vmap``).

    ``links[i] = (m, h, Ī)`` with ``h = (mx, my, mz)`` and ``Ī`` the symmetric 3×3 inertia about the
    link origin; ``armature``, ``viscous``, ``coulomb``, ``offset``: ``n``-tuples; ``gravity``: 3-tuple.
    """

    links: tuple[tuple[Term, Vec, Mat], ...]
    armature: tuple[Term, ...]
    viscous: tuple[Term, ...]
    coulomb: tuple[Term, ...]
    offset: tuple[Term, ...]
    gravity: Vec


def split_parameters(arm) -> UnrolledParameters:
    """The leaves of one (unbatched) ``SerialArm`` as scalars (``UnrolledParameters``)."""
    n = arm.dof
    links = []
    for i in range(n):
        p = [arm.inertial[i, k] for k in range(10)]
        links.append(_link(p))

    def per_joint(x):
        return tuple(x[i] for i in range(n))

    return UnrolledParameters(
        tuple(links),
        per_joint(arm.armature),
        per_joint(arm.viscous),
        per_joint(arm.coulomb),
        per_joint(arm.offset),
        tuple(arm.gravity[k] for k in range(3)),
    )


def split_standard(arm, standard) -> UnrolledParameters:
    """``split_parameters`` of ``arm`` with its parameters replaced by the standard vector ``standard``
    ``(14 n,)`` (``SerialArm.standard_names`` order; traced, and not checked: an identified vector that the
    arm's constructor would refuse, e.g. a zero mass, is taken as it is). The inverse and forward dynamics
    are those of ``Y(q, q', q'') standard``: e.g. a base-parameter model with its dependent standard
    parameters at 0 (``jaxid.fit.model.BaseColumns.standard``)."""
    n = arm.dof
    links = tuple(_link([standard[10 * i + k] for k in range(10)]) for i in range(n))

    def per_joint(block):
        return tuple(standard[10 * n + block * n + i] for i in range(n))

    gravity = tuple(arm.gravity[k] for k in range(3))
    return UnrolledParameters(links, per_joint(0), per_joint(1), per_joint(2), per_joint(3), gravity)


def _link(p) -> tuple[Term, Vec, Mat]:
    # (m, (mx, my, mz), Ī) from the link's 10 standard parameters.
    ixx, ixy, ixz, iyy, iyz, izz = p[4:]
    return p[0], (p[1], p[2], p[3]), ((ixx, ixy, ixz), (ixy, iyy, iyz), (ixz, iyz, izz))


def _transforms(geometry, q, sin, cos) -> list[tuple[Mat, Vec]]:
    out = []
    for i, g in enumerate(geometry):
        if g.revolute:
            e = tuple(
                tuple(total((g.e0[k][m], mul(g.ec[k][m], cos[i]), mul(g.es[k][m], sin[i]))) for m in range(3))
                for k in range(3)
            )
            out.append((e, g.r))
        else:
            out.append((g.e0, tuple(total((g.r[k], mul(g.rq[k], q[i]))) for k in range(3))))
    return out


def _inertia_times(link, omega: Vec, v: Vec) -> tuple[Vec, Vec]:
    """Spatial inertia ``(m, h, Ī)`` times the motion ``(ω, v)``: ``(Ī ω + h × v, m v − h × ω)``."""
    m, h, inertia = link
    return add(matvec(inertia, omega), cross(h, v)), sub(scale(m, v), cross(h, omega))


def _force_to_parent(e: Mat, r: Vec, n: Vec, f: Vec) -> tuple[Vec, Vec]:
    """``Xᵀ (n, f) = (Eᵀ n + r × Eᵀ f, Eᵀ f)``."""
    ft = tmatvec(e, f)
    return add(tmatvec(e, n), cross(r, ft)), ft


def _rnea(geometry, transforms, params: UnrolledParameters, qd, qdd) -> list[Term]:
    """Rigid-body joint forces by recursive Newton–Euler; ``qdd=None``: ``q'' = 0``."""
    omega, vel = ZERO, ZERO
    alpha, acc = ZERO, tuple(neg(g) for g in params.gravity)  # gravity as a base acceleration
    forces = []
    for i, (g, (e, r)) in enumerate(zip(geometry, transforms, strict=True)):
        # Parent velocity and acceleration in link coordinates: X (ω, v) = (E ω, E (v − r × ω)).
        omega, vel = matvec(e, omega), matvec(e, sub(vel, cross(r, omega)))
        alpha, acc = matvec(e, alpha), matvec(e, sub(acc, cross(r, alpha)))
        joint = scale(qd[i], g.axis)  # S q'
        if g.revolute:
            omega = add(omega, joint)
            if qdd is not None:
                alpha = add(alpha, scale(qdd[i], g.axis))
            # (ω, v) × (S q') with S q' = (a q', 0).
            alpha, acc = add(alpha, cross(omega, joint)), add(acc, cross(vel, joint))
        else:
            vel = add(vel, joint)
            if qdd is not None:
                acc = add(acc, scale(qdd[i], g.axis))
            acc = add(acc, cross(omega, joint))  # (ω, v) × (0, a q') = (0, ω × a q')
        n_a, f_a = _inertia_times(params.links[i], alpha, acc)
        n_v, f_v = _inertia_times(params.links[i], omega, vel)
        # I a + (ω, v) ×* I v, with (ω, v) ×* (n, f) = (ω × n + v × f, ω × f).
        force = (add(n_a, add(cross(omega, n_v), cross(vel, f_v))), add(f_a, cross(omega, f_v)))
        forces.append(force)
    tau = [None] * len(geometry)
    child = None
    for i in range(len(geometry) - 1, -1, -1):
        n_i, f_i = forces[i] if child is None else (add(forces[i][0], child[0]), add(forces[i][1], child[1]))
        tau[i] = dot(geometry[i].axis, n_i if geometry[i].revolute else f_i)
        child = _force_to_parent(*transforms[i], n_i, f_i)
    return tau


def _inertia_to_parent(link, e: Mat, r: Vec):
    """The rigid-body inertia ``(m, h, Ī)`` of a link expressed about its parent's origin in parent
    coordinates: ``h' = Eᵀ h + m r``, ``Ī' = Eᵀ Ī E + 2 (r·hr) 1 + m |r|² 1 − hr rᵀ − r hrᵀ − m r rᵀ``
    (``hr = Eᵀ h``; the parallel-axis rule ``I_O = I_P − [r]×[hr]× − [hr]×[r]× − m [r]×[r]×``)."""
    m, h, inertia = link
    hr = tmatvec(e, h)
    ie = tuple(tuple(dot(inertia[k], (e[0][c], e[1][c], e[2][c])) for c in range(3)) for k in range(3))  # Ī E
    rotated = {
        (k, c): dot((e[0][k], e[1][k], e[2][k]), (ie[0][c], ie[1][c], ie[2][c])) for k in range(3) for c in range(k, 3)
    }
    diag = total((mul(2.0, dot(r, hr)), mul(dot(r, r), m)))
    out = {}
    for k in range(3):
        for c in range(k, 3):
            terms = [rotated[(k, c)], neg(mul(hr[k], r[c])), neg(mul(r[k], hr[c])), neg(mul(r[k] * r[c], m))]
            if k == c:
                terms.append(diag)
            out[(k, c)] = total(terms)
    shifted = tuple(tuple(out[(min(k, c), max(k, c))] for c in range(3)) for k in range(3))
    return m, add(hr, scale(m, r)), shifted


def _add_inertia(a, b):
    return total((a[0], b[0])), add(a[1], b[1]), tuple(add(x, y) for x, y in zip(a[2], b[2], strict=True))


def _mass_matrix(geometry, transforms, params: UnrolledParameters) -> list[list[Term]]:
    """Rigid-body mass matrix (lower triangle ``h[i][j]``, ``j ≤ i``) by the composite rigid body algorithm."""
    n = len(geometry)
    composite = list(params.links)
    for i in range(n - 1, 0, -1):
        composite[i - 1] = _add_inertia(composite[i - 1], _inertia_to_parent(composite[i], *transforms[i]))
    h = [[None] * n for _ in range(n)]
    for j in range(n):
        a = geometry[j].axis
        if geometry[j].revolute:
            force = _inertia_times(composite[j], a, ZERO)
        else:
            force = _inertia_times(composite[j], ZERO, a)
        for i in range(j, -1, -1):
            if i < j:
                force = _force_to_parent(*transforms[i + 1], *force)
            h[j][i] = dot(geometry[i].axis, force[0] if geometry[i].revolute else force[1])
    return h


def _friction(params: UnrolledParameters, qd, slope: float) -> list[Term]:
    return [
        params.viscous[i] * qd[i] + params.coulomb[i] * _TWO_OVER_PI * jnp.arctan(slope * qd[i]) for i in range(len(qd))
    ]


def forward_dynamics(
    geometry, params: UnrolledParameters, slope: float, q, qd, tau, sin, cos, definite: bool = True
) -> list[Term]:
    """``q''`` of ``SerialArm.forward_dynamics`` for one trial, on scalars.

    Args:
        geometry: ``joint_geometry(arm)``; params: ``split_parameters(arm)``; slope: ``arm.coulomb_slope``.
        q, qd, tau: ``n`` scalars each [rad or m, rad/s or m/s, N m or N].
        sin, cos: ``n`` scalars, ``sin q_i`` and ``cos q_i`` (used for revolute joints only).
        definite: solve by Cholesky (a mass matrix that is not positive definite gives ``nan``: a physical
            arm's always is); ``False``: by ``LDLᵀ`` without square roots (``ldl_solve``), finite for an
            indefinite matrix whose leading minors are not zero, as the elimination of the generic path
            (``jaxid.linalg.solve``) is: an identified model's (``split_standard``), which need not be
            physical.

    Returns ``n`` scalars [rad/s² or m/s²].
    """
    h, rhs = mass_system(geometry, params, slope, q, qd, tau, sin, cos)
    return cholesky_solve(h, rhs) if definite else ldl_solve(h, rhs)


def mass_system(geometry, params: UnrolledParameters, slope: float, q, qd, tau, sin, cos):
    """``(D, τ − b)``: the mass matrix with its armature (lower triangle, ``n`` rows of scalars) and the
    torque less the bias, friction and offset (``n`` scalars), whose solve ``forward_dynamics`` returns
    (arguments as there). A caller that also solves other right-hand sides with ``D`` (the sensitivities of
    ``jaxid.estimate.logs.sensitivities``) takes them from here."""
    transforms = _transforms(geometry, q, sin, cos)
    bias = _rnea(geometry, transforms, params, qd, None)
    h = _mass_matrix(geometry, transforms, params)
    n = len(geometry)
    for i in range(n):
        h[i][i] = total((h[i][i], params.armature[i]))
    friction = _friction(params, qd, slope)
    return h, [tau[i] - params.offset[i] - bias[i] - friction[i] for i in range(n)]


def inverse_dynamics(geometry, params: UnrolledParameters, slope: float, q, qd, qdd, sin, cos) -> list[Term]:
    """The torque reading of ``SerialArm.inverse_dynamics`` for one trial, on scalars (arguments as
    ``forward_dynamics``, ``qdd`` the accelerations); returns ``n`` scalars [N m or N]."""
    transforms = _transforms(geometry, q, sin, cos)
    rigid = _rnea(geometry, transforms, params, qd, qdd)
    friction = _friction(params, qd, slope)
    return [rigid[i] + params.armature[i] * qdd[i] + friction[i] + params.offset[i] for i in range(len(geometry))]
