"""Serial arms from URDF files: ``load_arm(path) -> SerialArm``.

Parsed with the standard library (``xml.etree.ElementTree``); ``<visual>``, ``<collision>``,
``<transmission>``, ``<gazebo>`` and other elements are ignored (meshes are never read). What is read:

- the kinematic chain from the root link (the one link that is no joint's child), through
  ``revolute``, ``continuous`` (a revolute joint without position limits), ``prismatic`` and
  ``fixed`` joints: ``<origin xyz rpy>`` (the child frame in the parent frame; ``rpy`` fixed-axis
  roll, pitch, yaw: ``R = Rz(yaw) Ry(pitch) Rx(roll)``), ``<axis xyz>`` (default ``1 0 0``, normalised),
  ``<limit lower upper velocity effort>``, ``<dynamics damping friction>`` (viscous ``fv`` and
  Coulomb ``fc`` friction);
- each link's ``<inertial>``: ``<mass>``, ``<origin xyz rpy>`` (centre of mass and inertial frame),
  ``<inertia ixx ixy ixz iyy iyz izz>`` (tensor entries about the centre of mass, inertial frame).

Fixed joints (and joints named in ``fixed_joints``, locked at position 0) fold their child into
the parent body: transforms compose, and the child's mass, first moment and inertia are added
about the body's frame origin (parallel-axis theorem), so branches that carry no moving joint (a
hand, a camera, a tool frame) merge into the last moving link. The root link and whatever is fixed
to it are the ground; their inertia is dropped. Two branches that carry moving joints make a tree,
not a chain: a ``ValueError`` names the branching link (lock one branch with ``fixed_joints``).

Every problem is a one-line ``ValueError`` that names the file, the element and what to change.
"""

from __future__ import annotations

import dataclasses
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike

from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY
from .serial import SerialArm

__all__ = ["UrdfChain", "parse_urdf", "load_arm", "rpy_matrix"]

_MOVING = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic"}
_UNSUPPORTED = ("floating", "planar")


@dataclasses.dataclass(frozen=True)
class UrdfChain:
    """The serial chain read from a URDF, in joint order (``n`` moving joints; numpy arrays).

    Attributes:
        name: the robot's name.
        joint_names, link_names: the moving joints and the link each one moves.
        joint_types: ``"revolute"`` (revolute or continuous) or ``"prismatic"``.
        axes: ``(n, 3)`` unit joint axes in the link frame.
        parent_rotations: ``(n, 3, 3)``, parent_translations: ``(n, 3)`` [m]: link ``i``'s frame at
            ``q_i = 0`` in the frame of the previous moving link (or of the root), fixed joints composed.
        inertial: ``(n, 10)`` standard parameters of each moving body (the link plus what is fixed to
            it) about its frame origin: ``[m, m cx, m cy, m cz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]``.
        damping, friction: ``(n,)`` viscous [N m s/rad] and Coulomb [N m] friction.
        position_limits: ``(n, 2)``; velocity_limits, effort_limits: ``(n,)`` (``inf`` when absent).
    """

    name: str
    joint_names: tuple[str, ...]
    link_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    axes: np.ndarray
    parent_rotations: np.ndarray
    parent_translations: np.ndarray
    inertial: np.ndarray
    damping: np.ndarray
    friction: np.ndarray
    position_limits: np.ndarray
    velocity_limits: np.ndarray
    effort_limits: np.ndarray


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's rotation ``Rz(yaw) Ry(pitch) Rx(roll)`` (fixed axes x, y, z), shape ``(3, 3)``."""
    cr, sr, cp, sp, cy, sy = (
        math.cos(roll),
        math.sin(roll),
        math.cos(pitch),
        math.sin(pitch),
        math.cos(yaw),
        math.sin(yaw),
    )
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


class _Reader:
    """Attribute reading with one-line errors naming the file and the element."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, problem: str) -> ValueError:
        return ValueError(f"{self.source}: {where}: {problem}.")

    def numbers(self, element, attribute: str, count: int, where: str, default=None) -> np.ndarray:
        text = element.get(attribute) if element is not None else None
        if text is None:
            if default is None:
                raise self.fail(where, f"attribute {attribute!r} is missing; give {count} number(s)")
            return np.asarray(default, dtype=float)
        try:
            values = np.array([float(t) for t in text.split()])
        except ValueError:
            raise self.fail(
                where, f'{attribute}={text!r} is not {count} number(s); write e.g. {attribute}="0 0 0"'
            ) from None
        if values.shape != (count,) or not np.all(np.isfinite(values)):
            raise self.fail(where, f"{attribute}={text!r} must be {count} finite number(s)")
        return values

    def number(self, element, attribute: str, where: str, default: float | None = None) -> float:
        return float(self.numbers(element, attribute, 1, where, None if default is None else [default])[0])

    def origin(self, element, where: str) -> tuple[np.ndarray, np.ndarray]:
        """``(R, p)`` of an element's ``<origin>`` (identity when absent)."""
        origin = element.find("origin")
        xyz = self.numbers(origin, "xyz", 3, f"{where} <origin>", default=[0, 0, 0])
        rpy = self.numbers(origin, "rpy", 3, f"{where} <origin>", default=[0, 0, 0])
        return rpy_matrix(*rpy), xyz


