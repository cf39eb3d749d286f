"""The user's two-link arm described in words: parameter files and the ``[arm]`` table of a config.

One loader for every description of a ``TwoLinkArm``:

- ``load_parameters(path)``: a parameter file, the lab's YAML (``.yml``/``.yaml``) or jaxid's TOML
  (``.toml``, one ``[arm]`` table);
- ``arm_from_description(table)``: the ``[arm]`` table of a config (the same keys as a TOML
  parameter file, so a parameter file and a config's ``[arm]`` table are the same thing);
- ``save_parameters(path, arm)``: the inverse, in either format, at full float precision;
- ``arm_preset(name)`` / ``PRESETS`` (``jaxid.model.arm_table``): the named arms (``point_mass``,
  ``table1``, ``double_pendulum``).

The keys of the ``[arm]`` table, its conventions (angles from the downward vertical, SI units,
``J_i`` about the centre of mass) and the checks of its values are ``jaxid.model.arm_table``'s; this
module starts a table from its ``preset`` or ``parameters`` file and reads and writes the files.

Reading a description is pure Python (no arrays) except where a preset is named, which builds the
preset arm (float64 needed, as for every ``TwoLinkArm``).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..types import did_you_mean
from .arm import TwoLinkArm
from .arm_table import PRESETS, _build, _check_keys, _explicit, _name, _number, _unit, arm_preset, describe_arm

__all__ = [
    "LAB_KEYS",
    "arm_from_description",
    "resolve_description",
    "load_parameters",
    "save_parameters",
]

#: Keys of the lab's YAML parameter file (all required): I about the joint axes, b viscous,
#: cf Coulomb coefficients of ``cf atan(100 q')``, Ir rotor inertia, gr gear ratio.
LAB_KEYS = ("m1", "m2", "l1", "l2", "r1", "r2", "I1", "I2", "Ir", "b1", "b2", "cf1", "cf2", "g", "gr")
#: Keys of the lab's YAML that are read and ignored (torque limits [N m]).
LAB_IGNORED = ("tl1", "tl2")
#: jaxid's extension of the lab's format: torque offsets [N m], optional (default 0), written when non-zero.
LAB_OFFSETS = ("off1", "off2")
#: The Coulomb slope of the lab's model [s/rad].
LAB_COULOMB_SLOPE = 100.0


def _base(table: Mapping, base_dir: Path | None, where: str, seen: tuple[Path, ...]) -> tuple[dict, str]:
    """The explicit table of the preset or file the table starts from (``{}`` if none), and its label."""
    if "preset" in table and "parameters" in table:
        raise ValueError(
            f"{where} has both preset and parameters; start from one of them (the other keys override it)."
        )
    if "preset" in table:
        name = table["preset"]
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(
                f"{_name(where, 'preset')} = {name!r} is not a preset; choose one of {list(PRESETS)}."
                f"{did_you_mean(str(name), PRESETS)}"
            )
        return describe_arm(arm_preset(name)), f"preset {name!r}"
    if "parameters" in table:
        file = table["parameters"]
        if not isinstance(file, str) or not file:
            raise ValueError(f'{_name(where, "parameters")} must be a file name, e.g. "arm.yml"; got {file!r}.')
        path = Path(file)
        if not path.is_absolute():
            path = (base_dir if base_dir is not None else Path.cwd()) / path
        return _read_file(path, seen), f"file {str(path)!r}"
    return {}, ""


def resolve_description(
    table: Mapping[str, Any], *, base_dir: str | Path | None = None, where: str = "arm"
) -> dict[str, Any]:
    """Check an ``[arm]`` table and return its explicit form (``describe_arm``'s keys, floats).

    Pure Python (no arrays) unless a preset is named. ``base_dir``: the folder a ``parameters``
    file is relative to (default: the working directory). ``where`` names the table in messages
    (keys appear as ``f"{where}.{key}"``; a ``where`` ending in ``:`` names a file, keys as
    ``f"{where} {key}"``). Raises ``ValueError`` (one line) as ``jaxid.model.arm_table``'s docstring lists.
    """
    return _resolve(table, None if base_dir is None else Path(base_dir), where, ())


def _resolve(table: Mapping[str, Any], base_dir: Path | None, where: str, seen: tuple[Path, ...]) -> dict[str, Any]:
    """``resolve_description``; ``seen``: the parameter files being read (a loop is an error)."""
    _check_keys(table, where)
    base, label = _base(table, base_dir, where, seen)
    return _explicit(table, base, label, where)


def arm_from_description(
    table: Mapping[str, Any], *, base_dir: str | Path | None = None, where: str = "arm"
) -> TwoLinkArm:
    """The arm an ``[arm]`` table describes (keys and rules in ``jaxid.model.arm_table``).

    Args:
        table: the table, e.g. ``{"preset": "double_pendulum", "l1": 0.3, "fv1": 0.1}`` or
            ``{"parameters": "arm.yml"}``; values in SI units, angles from the downward vertical.
        base_dir: the folder a ``parameters`` file name is relative to (a config's folder;
            default: the working directory).
        where: how messages name the table (keys appear as ``f"{where}.{key}"``).

    Returns an unbatched ``TwoLinkArm`` whose ``active_terms`` are the table's ``terms``. Raises
    ``ValueError`` (one line, naming the key and what to change) for a bad table, and as
    ``TwoLinkArm`` without float64.
    """
    return _build(resolve_description(table, base_dir=base_dir, where=where))


def _yaml_values(path: Path, text: str) -> dict[str, Any]:
    """The explicit table of one of the lab's YAML files (checks named with the lab's keys)."""
    where = f"{path}:"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ValueError(
            f"{path}: expected a flat YAML mapping of `key: number` ({', '.join(LAB_KEYS)}), got {type(raw).__name__}."
        )
    allowed = (*LAB_KEYS, *LAB_IGNORED, *LAB_OFFSETS)
    for key in raw:
        if key not in allowed:
            raise ValueError(
                f"{path}: unknown key {key!r}; the lab's parameter file has {list(LAB_KEYS)} (and the ignored torque "
                f"limits tl1, tl2; jaxid's optional torque offsets off1, off2).{did_you_mean(key, allowed)}"
            )
    missing = [k for k in LAB_KEYS if k not in raw]
    if missing:
        raise ValueError(
            f"{path}: missing {', '.join(missing)}; the lab's parameter file needs all of {list(LAB_KEYS)}."
        )
    units = {"b1": "N m s/rad", "b2": "N m s/rad", "cf1": "N m", "cf2": "N m", "gr": "-"}
    p = {}
    for key in (*LAB_KEYS, *(k for k in LAB_OFFSETS if k in raw)):
        value = raw[key]
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as text
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, (dict, list)):
            raise ValueError(f"{path}: {key} must be a number, got a {type(value).__name__}; the file is flat.")
        p[key] = _number(value, _name(where, key), units.get(key) or _unit(key))
    for key in ("b1", "b2", "cf1", "cf2"):
        if p[key] < 0:
            raise ValueError(f"{path}: {key} = {p[key]:g} must be >= 0 [{units[key]}] (friction opposes motion).")
    if p["gr"] <= 0:
        raise ValueError(f"{path}: gr = {p['gr']:g} must be > 0 (the gear ratio).")
    table = {
        "m1": p["m1"],
        "m2": p["m2"],
        "l1": p["l1"],
        "l2": p["l2"],
        "r1": p["r1"],
        "r2": p["r2"],
        "I1": p["I1"],
        "I2": p["I2"],
        "fv1": p["b1"],
        "fv2": p["b2"],
        # The same arithmetic as jaxid.double_pendulum(), so the shipped file gives it bit for bit.
        "fc1": p["cf1"] * math.pi / 2,
        "fc2": p["cf2"] * math.pi / 2,
        "coulomb_slope": LAB_COULOMB_SLOPE,
        "Ir": p["Ir"],
        "gear_ratio": p["gr"],
        "g": p["g"],
    }
    table.update({k: p[k] for k in LAB_OFFSETS if k in p})
    return resolve_description(table, where=where)


def _read_file(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The explicit table of a parameter file, by suffix."""
    suffix = path.suffix.lower()
    if suffix not in (".yml", ".yaml", ".toml"):
        raise ValueError(
            f"{path}: unknown parameter file format {path.suffix!r}; use .yml/.yaml (the lab's format) or .toml "
            "(jaxid's [arm] table)."
        )
    if not path.is_file():
        raise ValueError(
            f"{path}: no such parameter file; check the name (in a config, relative to the config's folder)."
        )
    resolved = path.resolve()
    if resolved in seen:
        raise ValueError(f"{path}: parameter files refer to each other in a loop; break it.")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the parameter file ({err}).") from None
    if suffix != ".toml":
        return _yaml_values(path, text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {' '.join(str(err).split())}") from None
    other = [k for k in raw if k != "arm"]
    if other or "arm" not in raw:
        extra = f" (it has [{other[0]}])" if other else ""
        raise ValueError(f"{path}: a jaxid parameter file holds one [arm] table and nothing else{extra}.")
    if not isinstance(raw["arm"], dict):
        raise ValueError(f"{path}: arm must be a table ([arm]), got {raw['arm']!r}.")
    return _resolve(raw["arm"], path.parent, f"{path}: arm", (*seen, resolved))


def load_parameters(path: str | Path) -> TwoLinkArm:
    """The arm of a parameter file, in the format its suffix names.

    - ``.yml``/``.yaml``: the DFKI lab's format (``data/double-pendulum/lab_model_parameters.yml``),
      a flat ``key: number`` mapping with all of ``LAB_KEYS``: ``m1 m2`` [kg], ``l1 l2 r1 r2`` [m],
      ``I1 I2`` inertias about the **joint axes** [kg m²] (``J_i = I_i − m_i r_i²``), ``Ir``
      [kg m²], viscous ``b1 b2`` [N m s/rad], Coulomb ``cf1 cf2`` [N m] of ``cf atan(100 q')``
      (``fc = cf π/2``, slope 100 s/rad), ``g`` [m/s²], gear ratio ``gr``. The torque limits
      ``tl1 tl2`` are accepted and ignored. The lab's angles are jaxid's (from the downward
      vertical, ``q2`` relative). The arm's terms are those with non-zero values. The shipped file
      gives exactly ``double_pendulum()``.
    - ``.toml``: jaxid's format, one ``[arm]`` table with the keys of ``arm_from_description``
      (a ``parameters`` file in it is relative to this file).

    Raises ``ValueError`` (one line, naming the file and the key): unreadable or missing file,
    unknown suffix, not a flat mapping, unknown or missing keys, and every value check of
    ``jaxid.model.arm_table``. A physically inconsistent set that a ``TwoLinkArm`` holds (an inertia
    about the centre of mass below the allowance, e.g. the lab's ``I2`` below ``m2 r2²``: an identified
    set) is read as given with a one-line ``DescriptionWarning``, so that it loads as a fit's reference;
    negative friction stays an error (``TwoLinkArm`` holds none).
    """
    return _build(_read_file(Path(path)))


def _float(value: float) -> str:
    """``repr`` (exact round trip) in a form both TOML and YAML 1.1 read as a float."""
    text = repr(float(value))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


def save_parameters(path: str | Path, arm: TwoLinkArm, *, notes: str | None = None) -> Path:
    """Write one arm to a parameter file in the format its suffix names; return the path.

    - ``.toml``: an ``[arm]`` table with every parameter (inertias as ``J``, about the centre of
      mass), ``coulomb_slope``, ``gear_ratio``, ``g``, ``angles`` and ``terms`` (the arm's
      ``active_terms``), under a comment header stating units and conventions (and ``I_i``).
    - ``.yml``/``.yaml``: the lab's format (``I_i = J_i + m_i r_i²``, ``b = fv``,
      ``cf = fc 2/π``, ``gr``), ``tl1 tl2`` not written; non-zero torque offsets as the optional keys
      ``off1, off2`` (jaxid's extension of the format, read back by ``load_parameters``). The format
      has no place for another Coulomb slope or active terms whose values are zero: a slope other
      than 100 s/rad raises ``ValueError`` (save as ``.toml``); the terms are not written (reading
      the file back gives the terms with non-zero values).

    Floats are written with ``repr`` (full precision): ``load_parameters(save_parameters(p, arm))``
    equals ``arm`` to the last bit of the TOML values (the YAML's ``I``/``cf`` conversion to an ulp).
    ``notes`` (free text) becomes comment lines at the top. The arm must be one concrete arm and
    pass the description's checks (so that the file loads back); else ``ValueError``. Overwrites
    an existing file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yml", ".yaml", ".toml"):
        raise ValueError(f"{path}: unknown parameter file format {path.suffix!r}; use .yml/.yaml or .toml.")
    values = describe_arm(arm)
    try:  # a warning (e.g. a J beyond the allowance) still writes the file; an error does not
        resolve_description(dict(values), where=f"{path}: arm")
    except ValueError as err:
        raise ValueError(f"{err} ({path} not written)") from None
    note_lines = notes.splitlines() if notes else []
    j = (values["J1"], values["J2"])
    m, r = (values["m1"], values["m2"]), (values["r1"], values["r2"])
    about_joint = [j[i] + m[i] * r[i] ** 2 for i in range(2)]
    if suffix == ".toml":
        header = [
            "jaxid arm parameters (read by jaxid.load_parameters; an experiment's [arm] table takes the same keys).",
            "SI units: kg, m, kg m², N m s/rad, N m, m/s². Angles from the downward vertical, counter-clockwise",
            "positive, q2 relative to link 1. J1, J2 about the centre of mass; about the joint axes",
            f"I1 = {_float(about_joint[0])}, I2 = {_float(about_joint[1])} kg m².",
            "Coulomb friction fc (2/π) atan(coulomb_slope q').",
            *note_lines,
        ]
        body = []
        for key, value in values.items():
            if key == "angles":
                body.append(f'angles = "{value}"')
            elif key == "terms":
                body.append("terms = [" + ", ".join(f'"{t}"' for t in value) + "]")
            else:
                body.append(f"{key} = {_float(value)}")
        text = _comment(header) + "\n[arm]\n" + "\n".join(body) + "\n"
    else:
        if values["coulomb_slope"] != LAB_COULOMB_SLOPE:
            raise ValueError(
                f"{path}: the lab's YAML format has no place for a Coulomb slope of {values['coulomb_slope']:g} s/rad "
                "(the lab's is 100); save as .toml (jaxid's format holds every parameter)."
            )
        offsets = values["off1"] != 0 or values["off2"] != 0
        lab = {
            "m1": values["m1"],
            "m2": values["m2"],
            "l1": values["l1"],
            "l2": values["l2"],
            "r1": values["r1"],
            "r2": values["r2"],
            "I1": about_joint[0],
            "I2": about_joint[1],
            "Ir": values["Ir"],
            "b1": values["fv1"],
            "b2": values["fv2"],
            "cf1": values["fc1"] * 2 / math.pi,
            "cf2": values["fc2"] * 2 / math.pi,
            "g": values["g"],
            "gr": values["gear_ratio"],
        }
        if offsets:
            lab.update(off1=values["off1"], off2=values["off2"])
        header = [
            "Arm parameters in the DFKI lab's format (written by jaxid.save_parameters): SI units, I1, I2 about",
            "the joint axes, viscous b, Coulomb cf of cf atan(100 q'), rotor inertia Ir behind gear ratio gr.",
            *(
                ["off1, off2: torque offsets [N m] (jaxid's extension of the format; optional, default 0)."]
                if offsets
                else []
            ),
            *note_lines,
        ]
        text = _comment(header) + "".join(f"{k}: {_float(v)}\n" for k, v in lab.items())
    path.write_text(text)
    return path
