"""The ``[arm]`` table of a fit config, read and checked, and the reference arms (``fit.reference``,
``fit.compare``) checked against it.

The table describes either a two-link arm (``jaxid.model.description.arm_from_description``:
a preset, a parameter file or the geometry itself) or, with ``urdf = "robot.urdf"``, an ``n``-joint
serial arm read by ``jaxid.model.urdf.load_arm`` (``URDF_KEYS``: the file, relative to the config,
and ``load_arm``'s options ``fixed_joints``, ``armature``, ``offset``, ``gravity``, ``coulomb_slope``).
A reference must describe the same arm: the same known geometry, or the same kinematic structure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..types import did_you_mean
from .fit_checks import config_error

__all__ = ["URDF_KEYS"]

#: The table of the arm (``jaxid.model.description.arm_from_description``): checked there.
_ARM = "arm"

#: The keys of an ``[arm]`` table that reads a URDF (``jaxid.model.urdf.load_arm``): the file [relative
#: to the config], joints locked at 0 (names), armature [kg m²] and torque offset [N m] per joint (a
#: number or ``n`` numbers: a URDF holds neither), gravity ``[gx, gy, gz]`` [m/s²] in the base frame
#: (default ``[0, 0, -9.81]``), the Coulomb slope [s/rad] (default 100). Viscous and Coulomb friction
#: are the URDF's ``<dynamics damping friction>``.
URDF_KEYS = ("urdf", "mjcf", "fixed_joints", "armature", "offset", "gravity", "coulomb_slope")
#: The robot-description keys of ``[arm]``: a URDF, or an MJCF model (read through MuJoCo's compiler).
ROBOT_FILES = {"urdf": (".urdf",), "mjcf": (".xml", ".mjcf")}


def _arms(raw: dict[str, Any], reference: Any, base_dir: Path):
    """The arm of ``[arm]`` and the reference arm of ``fit.reference`` (same known geometry), checked."""
    from ..model import PRESETS, arm_from_description, load_parameters

    table = raw.get(_ARM)
    if table is None:
        raise config_error(
            'the [arm] table is missing: describe the arm (e.g. [arm] preset = "double_pendulum", or '
            'parameters = "my_arm.yml", or its lengths and constants; see experiments/fits/README.md).'
        )
    if not isinstance(table, dict):
        raise config_error("[arm] must be a table.")
    if any(k in table for k in ROBOT_FILES):
        return _urdf_arms(table, reference, base_dir)
    try:
        arm = arm_from_description(table, base_dir=base_dir, where="arm")
    except ValueError as err:
        raise config_error(str(err)) from None
    if reference in ("", None, False):
        return arm, None
    if not isinstance(reference, str):
        raise config_error(f"fit.reference must be a preset name or a parameter file path, got {reference!r}.")
    if reference.lower().endswith(".urdf"):
        raise config_error(
            f"fit.reference {reference!r} is a URDF but [arm] describes a two-link arm: a URDF reference needs "
            '[arm] urdf = "..." (the same kind of description); give a preset or a parameter file.'
        )
    try:
        if reference in PRESETS:
            ref = PRESETS[reference]()
        elif reference.lower().endswith((".yml", ".yaml", ".toml")):
            ref = load_parameters(base_dir / reference)
        else:
            raise config_error(
                f"fit.reference {reference!r} is neither a preset ({list(PRESETS)}) nor a parameter file "
                '(.yml, .yaml, .toml); give one, or "" for none.'
            )
    except ValueError as err:
        raise config_error(f"fit.reference: {err}") from None
    import numpy as np

    for name, a, b in (
        ("l1", arm.lengths[0], ref.lengths[0]),
        ("g", arm.gravity, ref.gravity),
        ("gear_ratio", arm.gear_ratio, ref.gear_ratio),
        ("coulomb_slope", arm.coulomb_slope, ref.coulomb_slope),
    ):
        if not np.isclose(float(a), float(b), rtol=1e-9, atol=0.0):
            raise config_error(
                f"fit.reference {reference!r} has {name} = {float(b):.6g} but [arm] has {float(a):.6g}: a reference "
                "must describe the same build (the same known geometry); fix one of them."
            )
    return arm, ref


def _urdf_options(table: dict[str, Any]) -> dict[str, Any]:
    """``load_arm``'s keyword arguments from an ``[arm]`` table with ``urdf`` (all but the file), checked."""
    unknown = [k for k in table if k not in URDF_KEYS]
    if unknown:
        raise config_error(
            f"unknown key 'arm.{unknown[0]}' next to a robot file (it describes the whole arm); allowed: "
            f"{list(URDF_KEYS)}.{did_you_mean(unknown[0], URDF_KEYS)}"
        )
    _robot_file(table)
    options: dict[str, Any] = {}
    fixed = table.get("fixed_joints", [])
    if not isinstance(fixed, list) or not all(isinstance(j, str) for j in fixed):
        raise config_error(f"arm.fixed_joints must be a list of joint names, got {fixed!r}.")
    options["fixed_joints"] = tuple(fixed)
    for key in ("armature", "offset"):
        if key in table:
            value = table[key]
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise config_error(f"arm.{key} must be a number or a list of numbers (one per joint), got {value!r}.")
            options[key] = value
    if "gravity" in table:
        g = table["gravity"]
        if not (isinstance(g, list) and len(g) == 3 and all(isinstance(v, int | float) for v in g)):
            raise config_error(f"arm.gravity must be [gx, gy, gz] [m/s²] in the base frame, got {g!r}.")
        options["gravity"] = tuple(float(v) for v in g)
    if "coulomb_slope" in table:
        slope = table["coulomb_slope"]
        if not (isinstance(slope, int | float) and not isinstance(slope, bool) and slope > 0):
            raise config_error(f"arm.coulomb_slope must be a positive number [s/rad], got {slope!r}.")
        options["coulomb_slope"] = float(slope)
    return options


