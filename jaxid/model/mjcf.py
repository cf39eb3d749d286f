"""Serial arms from MuJoCo's MJCF files: ``load_arm("robot.xml") -> SerialArm``.

MJCF is read through MuJoCo's own compiler (``mujoco.MjModel.from_xml_path``; MuJoCo is imported only
here, when an MJCF file is given): defaults classes, ``childclass``, ``<compiler angle eulerseq>``,
``euler``/``axisangle``/``xyaxes``/``zaxis`` orientations, ``<frame>``, ``<include>`` and inertia
inferred from geoms are MuJoCo's to resolve, and what jaxid reads is the compiled model: each body's
pose in its parent (``body_pos``, ``body_quat``), its mass, centre of mass, principal inertia and
inertial frame (``body_ipos``, ``body_iquat``, ``body_inertia``), each joint's anchor, axis and
reference position (``jnt_pos``, ``jnt_axis``, ``qpos0``), range, actuator force range, damping,
armature and friction loss, and ``<option gravity>``. Mesh files must be where the MJCF says (MuJoCo
loads the model whole).

The chain is built as from a URDF (``jaxid.model.urdf``): a body without moving joints folds into the
moving link it hangs from (the world body and what is welded to it are the ground); a hinge joint's
link frame is the body frame moved to the joint's anchor and turned back by its reference angle, so
that jaxid's ``q`` is MuJoCo's ``qpos`` (several joints in one body compose in order, as MuJoCo's
kinematics does). ``damping`` is viscous friction, ``frictionloss`` Coulomb friction (MuJoCo solves
it as a constraint; jaxid's is the smooth sign), ``armature`` the armature.

Refused with a one-line ``ValueError`` naming the file, the element and what to do: a file MuJoCo
cannot compile (its message kept), ``free`` and ``ball`` joints and a branch with moving joints on
two sides (``fixed_joints`` locks joints at their reference position ``qpos0``), a joint spring
(``stiffness``), an active equality constraint on the chain (coupled joints, closed loops), no moving
joint. Tendons and actuators do not change the arm's dynamics and are ignored; ``gravcomp`` (a force
MuJoCo adds) is ignored with a ``UrdfWarning``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence

import numpy as np

from .chain import UrdfChain, UrdfWarning, _standard

__all__ = ["parse_mjcf"]

_HINGE, _SLIDE, _BALL, _FREE = 3, 2, 1, 0


def _quat_matrix(quat) -> np.ndarray:
    """Rotation matrix of a unit quaternion ``(w, x, y, z)``."""
    w, x, y, z = np.asarray(quat, dtype=float) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_rotation(axis, angle: float) -> np.ndarray:
    """Rotation by ``angle`` [rad] about the unit ``axis`` (Rodrigues)."""
    a = np.asarray(axis, dtype=float)
    cross = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    return np.eye(3) + math.sin(angle) * cross + (1 - math.cos(angle)) * cross @ cross


def parse_mjcf(path: str | os.PathLike, *, fixed_joints: Sequence[str] = ()):
    """Read the serial chain of an MJCF file into a ``jaxid.model.urdf.UrdfChain`` (see the module
    docstring), with ``armature`` ``(n,)`` and ``gravity`` ``(3,)`` beside it: ``(chain, armature,
    gravity)``. Raises ``ValueError`` (one line) as the module docstring lists."""
    source = os.fspath(path)

    def fail(where: str, problem: str) -> ValueError:
        return ValueError(f"{source}: {where}: {problem}.")

    try:
        import mujoco
    except ImportError:
        raise fail("MJCF", "reading MJCF needs MuJoCo (pip install mujoco); or give a URDF") from None
    try:
        model = mujoco.MjModel.from_xml_path(source)
    except Exception as error:  # MuJoCo raises ValueError with a multi-line message
        first = " ".join(str(error).split())
        raise fail("MJCF", f"MuJoCo cannot compile it ({first}); fix the file (mesh files where it says?)") from None
    joint_name = [model.joint(k).name or f"joint{k}" for k in range(model.njnt)]
    body_name = [model.body(b).name or f"body{b}" for b in range(model.nbody)]
    unknown = [j for j in fixed_joints if j not in joint_name]
    if unknown:
        raise fail("fixed_joints", f"no joint named {unknown[0]!r}; choose among {sorted(joint_name)}")

    def joints_of(body: int) -> range:
        start = int(model.body_jntadr[body])
        return range(start, start + int(model.body_jntnum[body])) if start >= 0 else range(0)

    def moves(k: int) -> bool:
        return int(model.jnt_type[k]) in (_HINGE, _SLIDE) and joint_name[k] not in fixed_joints

    children: dict[int, list[int]] = {b: [] for b in range(model.nbody)}
    for b in range(1, model.nbody):
        children[int(model.body_parentid[b])].append(b)
    below: dict[int, list[str]] = {}

    def moving_below(body: int) -> list[str]:
        if body not in below:
            found = [joint_name[k] for k in joints_of(body) if moves(k)]
            for child in children[body]:
                found += moving_below(child)
            below[body] = found
        return below[body]

    for k in range(model.njnt):
        kind = int(model.jnt_type[k])
        if kind in (_FREE, _BALL) and joint_name[k] not in fixed_joints:
            word = "free" if kind == _FREE else "ball"
            raise fail(
                f"joint {joint_name[k]!r}",
                f"a {word} joint is not supported (jaxid models an arm fixed to the ground, one axis per joint); "
                f"lock it at its reference pose with fixed_joints=({joint_name[k]!r},)",
            )
        if moves(k) and model.jnt_stiffness[k] != 0:
            raise fail(
                f"joint {joint_name[k]!r}",
                f"stiffness {float(model.jnt_stiffness[k])} is a joint spring, which SerialArm does not model; "
                "set it to 0 or lock the joint with fixed_joints",
            )
    moving_joints = {joint_name[k] for k in range(model.njnt) if moves(k)}
    for e in range(model.neq):
        if not model.eq_active0[e]:
            continue
        kind = int(model.eq_type[e])
        if kind == int(mujoco.mjtEq.mjEQ_JOINT):
            involved = {joint_name[int(model.eq_obj1id[e])]}
            if model.eq_obj2id[e] >= 0:
                involved.add(joint_name[int(model.eq_obj2id[e])])
            coupled = sorted(involved & moving_joints)
        elif kind in (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD)):
            bodies = [int(model.eq_obj1id[e]), int(model.eq_obj2id[e])]
            if int(model.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_SITE):
                bodies = [int(model.site_bodyid[s]) for s in bodies]
            coupled = sorted({j for b in bodies for j in _path_joints(model, b, joint_name)} & moving_joints)
        else:
            coupled = sorted(moving_joints) if kind == int(mujoco.mjtEq.mjEQ_TENDON) else []
        if coupled:
            name = model.equality(e).name or f"equality {e}"
            raise fail(
                f"<equality> {name!r}",
                f"an active equality constraint couples joints {tuple(coupled)} (a closed loop or coupled joints, "
                f"which a serial chain cannot hold); lock them with fixed_joints={tuple(coupled)}",
            )

    bodies: list[np.ndarray] = []
    chain: list[dict] = []
    armature: list[float] = []
    # (body, index of the moving link it hangs from (-1: ground), pose of its parent's frame in that link)
    stack = [(b, -1, np.eye(3), np.zeros(3)) for b in reversed(children[0])]
    while stack:
        body, link, rot, pos = stack.pop()
        pos = rot @ model.body_pos[body] + pos
        rot = rot @ _quat_matrix(model.body_quat[body])
        for k in joints_of(body):
            if not moves(k):
                continue  # locked: the body stays at its reference pose
            axis = np.asarray(model.jnt_axis[k], dtype=float)
            axis = axis / np.linalg.norm(axis)
            reference = float(model.qpos0[int(model.jnt_qposadr[k])])
            dof = int(model.jnt_dofadr[k])
            if int(model.jnt_type[k]) == _HINGE:
                anchor = np.asarray(model.jnt_pos[k], dtype=float)
                tree_rot, tree_pos = rot @ _axis_rotation(axis, -reference), rot @ anchor + pos
                rot, pos = np.eye(3), -anchor  # the body frame in the new link frame
                kind = "revolute"
            else:
                tree_rot, tree_pos = rot, pos - reference * (rot @ axis)
                rot, pos = np.eye(3), np.zeros(3)
                kind = "prismatic"
            limited = bool(model.jnt_limited[k])
            force_limited = bool(model.jnt_actfrclimited[k])
            chain.append(
                dict(
                    name=joint_name[k],
                    link=body_name[body],
                    type=kind,
                    axis=axis,
                    rot=tree_rot,
                    pos=tree_pos,
                    damping=float(model.dof_damping[dof]),
                    friction=float(model.dof_frictionloss[dof]),
                    limits=tuple(float(v) for v in model.jnt_range[k]) if limited else (-math.inf, math.inf),
                    velocity=math.inf,
                    effort=float(np.max(np.abs(model.jnt_actfrcrange[k]))) if force_limited else math.inf,
                )
            )
            armature.append(float(model.dof_armature[dof]))
            bodies.append(np.zeros(10))
            link = len(bodies) - 1
        if link >= 0 and model.body_mass[body] > 0:
            inertial_rot = rot @ _quat_matrix(model.body_iquat[body])
            tensor = inertial_rot @ np.diag(model.body_inertia[body]) @ inertial_rot.T
            com = rot @ model.body_ipos[body] + pos
            bodies[link] = bodies[link] + _standard(float(model.body_mass[body]), com, tensor)
        branches = [(c, moving_below(c)) for c in children[body] if moving_below(c)]
        if len(branches) > 1:
            described = ", ".join(f"body {body_name[c]!r} ({len(names)} moving)" for c, names in branches)
            largest = max(len(names) for _, names in branches)
            keep = next(c for c, names in branches if len(names) == largest)
            locked = tuple(n for c, names in branches if c != keep or largest == 1 for n in names)
            raise fail(
                f"body {body_name[body]!r}",
                f"the chain branches into {described}; jaxid models a serial chain: lock the joints of all but one "
                f"branch, e.g. fixed_joints={locked}",
            )
        for child in reversed(children[body]):
            stack.append((child, link, rot, pos))
    if not chain:
        raise fail("<worldbody>", "no hinge or slide joint that is not locked; a serial arm needs one")
    compensated = [body_name[b] for b in range(1, model.nbody) if model.body_gravcomp[b] != 0]
    if compensated:
        warnings.warn(
            f"{source}: bodies {tuple(compensated)} have gravcomp (MuJoCo's gravity compensation, a force MuJoCo adds, "
            "not the arm's dynamics): ignored, their weight counts in jaxid's torques",
            UrdfWarning,
            stacklevel=3,
        )
    return (
        UrdfChain.from_joints(model.names[: model.names.index(b"\0")].decode() if model.names else "", chain, bodies),
        np.array(armature),
        np.array(model.opt.gravity, dtype=float),
    )


def _path_joints(model, body: int, joint_name: list[str]) -> list[str]:
    """The joints between a body and the world."""
    found = []
    while body > 0:
        start = int(model.body_jntadr[body])
        if start >= 0:
            found += [joint_name[k] for k in range(start, start + int(model.body_jntnum[body]))]
        body = int(model.body_parentid[body])
    return found
