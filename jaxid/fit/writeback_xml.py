"""The text of an identified arm's files: a URDF (``urdf_text``: the source URDF with its inertial and
dynamics elements replaced, or one written from the ``SerialArm``) and an MJCF (``mjcf_text``: bodies
with joints and ``<inertial>``, no geoms), for standard parameters ``φ`` ``(14 n,)``; plus one link's
inertial (mass, centre of mass, inertia about it) and the rotations as URDF ``rpy`` and MJCF ``quat``.
Which ``φ`` and the headers: ``jaxid.fit.writeback_choice`` and ``jaxid.fit.writeback``.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET

import numpy as np

__all__ = ["urdf_text", "mjcf_text"]

_MOVING = ("revolute", "continuous", "prismatic")

# -- one link's inertial ------------------------------------------------------------------------


def _inertial(link: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Mass [kg], centre of mass ``(3,)`` [m] and the inertia tensor about it ``(3, 3)`` [kg m²] (link
    frame axes) of a link's 10 standard parameters about its frame origin (``jaxid.model.chain._standard``
    inverted)."""
    m = float(link[0])
    c = np.asarray(link[1:4], dtype=float) / m if m > 0 else np.zeros(3)
    xx, xy, xz, yy, yz, zz = (float(v) for v in link[4:10])
    about_origin = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    return m, c, _positive(about_origin - m * (c @ c * np.eye(3) - np.outer(c, c)))


#: A principal inertia about the centre of mass below this fraction of the largest is written at it.
INERTIA_FLOOR = 1e-12


def _positive(inertia: np.ndarray) -> np.ndarray:
    """``inertia`` with its principal moments raised to ``INERTIA_FLOOR`` × the largest where below.

    A link on the boundary of the physically consistent set (a chosen or consistent estimate with a
    zero principal inertia, e.g. a thin rod: 7e-15 of the largest on the UR5's upper arm) is valid,
    but MuJoCo refuses it ("inertia must have positive eigenvalues": its eigen solver's round-off
    makes it negative) and simulators divide by it. The change is ≤ 1e-12 of the largest moment;
    an inertia whose moments are all above the floor is returned as it is (same bits)."""
    values, vectors = np.linalg.eigh(inertia)
    floor = INERTIA_FLOOR * max(float(values[-1]), 0.0)
    if floor <= 0.0 or values[0] >= floor:
        return inertia
    lifted = (vectors * np.maximum(values, floor)) @ vectors.T
    return 0.5 * (lifted + lifted.T)


def _f(x: float) -> str:
    return repr(float(x))


def _fs(values) -> str:
    return " ".join(_f(v) for v in values)


def _inertial_element(link: np.ndarray, tail: str = "\n    ") -> ET.Element:
    m, c, tensor = _inertial(link)
    element = ET.Element("inertial")
    element.text = tail + "  "
    origin = ET.SubElement(element, "origin", {"xyz": _fs(c), "rpy": "0 0 0"})
    mass = ET.SubElement(element, "mass", {"value": _f(m)})
    keys = (("ixx", 0, 0), ("ixy", 0, 1), ("ixz", 0, 2), ("iyy", 1, 1), ("iyz", 1, 2), ("izz", 2, 2))
    inertia = ET.SubElement(element, "inertia", {k: _f(tensor[i, j]) for k, i, j in keys})
    origin.tail = mass.tail = tail + "  "
    inertia.tail = tail
    return element


# -- the files ----------------------------------------------------------------------------------


def _split(arm, phi: np.ndarray):
    n = arm.dof
    links = phi[: 10 * n].reshape(n, 10)
    armature, viscous, coulomb, offset = (phi[10 * n + j * n : 10 * n + (j + 1) * n] for j in range(4))
    return links, armature, viscous, coulomb, offset


def _rpy(rotation: np.ndarray) -> tuple[float, float, float]:
    """URDF ``rpy`` of a rotation ``Rz(yaw) Ry(pitch) Rx(roll)`` (``jaxid.model.urdf.rpy_matrix`` inverted)."""
    r = np.asarray(rotation, dtype=float)
    pitch = math.atan2(-r[2, 0], math.hypot(r[0, 0], r[1, 0]))
    if math.hypot(r[0, 0], r[1, 0]) < 1e-12:  # gimbal lock: roll and yaw share an axis
        return 0.0, pitch, math.atan2(-r[0, 1], r[1, 1])
    return math.atan2(r[2, 1], r[2, 2]), pitch, math.atan2(r[1, 0], r[0, 0])