def _link_inertial(reader: _Reader, link, moving: bool) -> tuple[float, np.ndarray, np.ndarray] | None:
    """A link's ``<inertial>``: mass [kg], centre of mass ``(3,)`` [m] and inertia about it ``(3, 3)``
    [kg m²], both in the link frame (``None`` without ``<inertial>`` on a link no joint moves)."""
    name = link.get("name")
    inertial = link.find("inertial")
    where = f"link {name!r} <inertial>"
    if inertial is None:
        if moving:
            raise reader.fail(
                f"link {name!r}",
                "a link moved by a joint has no <inertial>; add <inertial> with <mass>, <origin> and <inertia>",
            )
        return None
    mass_element = inertial.find("mass")
    if mass_element is None:
        raise reader.fail(where, "<mass value=...> is missing; add it [kg]")
    mass = reader.number(mass_element, "value", f"{where} <mass>")
    if mass < 0 or (moving and mass <= 0):
        raise reader.fail(f"{where} <mass>", f"mass {mass} must be positive; give the link's mass in kg")
    rot, com = reader.origin(inertial, where)
    tensor_element = inertial.find("inertia")
    if tensor_element is None:
        raise reader.fail(where, "<inertia ixx ixy ixz iyy iyz izz> is missing; add it [kg m²]")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    xx, xy, xz, yy, yz, zz = (reader.number(tensor_element, k, f"{where} <inertia>") for k in keys)
    tensor = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    moments = np.linalg.eigvalsh(tensor)
    tol = 1e-9 * max(np.abs(moments).max(), 1e-300)
    if moments[0] < -tol:
        raise reader.fail(
            f"{where} <inertia>",
            f"the inertia tensor is not positive semidefinite (principal moments {moments.tolist()}); "
            "give the tensor about the centre of mass",
        )
    if moments[0] + moments[1] < moments[2] - tol:
        raise reader.fail(
            f"{where} <inertia>",
            f"the principal moments {moments.tolist()} violate the triangle inequality (each at most the sum of "
            "the other two); give a physically realisable tensor",
        )
    return mass, com, rot @ tensor @ rot.T


def _standard(mass: float, com: np.ndarray, tensor_com: np.ndarray) -> np.ndarray:
    """``[m, m c, Ī]`` about the frame origin from mass, centre of mass and inertia about the centre of
    mass (parallel-axis theorem: ``Ī = I_c + m (|c|² 1 − c cᵀ)``)."""
    i = tensor_com + mass * (com @ com * np.eye(3) - np.outer(com, com))
    return np.array([mass, *(mass * com), i[0, 0], i[0, 1], i[0, 2], i[1, 1], i[1, 2], i[2, 2]])


