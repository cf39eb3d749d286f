"""Serial arms from URDF files: ``load_arm(path) -> SerialArm`` (MJCF files too, through
``jaxid.model.mjcf``).

Parsed with the standard library (``xml.etree.ElementTree``); ``<visual>``, ``<collision>``,
``<transmission>``, ``<gazebo>``, ``<material>`` and other elements are ignored (meshes and
``package://`` paths are never read). What is read:

- the kinematic chain from the root link (the one link that is no joint's child; a ``world`` link
  with a fixed joint to the base is such a root), through ``revolute``, ``continuous`` (a revolute
  joint without position limits), ``prismatic`` and ``fixed`` joints, in any order in the file:
  ``<origin xyz rpy>`` (the child frame in the parent frame; ``rpy`` fixed-axis roll, pitch, yaw:
  ``R = Rz(yaw) Ry(pitch) Rx(roll)``), ``<axis xyz>`` (default ``1 0 0``; any non-zero length or
  sign, normalised), ``<limit lower upper velocity effort>`` (``lower == upper``, a velocity or effort of 0:
  urdfdom's defaults for missing values, read as no limit), ``<dynamics damping friction>``
  (viscous ``fv`` and Coulomb ``fc`` friction);
- each link's ``<inertial>``: ``<mass>``, ``<origin xyz rpy>`` (centre of mass and inertial frame),
  ``<inertia ixx ixy ixz iyy iyz izz>`` (tensor entries about the centre of mass, inertial frame). A
  link without ``<inertial>`` is massless.

Fixed joints (and joints named in ``fixed_joints``, locked at position 0; a ``floating`` or
``planar`` joint locked at its ``<origin>``) fold their child into the parent body: transforms
compose, and the child's mass, first moment and inertia are added about the body's frame origin
(parallel-axis theorem), so branches that carry no moving joint (a hand, a camera, a tool frame)
merge into the last moving link. The root link and whatever is fixed to it are the ground; their
inertia is dropped. Two branches that carry moving joints make a tree, not a chain: a ``ValueError``
names the branching link, lists the branches and proposes a ``fixed_joints`` that leaves one.

Every problem is a one-line ``ValueError`` that names the file, the element and what to change
(unexpanded xacro, unlocked floating/planar joints and moving ``<mimic>`` joints included). What is
readable but physically inconsistent or odd (a negative mass, an inertia tensor no rigid body has, a
negative ``<dynamics damping>`` or ``friction``, as identified parameter sets may have; joints that
move no mass) is read as given, with a one-line ``UrdfWarning`` naming the link or joint, the
quantity and its value: such a file loads as a fit's reference or an ``[arm]``'s geometry.

The XML itself (elements, numeric attributes, ``<origin>``, ``<inertial>``, xacro leftovers) is read
by ``jaxid.model.urdf_xml``; this module walks the tree into a chain and builds the ``SerialArm``.
"""

from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from .chain import UrdfChain, UrdfWarning, _standard
from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY
from .serial import SerialArm
from .urdf_xml import _link_inertial, _read_xml, _Reader, rpy_matrix

__all__ = ["UrdfChain", "UrdfWarning", "parse_urdf", "load_arm", "rpy_matrix"]

_MOVING = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic"}
_UNSUPPORTED = ("floating", "planar")


