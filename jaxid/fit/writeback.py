"""The identified N-joint arm written back as files a simulator or a controller loads: URDF and MJCF.

For each estimator of a fit on a ``SerialArm`` (``[arm] urdf`` or ``mjcf``): ``identified/<estimator>.urdf``
(per moving link ``<inertial>``: mass, centre of mass, inertia tensor about it in a frame parallel to
the link's; per moving joint ``<dynamics damping friction>``: viscous and Coulomb friction) and
``identified/<estimator>.xml`` (MJCF: the same, plus ``armature``, ``damping``, ``frictionloss``).

**Which standard parameters.** Motion identifies the base parameters ``β = K φ`` only (``jaxid.base_parameters``);
a file needs all ``14 n`` standard parameters ``φ``. The rule (``choose_standard_parameters``): among the
physically consistent ``φ`` (each link's pseudo-inertia ``⪰ 0``; armature, viscous and Coulomb friction
``≥ 0``; Wensing et al. 2017) with ``K φ = β``, the one closest to the nominal ``φ₀`` (the ``[arm]``
description's: its URDF or MJCF values with the ``[arm]`` options) in ``Σ_k s_k² (φ_k − φ₀_k)²``, where
``s_k`` is the RMS over ``STATES`` random states of the standard regressor's column ``k`` (the torque of
a unit change of that parameter alone; a parameter that never enters the torque: 1 % of the median).
It is solved with ``jaxid.estimate.consistency.consistent_least_squares`` over the log-Cholesky parametrisation:
``‖Y φ − Y φ_β‖²`` on the random states (``φ_β``: any vector with ``K φ_β = β``) plus ``PRIOR_WEIGHT``
times the scaled squared distance to ``φ₀`` (a penalty, so the minimiser ``φ₁`` is the rule's up to
``O(PRIOR_WEIGHT)``); then polished by the same fit without that pull, regularised towards ``φ₁``
instead (``ρ = 1e-12``, from ``φ₁``: the nearest consistent vector whose torque misfit is at round-off,
where one exists), and the kept columns are set exactly, ``φ_kept = β − K_dep φ_dep``. Where that
vector is physically consistent (relative tolerance ``TOLERANCE``; joint parameters that far below
0 set to 0), ``β`` is realisable and the file reproduces the estimate's torque to round-off.
Otherwise no consistent arm has the estimate's base parameters (e.g. IDIM-LS with a negative
friction): the file holds its **consistent projection**, the polished minimiser (the consistent arm
whose torque on the random states is closest to the estimate's, up to the ``1e-12`` pull towards
``φ₁``); the file header and the returned note say so, with the torque difference.

**What a URDF cannot hold.** Armature and torque offsets (and jaxid's Coulomb slope, gravity and locked
joints): the header lists them, as the ``[arm]`` options to load the file with
(``jaxid.load_arm(path, armature=..., offset=...)`` or ``[arm] urdf = ...`` with ``armature``, ``offset``);
the MJCF holds the armature, not the offsets. The header repeats them as ``<!-- jaxid: key values -->``
lines: ``jaxid.load_arm(path, **written_options(path))`` is the arm written. Loaded with those
options, either file gives the estimate's torque (``tests/test_writeback.py``: 5e-16 relative on the
UR5, URDF and MJCF; MuJoCo's ``mj_inverse`` of the MJCF: 8e-16).

The URDF is the ``[arm]``'s own file with the inertial and dynamics elements replaced (meshes,
visuals and everything else kept; the ``<inertial>`` of links folded into a moving link, by fixed
joints or ``fixed_joints``, removed, since their mass is in that link's); without a source URDF (an
MJCF arm) it is written from the ``SerialArm`` (kinematics, limits, inertia; no geometry). The MJCF
is always written from the ``SerialArm``: bodies with joints and ``<inertial>``, no geoms.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "STATES",
    "PRIOR_WEIGHT",
    "TOLERANCE",
    "ChosenParameters",
    "choose_standard_parameters",
    "urdf_text",
    "mjcf_text",
    "export_arm_files",
    "written_options",
]

#: Random states ``(q, q', q'')`` on which torques are compared (q in ±π rad, q' in ±3 rad/s, q'' in
#: ±10 rad/s², ``jax.random.key(1)``): the base parameters' states, other draws.
STATES = 64
#: Weight of the scaled distance to the nominal standard parameters against the torque misfit.
PRIOR_WEIGHT = 1e-4
#: Relative tolerance of the consistency test of the exact vector (``is_physically_consistent``).
TOLERANCE = 1e-10

_MOVING = ("revolute", "continuous", "prismatic")


@dataclass(frozen=True)
class ChosenParameters:
    """The standard parameters written for one estimate.

    Attributes:
        standard: ``(14 n,)`` in ``SerialArm.standard_names`` order, physically consistent.
        realisable: whether a consistent arm has the estimate's base parameters (then ``standard``
            has them exactly); ``False``: ``standard`` is the consistent projection.
        mismatch: relative RMS difference on the random states between the torque of ``standard``
            and the estimate's (round-off when realisable).
        nominal_distance: ``‖s (φ − φ₀)‖ / ‖s φ₀‖``, how far the rule moved from the nominal arm.
    """

    standard: np.ndarray
    realisable: bool
    mismatch: float
    nominal_distance: float


def _states(arm, count: int):
    import jax

    kq, kv, ka = jax.random.split(jax.random.key(1), 3)
    shape = (count, arm.dof)
    return (
        jax.random.uniform(kq, shape, minval=-np.pi, maxval=np.pi),
        jax.random.uniform(kv, shape, minval=-3.0, maxval=3.0),
        jax.random.uniform(ka, shape, minval=-10.0, maxval=10.0),
    )


def choose_standard_parameters(arm, base, beta, *, nominal=None) -> ChosenParameters:
    """The physically consistent standard parameters written for the base parameters ``beta`` (the
    rule of the module docstring).

    Args:
        arm: the ``SerialArm`` (geometry, gravity, Coulomb slope; its standard parameters are the
            default nominal ``φ₀``).
        base: its ``BaseParameters`` (``jaxid.base_parameters(arm)``).
        beta: ``(r,)`` base parameter values.
        nominal: ``(14 n,)`` the nominal standard parameters (default ``arm``'s); need not be consistent.

    Host-side (one ``consistent_least_squares`` solve, compiled once per arm structure).
    """
    import jax.numpy as jnp

    from ..estimate.consistency import consistent_least_squares, is_physically_consistent
    from ..model import standard_parameters

    n = arm.dof
    k = np.asarray(base.matrix, dtype=float)
    s = k.shape[1]
    kept = list(base.independent)
    dep = [j for j in range(s) if j not in kept]
    beta = np.asarray(beta, dtype=float)
    phi0 = np.asarray(standard_parameters(arm) if nominal is None else nominal, dtype=float)
    target = phi0.copy()
    target[kept] = beta - k[:, dep] @ phi0[dep]
    w = np.asarray(arm.standard_regressor(*_states(arm, STATES))).reshape(-1, s)
    y = w @ target
    scale = np.sqrt(np.mean(w**2, axis=0))
    entering = scale > 1e-12 * scale.max()
    scale = np.where(entering, scale, 1e-2 * np.median(scale[entering]))
    root = math.sqrt(PRIOR_WEIGHT)
    rows = np.concatenate([w, root * np.diag(scale)])
    rhs = np.concatenate([y, root * scale * phi0])
    first = consistent_least_squares(
        jnp.asarray(rows), jnp.asarray(rhs), arm, prior=jnp.asarray(phi0), regularisation=1e-12, start_floor=1e-9
    )
    near = first.standard
    rows[len(w) :], rhs[len(w) :] = 0.0, 0.0  # the same shapes: the same compiled solver
    est = consistent_least_squares(
        jnp.asarray(rows), jnp.asarray(rhs), arm, prior=near, regularisation=1e-12, start=near, start_floor=1e-14
    )
    phi = np.asarray(est.standard, dtype=float)
    exact = phi.copy()
    exact[kept] = beta - k[:, dep] @ phi[dep]
    joints = exact[10 * n : 13 * n].reshape(3, n)  # Ia, fv, fc: round-off below 0 is 0
    floor = -TOLERANCE * np.abs(joints).max(axis=1, keepdims=True)
    exact[10 * n : 13 * n] = np.where((joints < 0) & (joints >= floor), 0.0, joints).reshape(-1)
    realisable = bool(is_physically_consistent(exact, tolerance=TOLERANCE))
    if realisable:
        phi = exact
    norm = max(float(np.linalg.norm(y)), 1e-300)
    mismatch = float(np.linalg.norm(w @ phi - y)) / norm
    distance = float(np.linalg.norm(scale * (phi - phi0)) / max(np.linalg.norm(scale * phi0), 1e-300))
    return ChosenParameters(phi, realisable, mismatch, distance)


# -- one link's inertial ------------------------------------------------------------------------


def _inertial(link: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Mass [kg], centre of mass ``(3,)`` [m] and the inertia tensor about it ``(3, 3)`` [kg m²] (link
    frame axes) of a link's 10 standard parameters about its frame origin (``jaxid.model.chain._standard``
    inverted)."""
    m = float(link[0])
    c = np.asarray(link[1:4], dtype=float) / m if m > 0 else np.zeros(3)
    xx, xy, xz, yy, yz, zz = (float(v) for v in link[4:10])
    about_origin = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    return m, c, about_origin - m * (c @ c * np.eye(3) - np.outer(c, c))


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


def _comment(lines: list[str]) -> str:
    """An XML comment of ``lines`` (``--`` cannot appear in one)."""
    body = "\n".join(f"  {line}".rstrip().replace("--", "- -") for line in lines)
    return f"<!--\n{body}\n-->\n"


def _split(arm, phi: np.ndarray):
    n = arm.dof
    links = phi[: 10 * n].reshape(n, 10)
    armature, viscous, coulomb, offset = (phi[10 * n + j * n : 10 * n + (j + 1) * n] for j in range(4))
    return links, armature, viscous, coulomb, offset


def _machine_lines(arm, phi, fixed_joints) -> list[str]:
    _, armature, _, _, offset = _split(arm, phi)
    lines = [
        f"jaxid: armature {_fs(armature)}",
        f"jaxid: offset {_fs(offset)}",
        f"jaxid: coulomb_slope {_f(arm.coulomb_slope)}",
        f"jaxid: gravity {_fs(np.asarray(arm.gravity))}",
    ]
    if fixed_joints:
        lines.append("jaxid: fixed_joints " + " ".join(fixed_joints))
    return lines


def _header(arm, phi, chosen: ChosenParameters, title: str, kind: str, fixed_joints) -> str:
    _, armature, _, _, offset = _split(arm, phi)
    lines = [
        title,
        "Motion identifies the base parameters only. These standard parameters are the physically consistent set",
        "(pseudo-inertias positive semidefinite, armature and friction >= 0) closest to the [arm]'s nominal ones,",
        "each deviation weighted by the RMS torque of its regressor column, among those with the estimate's base",
        "parameters (jaxid.fit.writeback): any such set gives the same torques.",
    ]
    if not np.isfinite(chosen.nominal_distance):
        lines[1:] = [
            "Motion identifies the base parameters only. These are the physically consistent standard parameters the",
            "estimator itself fitted (pseudo-inertias positive semidefinite): any set with the same base parameters",
            "gives the same torques.",
        ]
    if not chosen.realisable:
        lines += [
            "NOT THE ESTIMATE ITSELF: no physically consistent arm has its base parameters. This is its consistent",
            f"projection (the consistent arm whose torque is closest to it): the torques differ by {chosen.mismatch:.3g}",
            "relative RMS on random states.",
        ]
    held = "armature and the offsets" if kind == "urdf" else "the offsets"
    lines += [
        f"A {kind.upper()} has no place for {held}: load with jaxid.load_arm(path, armature=..., offset=...) or an",
        "[arm] table with these options (the fit's torque model is then reproduced exactly):",
        f"  armature = [{', '.join(_f(v) for v in armature)}]   # kg m^2"
        + ("  (also in the MJCF <joint armature>)" if kind == "urdf" else "  (in <joint armature>)"),
        f"  offset = [{', '.join(_f(v) for v in offset)}]   # N m",
        f"  coulomb_slope = {_f(arm.coulomb_slope)}   # s/rad: Coulomb friction fc (2/pi) atan(slope q')",
        f"  gravity = [{', '.join(_f(v) for v in np.asarray(arm.gravity))}]   # m/s^2, base frame",
    ]
    if fixed_joints:
        lines.append(f"  fixed_joints = [{', '.join(repr(j) for j in fixed_joints)}]   # locked at 0")
    if kind == "urdf":
        lines.append("<dynamics damping> is viscous friction [N m s/rad], friction the Coulomb level fc [N m].")
    else:
        lines.append("damping is viscous friction, frictionloss the Coulomb level fc (jaxid: the smooth sign above).")
    machine = "".join(f"<!-- {line} -->\n" for line in _machine_lines(arm, phi, fixed_joints))
    return _comment(lines) + machine


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


def written_options(path) -> dict:
    """The ``load_arm`` options a written file's ``<!-- jaxid: ... -->`` lines give (``armature`` (URDF
    only: an MJCF holds it), ``offset``, ``coulomb_slope``, ``gravity``, ``fixed_joints``), so that
    ``jaxid.load_arm(path, **written_options(path))`` is the arm the file was written from."""
    options: dict = {}
    mjcf = False
    for line in Path(path).read_text().splitlines():
        mjcf = mjcf or line.lstrip().startswith("<mujoco")
        text = line.strip().removeprefix("<!--").removesuffix("-->").strip()
        if not text.startswith("jaxid: "):
            continue
        key, _, value = text.removeprefix("jaxid: ").partition(" ")
        if key == "fixed_joints":
            options[key] = tuple(value.split())
        elif key == "coulomb_slope":
            options[key] = float(value)
        elif key in ("armature", "offset", "gravity"):
            options[key] = np.array([float(v) for v in value.split()])
    if mjcf:
        options.pop("armature", None)
    return options


def export_arm_files(
    folder, fit_name: str, estimates: dict, model, *, source=None, fixed_joints=()
) -> tuple[list[Path], dict[str, str], dict[str, str]]:
    """Write ``<estimator>.urdf`` and ``<estimator>.xml`` into ``folder`` for each estimate (an
    ``Identification`` whose ``value`` is the full base vector of ``model``, a ``FitModel`` of a
    ``SerialArm``, or anything with ``arm`` and ``base``). ``source``: the URDF the arm was read from
    (its text is kept), ``None`` to write one from the arm; ``fixed_joints``: the ``[arm]``'s.

    Returns ``(paths, projected, skipped)``: ``projected[estimator]`` says that its files hold the
    consistent projection, not the estimate (module docstring); ``skipped[estimator]`` why nothing was
    written for it (base parameters not finite, a source URDF that is not the arm's, a failed solve).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arm, base = model.arm, model.base
    fixed_joints = tuple(fixed_joints)
    paths, projected, skipped = [], {}, {}
    for name, est in estimates.items():
        value = np.asarray(est.value, dtype=float)
        if not np.all(np.isfinite(value)):
            skipped[name] = "its base parameters are not finite"
            continue
        title = f"Identified by `jaxid fit` ({fit_name}, estimator {name})."
        try:
            own = getattr(est, "standard", None)
            if own is not None and len(own) == len(arm.standard_names):
                # The estimator fitted consistent standard parameters itself: they are written as they are.
                phi = np.asarray(own, dtype=float)
                scale = max(float(np.linalg.norm(value)), 1e-300)
                chosen = ChosenParameters(
                    phi, True, float(np.linalg.norm(np.asarray(base.values(phi)) - value)) / scale, float("nan")
                )
            else:
                chosen = choose_standard_parameters(arm, base, value)
            phi = chosen.standard
            urdf_header = _header(arm, phi, chosen, title, "urdf", fixed_joints if source is not None else ())
            texts = {
                "urdf": urdf_text(arm, phi, urdf_header, source=source, fixed_joints=fixed_joints),
                "xml": mjcf_text(arm, phi, _header(arm, phi, chosen, title, "mjcf", ())),
            }
        except (ValueError, FloatingPointError, np.linalg.LinAlgError, ET.ParseError, OSError) as err:
            skipped[name] = f"no URDF or MJCF written: {err}"
            continue
        for suffix, text in texts.items():
            path = folder / f"{name}.{suffix}"
            path.write_text(text)
            paths.append(path)
        if not chosen.realisable:
            projected[name] = (
                f"identified/{name}.urdf and .xml hold its consistent projection, not the estimate: no physically "
                f"consistent arm has its base parameters (torques differ by {chosen.mismatch:.3g} relative RMS on "
                "random states)."
            )
    return paths, projected, skipped