def _robot_file(table: dict[str, Any]) -> tuple[str, str]:
    """``(key, path)`` of the ``[arm]`` table's robot description: ``urdf`` or ``mjcf``, exactly one."""
    given = [k for k in ROBOT_FILES if k in table]
    if len(given) != 1:
        raise config_error('[arm]: give one robot description, urdf = "....urdf" or mjcf = "....xml", not both.')
    key = given[0]
    path = table[key]
    if not isinstance(path, str) or not path.lower().endswith(ROBOT_FILES[key]):
        raise config_error(
            f"arm.{key} must be the path of a {' or '.join(ROBOT_FILES[key])} file (relative to the config), got {path!r}."
        )
    return key, path


def _load_urdf(path: Path, options: dict[str, Any], where: str):
    from ..model.urdf import load_arm

    if not path.is_file():
        raise config_error(
            f"{where}: the robot file {str(path)!r} does not exist; give its path relative to the config."
        )
    try:
        return load_arm(path, **options)
    except ValueError as err:
        raise config_error(f"{where}: {err}") from None


def _urdf_arms(table: dict[str, Any], reference: Any, base_dir: Path):
    """The ``SerialArm`` of ``[arm] urdf = ...`` and the reference: another URDF read with the same
    ``[arm]`` options (only the file differs), which must have the same kinematic structure."""
    options = _urdf_options(table)
    key, path = _robot_file(table)
    arm = _load_urdf(base_dir / path, options, f"arm.{key}")
    if reference in ("", None, False):
        return arm, None
    suffixes = sum(ROBOT_FILES.values(), ())
    if not (isinstance(reference, str) and reference.lower().endswith(suffixes)):
        raise config_error(
            f"fit.reference {reference!r}: with [arm] {key} the reference must be a robot file (.urdf or MJCF .xml, "
            'relative to this file, read with the same [arm] options), or "" for none.'
        )
    ref = _load_urdf(base_dir / reference, options, "fit.reference")
    import numpy as np

    same = arm.dof == ref.dof and arm.joint_types == ref.joint_types
    for name in ("axes", "parent_rotations"):
        same = same and np.allclose(np.asarray(getattr(arm, name)), np.asarray(getattr(ref, name)), rtol=0, atol=1e-9)
    # Where the first joint sits on the base does not change the dynamics of a fixed-base arm under uniform
    # gravity (published files place the same arm on different stands); the joints after it must agree.
    shift = np.abs(np.asarray(arm.parent_translations)[1:] - np.asarray(ref.parent_translations)[1:]) if same else None
    if not same or float(shift.max(initial=0.0)) > REFERENCE_ORIGIN_TOLERANCE:
        raise config_error(
            f"fit.reference {reference!r} does not have the kinematic structure of arm.{key} ({arm.dof} joints, "
            f"their types, axes and origins within {REFERENCE_ORIGIN_TOLERANCE * 1000:g} mm): a reference must "
            "describe the same arm; fix one of them."
        )
    if float(shift.max(initial=0.0)) > 1e-9:
        import warnings

        joint = int(np.argmax(shift.max(axis=1))) + 1
        warnings.warn(
            f"fit.reference {reference!r}: the origin of joint {joint + 1} differs from arm.{key}'s by "
            f"{float(shift.max()) * 1000:.3g} mm; its parameters are evaluated on the [arm]'s kinematics.",
            UserWarning,
            stacklevel=3,
        )
    return arm, ref


#: How far [m] a reference's joint origins may lie from the ``[arm]``'s (beyond the first joint's):
#: a published parameter set of the same arm may come with its own CAD's millimetres.
REFERENCE_ORIGIN_TOLERANCE = 0.005