def parse_urdf(path: str | os.PathLike, *, fixed_joints: Sequence[str] = ()) -> UrdfChain:
    """Read the serial chain of a URDF file (see the module docstring for what is read).

    Args:
        path: the ``.urdf`` file.
        fixed_joints: names of joints to treat as fixed, locked at position 0 (e.g. a gripper's
            fingers, so that a hand with two finger joints folds into the last link; a ``floating`` or
            ``planar`` joint at its ``<origin>``).

    Raises ``ValueError`` (one line: file, element, what to change) for an unreadable file or XML, a root
    that is not ``<robot>``, unexpanded xacro, an unlocked ``floating`` or ``planar`` joint or an unknown
    joint type, a joint naming an unknown link, a link that is the child of two joints, no single root or
    a link not connected to it, a branch with moving joints on two sides (the message lists the branches
    and a ``fixed_joints`` that leaves one), a moving ``<mimic>`` joint, an ``<inertial>`` without
    ``<mass>`` or ``<inertia>``, a zero axis, lower limit above upper, a non-numeric attribute, an
    unknown name in ``fixed_joints``, or no moving joint.

    Warns (``UrdfWarning``, one line each, the file read as given) for what no physical arm has: a
    negative mass or an inertia tensor that is not positive semidefinite or violates the triangle
    inequality (of a moving link), a negative ``<dynamics damping>`` or ``friction``; and for joints
    that move no mass or inertia (the mass matrix is then singular and forward dynamics gives ``nan``).
    """
    source = os.fspath(path)
    reader = _Reader(source)
    root = _read_xml(reader)
    links = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name:
            raise reader.fail("<link>", "a link has no name; add name=...")
        if name in links:
            raise reader.fail(f"link {name!r}", "the name is used twice; rename one")
        links[name] = link
    if not links:
        raise reader.fail(
            "<robot>", "no <link>; give a URDF that describes the robot (expanded, if it came from xacro)"
        )
    joints = {}
    parent_of: dict[str, str] = {}
    children: dict[str, list] = {name: [] for name in links}
    for joint in root.findall("joint"):
        name = joint.get("name")
        where = f"joint {name!r}"
        if not name:
            raise reader.fail("<joint>", "a joint has no name; add name=...")
        if name in joints:
            raise reader.fail(where, "the name is used twice; rename one")
        kind = joint.get("type")
        if kind in _UNSUPPORTED and name not in fixed_joints:
            raise reader.fail(
                where,
                f"joint type {kind!r} is not supported (jaxid models an arm fixed to the ground); lock it at its "
                f"<origin> with fixed_joints=({name!r},) or make it revolute, continuous, prismatic or fixed",
            )
        if kind not in (*_MOVING, "fixed", *_UNSUPPORTED):
            raise reader.fail(where, f"unknown joint type {kind!r}; use revolute, continuous, prismatic or fixed")
        ends = []
        for tag in ("parent", "child"):
            element = joint.find(tag)
            link_name = element.get("link") if element is not None else None
            if link_name is None:
                raise reader.fail(where, f"<{tag} link=...> is missing; name the {tag} link")
            if link_name not in links:
                raise reader.fail(
                    f"{where} <{tag}>", f"link {link_name!r} is not defined; add <link name={link_name!r}>"
                )
            ends.append(link_name)
        parent, child = ends
        if child in parent_of:
            raise reader.fail(
                where,
                f"link {child!r} is already the child of joint {parent_of[child]!r}; a link has one parent "
                "(jaxid reads trees, not closed loops)",
            )
        parent_of[child] = name
        joints[name] = joint
        children[parent].append(joint)
    unknown = [j for j in fixed_joints if j not in joints]
    if unknown:
        raise reader.fail("fixed_joints", f"no joint named {unknown[0]!r}; choose among {sorted(joints)}")
    roots = [name for name in links if name not in parent_of]
    if len(roots) != 1:
        raise reader.fail(
            "<robot>", f"{len(roots)} root links {roots} (links that are no joint's child); connect them into one tree"
        )

    def moves(joint) -> bool:
        return joint.get("type") in _MOVING and joint.get("name") not in fixed_joints

    below: dict[str, list[str]] = {}

    def moving_below(link_name: str) -> list[str]:
        """The moving joints in the subtree of a link (depth first, file order)."""
        if link_name not in below:
            below[link_name] = []  # guards against cycles
            found = []
            for j in children[link_name]:
                found += [j.get("name")] * moves(j) + moving_below(j.find("child").get("link"))
            below[link_name] = found
        return below[link_name]

    def branches_of(link_name: str) -> list:
        """``(joint, its moving joints and those below it)`` for each child joint that leads to motion."""
        branches = [
            (j, [j.get("name")] * moves(j) + moving_below(j.find("child").get("link"))) for j in children[link_name]
        ]
        return [(j, names) for j, names in branches if names]

    def chain_locks(link_name: str) -> list[str]:
        """Moving joints to lock in a link's subtree so that one chain is left: at each branching, the
        branch with the most moving joints is kept (none when the largest are single joints alike, a
        gripper's fingers)."""
        branches = branches_of(link_name)
        sizes = [len(names) for _, names in branches]
        largest = max(sizes, default=0)
        keep = -1 if largest == 1 and sizes.count(1) > 1 else sizes.index(largest) if sizes else -1
        locks = []
        for k, (joint, names) in enumerate(branches):
            locks += chain_locks(joint.find("child").get("link")) if k == keep else names
        return locks

    # Walk the tree: ``body`` is the index of the moving body the current link is fixed to (-1: ground),
    # ``(rot, pos)`` the link's frame in that body's frame.
    bodies: list[np.ndarray] = []
    problems: list[str] = []
    chain = []
    stack = [(roots[0], -1, np.eye(3), np.zeros(3))]
    visited = set()
    while stack:
        link_name, body, rot, pos = stack.pop()
        if link_name in visited:
            raise reader.fail(f"link {link_name!r}", "the joints form a cycle; a URDF is a tree")
        visited.add(link_name)
        found = _link_inertial(reader, links[link_name]) if body >= 0 else None
        if found is not None:
            mass, com, tensor_com, tensor_problems = found
            problems += tensor_problems
            bodies[body] = bodies[body] + _standard(mass, rot @ com + pos, rot @ tensor_com @ rot.T)
        branches = branches_of(link_name)
        if len(branches) > 1:
            raise reader.fail(f"link {link_name!r}", _branch_advice(branches, tuple(chain_locks(roots[0]))))
        for joint in children[link_name]:
            name = joint.get("name")
            where = f"joint {name!r}"
            child = joint.find("child").get("link")
            joint_rot, joint_pos = reader.origin(joint, where)
            child_rot, child_pos = rot @ joint_rot, rot @ joint_pos + pos
            if not moves(joint):
                stack.append((child, body, child_rot, child_pos))
                continue
            mimic = joint.find("mimic")
            if mimic is not None:
                raise reader.fail(
                    where,
                    f"it mimics joint {mimic.get('joint')!r} (<mimic>) and jaxid has no coupled joints; "
                    f"lock it with fixed_joints=({name!r},)",
                )
            axis = reader.numbers(joint.find("axis"), "xyz", 3, f"{where} <axis>", default=[1, 0, 0])
            norm = float(np.linalg.norm(axis))
            if not norm > 0:
                raise reader.fail(f"{where} <axis>", 'the axis is zero; give the joint\'s direction, e.g. xyz="0 0 1"')
            kind = _MOVING[joint.get("type")]
            limit = joint.find("limit")
            inf = math.inf
            continuous = joint.get("type") == "continuous"
            lower = -inf if continuous else reader.number(limit, "lower", f"{where} <limit>", -inf)
            upper = inf if continuous else reader.number(limit, "upper", f"{where} <limit>", inf)
            if lower > upper:
                raise reader.fail(f"{where} <limit>", f"lower {lower} exceeds upper {upper}; swap them")
            if lower == upper:  # urdfdom's default for missing bounds (0, 0): no range given
                lower, upper = -inf, inf
            # urdfdom's default for a missing velocity or effort is 0 (ROS-Industrial files write effort="0"):
            # not a limit, none given.
            velocity, effort = (reader.number(limit, key, f"{where} <limit>", inf) for key in ("velocity", "effort"))
            dynamics = joint.find("dynamics")
            damping = reader.number(dynamics, "damping", f"{where} <dynamics>", 0.0)
            friction = reader.number(dynamics, "friction", f"{where} <dynamics>", 0.0)
            for key, value in (("damping", damping), ("friction", friction)):
                if value < 0:
                    problems.append(
                        f"{source}: {where} <dynamics>: {key} {value} is negative (friction that drives the joint); "
                        "read as given (a fitted, not physically consistent set?), but no physical joint has it"
                    )
            chain.append(
                dict(
                    name=name,
                    link=child,
                    type=kind,
                    axis=axis / norm,
                    rot=child_rot,
                    pos=child_pos,
                    damping=damping,
                    friction=friction,
                    limits=(lower, upper),
                    velocity=velocity if velocity > 0 else inf,
                    effort=effort if effort > 0 else inf,
                )
            )
            bodies.append(np.zeros(10))
            stack.append((child, len(bodies) - 1, np.eye(3), np.zeros(3)))
    unreached = sorted(set(links) - visited)
    if unreached:
        raise reader.fail(
            f"link {unreached[0]!r}", f"not connected to the root link {roots[0]!r}; connect it or remove it"
        )
    if not chain:
        raise reader.fail(
            "<robot>", "no revolute, continuous or prismatic joint that is not locked; a serial arm needs one"
        )
    # A joint moves nothing when its body and every body beyond it are empty (a massless tail).
    empty = [e["name"] for k, e in enumerate(chain) if not np.any(np.array(bodies[k:]))]
    if empty:
        problems.append(
            f"{source}: joints {tuple(empty)} move no mass or inertia (no <inertial> with mass on their links or "
            "beyond): the mass matrix is singular and forward dynamics gives nan; give those links <inertial> "
            f"or lock the joints with fixed_joints={tuple(empty)}"
        )
    for problem in problems:
        warnings.warn(problem, UrdfWarning, stacklevel=3)
    return UrdfChain.from_joints(root.get("name", ""), chain, bodies)


