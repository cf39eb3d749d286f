"""The identified N-joint arm written back as files a simulator or a controller loads: URDF and MJCF.

For each estimator of a fit on a ``SerialArm`` (``[arm] urdf`` or ``mjcf``): ``identified/<estimator>.urdf``
(per moving link ``<inertial>``: mass, centre of mass, inertia tensor about it in a frame parallel to
the link's; per moving joint ``<dynamics damping friction>``: viscous and Coulomb friction) and
``identified/<estimator>.xml`` (MJCF: the same, plus ``armature``, ``damping``, ``frictionloss``).

**Which standard parameters.** Motion identifies the base parameters ``β = K φ`` only; a file needs
all ``14 n`` standard parameters ``φ``. Among the physically consistent ``φ`` with those base
parameters, the one closest to the nominal ``[arm]``'s is written (``jaxid.fit.writeback_choice``,
``choose_standard_parameters``, the rule in its docstring); where no consistent arm has them, the
file holds the estimate's **consistent projection**, and its header and the returned note say so.

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

Here: the files' headers (the note, the ``[arm]`` options, the ``<!-- jaxid: ... -->`` lines),
``written_options`` (those lines read back) and ``export_arm_files``; the URDF and MJCF text is
``jaxid.fit.writeback_xml``'s.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .writeback_choice import ChosenParameters, choose_standard_parameters
from .writeback_xml import _f, _fs, _split, mjcf_text, urdf_text

__all__ = ["export_arm_files", "written_options"]


def _comment(lines: list[str]) -> str:
    """An XML comment of ``lines`` (``--`` cannot appear in one)."""
    body = "\n".join(f"  {line}".rstrip().replace("--", "- -") for line in lines)
    return f"<!--\n{body}\n-->\n"


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