def _quaternion(rotation: np.ndarray) -> np.ndarray:
    """Unit quaternion ``(w, x, y, z)`` of a rotation matrix (Shepperd's method)."""
    r = np.asarray(rotation, dtype=float)
    trace = np.trace(r)
    if trace > 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        q = [0.0] * 4
        q[0] = (r[k, j] - r[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (r[j, i] + r[i, j]) / s
        q[1 + k] = (r[k, i] + r[i, k]) / s
    q = np.asarray(q)
    return q / np.linalg.norm(q)


def _joint_values(arm, phi):
    _, armature, viscous, coulomb, _ = _split(arm, phi)
    return armature, viscous, coulomb


def urdf_text(arm, phi, header: str = "", *, source=None, fixed_joints=()) -> str:
    """A URDF of ``arm`` with the standard parameters ``phi`` ``(14 n,)``: ``source``'s text (a URDF
    path) with each moving link's ``<inertial>`` and each moving joint's ``<dynamics>`` replaced and
    the ``<inertial>`` of links fixed to a moving link removed; without ``source``, written from the
    ``SerialArm``. ``header`` (XML comments) goes first. ``fixed_joints``: as ``load_arm``'s."""
    links, _, viscous, coulomb, _ = _split(arm, np.asarray(phi, dtype=float))
    if source is None:
        return _urdf_from_arm(arm, links, viscous, coulomb, header)
    root = ET.parse(os.fspath(source), parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))).getroot()
    joints = {j.get("name"): j for j in root.findall("joint")}
    link_elements = {link.get("name"): link for link in root.findall("link")}
    owner: dict[str, str | None] = {}
    children = {}
    for joint in joints.values():
        children.setdefault(joint.find("parent").get("link"), []).append(joint)
    childs = {j.find("child").get("link") for j in joints.values()}
    stack = [(name, None) for name in link_elements if name not in childs]
    while stack:  # each link's moving link (None: the ground)
        name, body = stack.pop()
        owner[name] = body
        for joint in children.get(name, []):
            child = joint.find("child").get("link")
            moves = joint.get("type") in _MOVING and joint.get("name") not in fixed_joints
            stack.append((child, child if moves else body))
    index = {}
    for i, joint_name in enumerate(arm.joint_names):
        joint = joints.get(joint_name)
        if joint is None or joint.find("child").get("link") != arm.link_names[i]:
            raise ValueError(
                f"{source}: joint {joint_name!r} moving link {arm.link_names[i]!r} is not in the file; give the "
                "URDF the arm was read from."
            )
        index[arm.link_names[i]] = i
        dynamics = joint.find("dynamics")
        if dynamics is None:
            dynamics = ET.SubElement(joint, "dynamics")
            dynamics.tail = "\n  "
        dynamics.set("damping", _f(viscous[i]))
        dynamics.set("friction", _f(coulomb[i]))
    for name, link in link_elements.items():
        body = owner.get(name)
        old = link.find("inertial")
        if body is None:
            continue
        if name in index:
            new = _inertial_element(links[index[name]])
            if old is not None:
                new.tail = old.tail
                link[list(link).index(old)] = new
            else:
                new.tail = "\n  "
                link.insert(0, new)
        elif old is not None:
            link.remove(old)  # folded into its moving link, whose <inertial> holds it now
    return '<?xml version="1.0"?>\n' + header + ET.tostring(root, encoding="unicode") + "\n"