def parse_urdf(path: str | os.PathLike, *, fixed_joints: Sequence[str] = ()) -> UrdfChain:
    """Read the serial chain of a URDF file (see the module docstring for what is read).

    Args:
        path: the ``.urdf`` file.
        fixed_joints: names of joints to treat as fixed, locked at position 0 (e.g. a gripper's
            fingers, so that a hand with two finger joints folds into the last link).

    Raises ``ValueError`` (one line: file, element, what to change) for unreadable XML, a root that is
    not ``<robot>``, a joint type other than revolute/continuous/prismatic/fixed (``floating``,
    ``planar``), a joint naming an unknown link, a link that is the child of two joints, no single
    root or a link not connected to it, a branch with moving joints on two sides, a ``<mimic>`` joint
    in the chain, a moving link without ``<inertial>``, a non-positive mass, an inertia tensor that is
    not positive semidefinite or violates the triangle inequality, a zero axis, negative damping or
    friction, a non-numeric attribute, an unknown name in ``fixed_joints``, or no moving joint at all.
    """
    source = os.fspath(path)
    reader = _Reader(source)
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as error:
        raise reader.fail("XML", f"unreadable XML ({error}); fix the file's syntax") from None
    if root.tag != "robot":
        raise reader.fail(f"<{root.tag}>", "the root element must be <robot>; give a URDF file")
    links = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name:
            raise reader.fail("<link>", "a link has no name; add name=...")
        if name in links:
            raise reader.fail(f"link {name!r}", "the name is used twice; rename one")
        links[name] = link
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
        if kind in _UNSUPPORTED:
            raise reader.fail(
                where,
                f"joint type {kind!r} is not supported (a serial arm fixed to the ground); "
                "use revolute, continuous, prismatic or fixed",
            )
        if kind not in (*_MOVING, "fixed"):
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
                where, f"link {child!r} is already the child of joint {parent_of[child]!r}; a link has one parent"
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

    carries: dict[str, bool] = {}

    def carries_motion(link_name: str) -> bool:
        if link_name not in carries:
            carries[link_name] = False  # guards against cycles
            carries[link_name] = any(
                moves(j) or carries_motion(j.find("child").get("link")) for j in children[link_name]
            )
        return carries[link_name]

    # Walk the tree: ``body`` is the index of the moving body the current link is fixed to (-1: ground),
    # ``(rot, pos)`` the link's frame in that body's frame.
    bodies: list[np.ndarray] = []
    chain = []
    stack = [(roots[0], -1, np.eye(3), np.zeros(3), False)]
    visited = set()
    while stack:
        link_name, body, rot, pos, moved = stack.pop()
        if link_name in visited:
            raise reader.fail(f"link {link_name!r}", "the joints form a cycle; a URDF is a tree")
        visited.add(link_name)
        found = _link_inertial(reader, links[link_name], moving=moved)
        if found is not None and body >= 0:
            mass, com, tensor_com = found
            bodies[body] = bodies[body] + _standard(mass, rot @ com + pos, rot @ tensor_com @ rot.T)
        branches = [j for j in children[link_name] if moves(j) or carries_motion(j.find("child").get("link"))]
        if len(branches) > 1:
            names = ", ".join(repr(j.get("name")) for j in branches)
            raise reader.fail(
                f"link {link_name!r}",
                f"the chain branches into joints {names} that lead to moving joints; jaxid models a serial chain: "
                "lock all but one branch with fixed_joints=(...)",
            )
        for joint in children[link_name]:
            name = joint.get("name")
            where = f"joint {name!r}"
            child = joint.find("child").get("link")
            joint_rot, joint_pos = reader.origin(joint, where)
            child_rot, child_pos = rot @ joint_rot, rot @ joint_pos + pos
            if not moves(joint):
                stack.append((child, body, child_rot, child_pos, False))
                continue
            if joint.find("mimic") is not None:
                raise reader.fail(where, "a <mimic> joint in the chain is not supported; lock it with fixed_joints")
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
            dynamics = joint.find("dynamics")
            damping = reader.number(dynamics, "damping", f"{where} <dynamics>", 0.0)
            friction = reader.number(dynamics, "friction", f"{where} <dynamics>", 0.0)
            if damping < 0 or friction < 0:
                raise reader.fail(f"{where} <dynamics>", "damping and friction must be non-negative")
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
                    velocity=reader.number(limit, "velocity", f"{where} <limit>", inf),
                    effort=reader.number(limit, "effort", f"{where} <limit>", inf),
                )
            )
            bodies.append(np.zeros(10))
            stack.append((child, len(bodies) - 1, np.eye(3), np.zeros(3), True))
    unreached = sorted(set(links) - visited)
    if unreached:
        raise reader.fail(
            f"link {unreached[0]!r}", f"not connected to the root link {roots[0]!r}; connect it or remove it"
        )
    if not chain:
        raise reader.fail("<robot>", "no revolute, continuous or prismatic joint; a serial arm needs one")
    for entry, params in zip(chain, bodies, strict=True):
        if not params[0] > 0:
            raise reader.fail(f"link {entry['link']!r} <inertial> <mass>", "the moving body's mass must be positive")
    return UrdfChain(
        name=root.get("name", ""),
        joint_names=tuple(e["name"] for e in chain),
        link_names=tuple(e["link"] for e in chain),
        joint_types=tuple(e["type"] for e in chain),
        axes=np.array([e["axis"] for e in chain]),
        parent_rotations=np.array([e["rot"] for e in chain]),
        parent_translations=np.array([e["pos"] for e in chain]),
        inertial=np.array(bodies),
        damping=np.array([e["damping"] for e in chain]),
        friction=np.array([e["friction"] for e in chain]),
        position_limits=np.array([e["limits"] for e in chain]),
        velocity_limits=np.array([e["velocity"] for e in chain]),
        effort_limits=np.array([e["effort"] for e in chain]),
    )


def load_arm(
    path: str | os.PathLike,
    *,
    fixed_joints: Sequence[str] = (),
    armature: ArrayLike = 0.0,
    offset: ArrayLike = 0.0,
    gravity: ArrayLike = (0.0, 0.0, -GRAVITY),
    coulomb_slope: float = DEFAULT_COULOMB_SLOPE,
) -> SerialArm:
    """The ``SerialArm`` of a URDF file: geometry, inertial parameters, ``<dynamics damping>`` as viscous
    and ``friction`` as Coulomb friction, the limits; ``armature`` [kg m²] and ``offset`` [N m] (not in
    URDF) scalars or ``(n,)``. ``fixed_joints``: see ``parse_urdf``. Raises ``ValueError`` as
    ``parse_urdf`` does. Host-side: call it outside ``jit``.
    """
    chain = parse_urdf(path, fixed_joints=fixed_joints)
    return SerialArm(
        chain.joint_types,
        chain.axes,
        chain.parent_rotations,
        chain.parent_translations,
        chain.inertial,
        viscous=chain.damping,
        coulomb=chain.friction,
        armature=armature,
        offset=offset,
        gravity=gravity,
        coulomb_slope=coulomb_slope,
        joint_names=chain.joint_names,
        link_names=chain.link_names,
        position_limits=chain.position_limits,
        velocity_limits=chain.velocity_limits,
        effort_limits=chain.effort_limits,
    )
