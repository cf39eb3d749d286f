"""Reading a URDF file's XML, for ``jaxid.model.urdf.parse_urdf`` (which walks the chain).

- ``_read_xml``: the ``<robot>`` element (standard library ``xml.etree.ElementTree``, a default XML
  namespace removed); refuses unreadable XML, an MJCF or other root, and unexpanded xacro (macros,
  includes, conditionals, ``${…}`` / ``$(…)`` expressions where jaxid reads).
- ``_Reader``: attributes as finite numbers and an element's ``<origin xyz rpy>`` as a rotation and
  a translation (``rpy_matrix``: ``R = Rz(yaw) Ry(pitch) Rx(roll)``), every problem a one-line
  ``ValueError`` naming the file and the element.
- ``_link_inertial``: a link's ``<inertial>`` (mass [kg], centre of mass [m], inertia about it
  [kg m²] in the link frame) and the problems of a mass or tensor no rigid body has (lines to warn,
  not refuse).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np

__all__ = ["rpy_matrix"]

#: xacro elements that xacro's output may keep without harm (they change nothing jaxid reads).
_XACRO_LEFTOVERS = ("property", "arg")


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


def _link_inertial(reader: _Reader, link) -> tuple[float, np.ndarray, np.ndarray, list[str]] | None:
    """A link's ``<inertial>``: mass [kg], centre of mass ``(3,)`` [m] and inertia about it ``(3, 3)``
    [kg m²], both in the link frame, and the problems of a tensor that no rigid body has (one line
    each; warned, not refused). ``None`` without ``<inertial>`` (a massless link)."""
    name = link.get("name")
    inertial = link.find("inertial")
    where = f"link {name!r} <inertial>"
    if inertial is None:
        return None
    mass_element = inertial.find("mass")
    if mass_element is None:
        raise reader.fail(where, "<mass value=...> is missing; add it [kg]")
    mass = reader.number(mass_element, "value", f"{where} <mass>")
    problems = []
    if mass < 0:
        problems.append(
            f"{reader.source}: {where} <mass>: mass {mass} kg is negative; read as given (a fitted, not physically "
            "consistent set?), but no rigid body has it"
        )
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
        problems.append(
            f"{reader.source}: {where} <inertia>: the tensor is not positive semidefinite (principal moments "
            f"{moments.tolist()}); read as given, but no rigid body has it: give the tensor about the centre of mass"
        )
    elif moments[0] + moments[1] < moments[2] - tol:
        problems.append(
            f"{reader.source}: {where} <inertia>: the principal moments {moments.tolist()} violate the triangle "
            "inequality (each at most the sum of the other two); read as given, but no rigid body has them"
        )
    return mass, com, rot @ tensor @ rot.T, problems


def _read_xml(reader: _Reader):
    """The ``<robot>`` element, a default XML namespace removed; refuses unreadable XML and unexpanded
    xacro (macros, includes, conditionals, ``${…}`` / ``$(…)`` expressions are xacro's to expand)."""
    try:
        root = ET.parse(reader.source).getroot()
    except ET.ParseError as error:
        hint = " (an undeclared xacro: prefix? expand the file with xacro first)" if "prefix" in str(error) else ""
        raise reader.fail("XML", f"unreadable XML ({error}){hint}; fix the file's syntax") from None
    except OSError as error:
        raise reader.fail("file", f"cannot be read ({error.strerror}); give the path of a URDF file") from None
    if root.tag.startswith("{") and root.tag.endswith("}robot"):
        namespace = root.tag[: -len("robot")]
        for element in root.iter():
            if isinstance(element.tag, str) and element.tag.startswith(namespace):
                element.tag = element.tag[len(namespace) :]
    if root.tag == "mujoco":
        raise reader.fail("<mujoco>", "an MJCF file, not a URDF; read it with load_arm (through MuJoCo)")
    if root.tag != "robot":
        raise reader.fail(f"<{root.tag}>", "the root element must be <robot>; give a URDF file")
    for element in root.iter():
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag.startswith("{") and "xacro" in tag and tag.rsplit("}", 1)[1] not in _XACRO_LEFTOVERS:
            raise reader.fail(
                f"<xacro:{tag.rsplit('}', 1)[1]}>",
                "the file is an unexpanded xacro; expand it first (xacro robot.urdf.xacro > robot.urdf)",
            )
    # xacro expressions where jaxid reads (a mesh path or a gazebo parameter is never read)
    read = []
    for link in root.findall("link"):
        read.append(link)
        for inertial in link.findall("inertial"):
            read += [inertial, *inertial]
    for joint in root.findall("joint"):
        read += [joint, *joint]
    for element in read:
        for attribute, value in element.attrib.items():
            if "${" in value or "$(" in value:
                raise reader.fail(
                    f"<{element.tag} {attribute}={value!r}>",
                    "an unexpanded xacro expression; expand the file first (xacro robot.urdf.xacro > robot.urdf)",
                )
    return root