def _urdf_from_arm(arm, links, viscous, coulomb, header: str) -> str:
    names = set(arm.link_names)
    ground = "base" if "base" not in names else "jaxid_base"
    out = [f'<robot name="{_name(arm)}">', f'  <link name="{ground}"/>']
    parent = ground
    for i in range(arm.dof):
        kind = arm.joint_types[i]
        lower, upper = arm.position_limits[i]
        limited = math.isfinite(lower) and math.isfinite(upper)
        urdf_kind = kind if (limited or kind == "prismatic") else "continuous"
        velocity, effort = arm.velocity_limits[i], arm.effort_limits[i]
        limit = []
        if urdf_kind != "continuous":
            limit += [f'lower="{_f(lower if limited else 0.0)}"', f'upper="{_f(upper if limited else 0.0)}"']
        limit += [f'effort="{_f(effort if math.isfinite(effort) else 0.0)}"']
        limit += [f'velocity="{_f(velocity if math.isfinite(velocity) else 0.0)}"']
        out += [
            f'  <joint name="{arm.joint_names[i]}" type="{urdf_kind}">',
            f'    <parent link="{parent}"/>',
            f'    <child link="{arm.link_names[i]}"/>',
            f'    <origin xyz="{_fs(arm.parent_translations[i])}" rpy="{_fs(_rpy(np.asarray(arm.parent_rotations[i])))}"/>',
            f'    <axis xyz="{_fs(arm.axes[i])}"/>',
            f"    <limit {' '.join(limit)}/>",
            f'    <dynamics damping="{_f(viscous[i])}" friction="{_f(coulomb[i])}"/>',
            "  </joint>",
            f'  <link name="{arm.link_names[i]}">',
            "    " + ET.tostring(_inertial_element(links[i], "\n    "), encoding="unicode"),
            "  </link>",
        ]
        parent = arm.link_names[i]
    return '<?xml version="1.0"?>\n' + header + "\n".join([*out, "</robot>"]) + "\n"


def _name(arm) -> str:
    return "jaxid_identified"  # a SerialArm keeps no robot name


def mjcf_text(arm, phi, header: str = "") -> str:
    """An MJCF model of ``arm`` with the standard parameters ``phi`` ``(14 n,)``: nested bodies (pose
    from the parent transforms), hinge or slide joints with ``armature``, ``damping`` (viscous),
    ``frictionloss`` (Coulomb), ``range`` and ``actuatorfrcrange`` where finite, an ``<inertial>`` per
    body (``fullinertia`` about the centre of mass), ``<option gravity>``; no geoms."""
    links, armature, viscous, coulomb, _ = _split(arm, np.asarray(phi, dtype=float))
    out = [
        f'<mujoco model="{_name(arm)}">',
        '  <compiler angle="radian" autolimits="true"/>',
        f'  <option gravity="{_fs(np.asarray(arm.gravity))}"/>',
        "  <worldbody>",
    ]
    for i in range(arm.dof):
        pad = "    " + "  " * i
        m, c, t = _inertial(links[i])
        quat = _quaternion(np.asarray(arm.parent_rotations[i]))
        lower, upper = arm.position_limits[i]
        joint = [
            f'name="{arm.joint_names[i]}"',
            f'type="{"hinge" if arm.joint_types[i] == "revolute" else "slide"}"',
            f'axis="{_fs(arm.axes[i])}"',
            f'armature="{_f(armature[i])}"',
            f'damping="{_f(viscous[i])}"',
            f'frictionloss="{_f(coulomb[i])}"',
        ]
        if math.isfinite(lower) and math.isfinite(upper):
            joint.append(f'range="{_f(lower)} {_f(upper)}"')
        if math.isfinite(arm.effort_limits[i]):
            joint.append(f'actuatorfrcrange="{_f(-arm.effort_limits[i])} {_f(arm.effort_limits[i])}"')
        full = (t[0, 0], t[1, 1], t[2, 2], t[0, 1], t[0, 2], t[1, 2])
        out += [
            f'{pad}<body name="{arm.link_names[i]}" pos="{_fs(arm.parent_translations[i])}" quat="{_fs(quat)}">',
            f"{pad}  <joint {' '.join(joint)}/>",
            f'{pad}  <inertial pos="{_fs(c)}" mass="{_f(m)}" fullinertia="{_fs(full)}"/>',
        ]
    out += ["    " + "  " * i + "</body>" for i in reversed(range(arm.dof))]
    out += ["  </worldbody>", "</mujoco>"]
    return '<?xml version="1.0"?>\n' + header + "\n".join(out) + "\n"