def _branch_advice(branches: list, locks: tuple[str, ...]) -> str:
    """The branching message: each branch's first joint and how many moving joints it leads to, and the
    ``fixed_joints`` of ``_chain_locks``."""
    described = ", ".join(f"{j.get('name')!r} ({len(names)} moving)" for j, names in branches)
    return (
        f"the chain branches into {described}; jaxid models a serial chain: lock the joints of all but one "
        f"branch, e.g. fixed_joints={locks}"
    )


def load_arm(
    path: str | os.PathLike,
    *,
    fixed_joints: Sequence[str] = (),
    armature: ArrayLike | None = None,
    offset: ArrayLike = 0.0,
    gravity: ArrayLike | None = None,
    coulomb_slope: float = DEFAULT_COULOMB_SLOPE,
) -> SerialArm:
    """The ``SerialArm`` of a URDF file, or of an MJCF file (root ``<mujoco>``, read through MuJoCo:
    ``jaxid.model.mjcf``): geometry, inertial parameters, damping as viscous and friction (URDF
    ``<dynamics friction>``, MJCF ``frictionloss``) as Coulomb friction, the limits.

    A file's negative damping or friction (warned by ``parse_urdf``) is kept: the arm holds it, although
    ``SerialArm``'s constructor refuses negative friction given in code (``with_parameters`` on such an
    arm refuses it too; ``inverse_dynamics`` and the rest use it as read).

    ``armature`` [kg m²] and ``offset`` [N m]: scalars or ``(n,)``; ``armature`` defaults to the file's
    (MJCF ``armature``; URDF has none: 0). ``gravity`` [m/s²] in the root frame defaults to the file's
    (MJCF ``<option gravity>``; URDF has none: ``(0, 0, −9.81)``). ``fixed_joints``: see ``parse_urdf``
    (MJCF: locked at their reference position ``qpos0``). Raises ``ValueError`` as ``parse_urdf`` (or
    ``parse_mjcf``) does. Host-side: call it outside ``jit``.
    """
    file_armature, file_gravity = 0.0, (0.0, 0.0, -GRAVITY)
    if _is_mjcf(path):
        from .mjcf import parse_mjcf

        chain, file_armature, file_gravity = parse_mjcf(path, fixed_joints=fixed_joints)
    else:
        chain = parse_urdf(path, fixed_joints=fixed_joints)
    arm = SerialArm(
        chain.joint_types,
        chain.axes,
        chain.parent_rotations,
        chain.parent_translations,
        chain.inertial,
        viscous=np.maximum(chain.damping, 0.0),
        coulomb=np.maximum(chain.friction, 0.0),
        armature=file_armature if armature is None else armature,
        offset=offset,
        gravity=file_gravity if gravity is None else gravity,
        coulomb_slope=coulomb_slope,
        joint_names=chain.joint_names,
        link_names=chain.link_names,
        position_limits=chain.position_limits,
        velocity_limits=chain.velocity_limits,
        effort_limits=chain.effort_limits,
    )
    if np.any(chain.damping < 0) or np.any(chain.friction < 0):  # the file's values, warned by the parser
        friction = (jnp.asarray(chain.damping, dtype=float), jnp.asarray(chain.friction, dtype=float))
        arm = eqx.tree_at(lambda a: (a.viscous, a.coulomb), arm, friction)
    return arm


def _is_mjcf(path: str | os.PathLike) -> bool:
    """Whether a file's root element is ``<mujoco>`` (read up to the first element only)."""
    try:
        for _, element in ET.iterparse(os.fspath(path), events=("start",)):
            return element.tag == "mujoco"
    except (ET.ParseError, OSError):
        return False  # parse_urdf reports it
    return False
