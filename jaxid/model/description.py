"""The user's two-link arm described in words: parameter files and the ``[arm]`` table of a config.

One loader for every description of a ``TwoLinkArm``:

- ``load_parameters(path)``: a parameter file, the lab's YAML (``.yml``/``.yaml``) or jaxid's TOML
  (``.toml``, one ``[arm]`` table);
- ``arm_from_description(table)``: the ``[arm]`` table of a config (the same keys as a TOML
  parameter file, so a parameter file and a config's ``[arm]`` table are the same thing);
- ``save_parameters(path, arm)``: the inverse, in either format, at full float precision;
- ``arm_preset(name)`` / ``PRESETS``: the named arms (``point_mass``, ``table1``, ``double_pendulum``).

Conventions (DESIGN.md §2; checked, never guessed): angles from the **downward vertical**,
counter-clockwise positive, ``q2`` relative to link 1 (``angles = "downward_vertical_relative"``,
the only accepted value); SI units: kg, m, kg m², N m s/rad, N m, m/s². ``J_i`` is the inertia of
link ``i`` about its **centre of mass**, ``I_i = J_i + m_i r_i²`` about its **joint axis**.
Coulomb friction is ``fc (2/π) atan(coulomb_slope q')`` with the level ``fc`` [N m]; the lab's
``cf atan(100 q')`` is ``fc = cf π/2`` at slope 100 s/rad.

The ``[arm]`` table (``DESCRIPTION_KEYS``)::

    [arm]
    preset = "double_pendulum"        # or parameters = "file.yml" (relative to the config), or neither
    angles = "downward_vertical_relative"   # optional; the only accepted value
    m1 = 0.64        # masses [kg]
    l1 = 0.3         # joint-to-joint lengths [m]
    r1 = 0.3         # joint-to-centre-of-mass distances [m]
    J1 = 0.001       # inertia about the centre of mass [kg m²] ... or I1 about the joint axis, not both
    fv1 = 0.1        # viscous friction [N m s/rad]
    fc1 = 0.0        # Coulomb level [N m]; coulomb_slope [s/rad], default 100
    Ir = 1e-4        # rotor inertia [kg m²] behind gear_ratio [-] (default 1)
    off1 = 0.0       # torque offsets [N m]
    g = 9.81         # [m/s²]
    terms = ["rotor"]   # optional terms present: some of "rotor", "coulomb", "offset"

(and ``m2 l2 r2 J2|I2 fv2 fc2 off2``). Each key overrides the preset or file. Without a preset or
file, ``m1 m2 l1 l2 r1 r2 fv1 fv2`` and an inertia per link (``J`` or ``I``) are required; the
others default to ``fc = 0``, ``coulomb_slope = 100``, ``Ir = 0``, ``gear_ratio = 1``,
``off = 0``, ``g = 9.81``. Overriding ``m_i`` or ``r_i`` keeps the base's ``J_i`` (the inertia
about the centre of mass); give ``I_i`` to fix the inertia about the joint instead.

``terms`` lists the optional terms the arm has (``TwoLinkArm.active_terms``): a listed term is
active, so estimated in a fit, even where its value is 0; a term not listed must have zero values
(else ``ValueError``). Without ``terms``: the preset's or file's terms (less those whose values the
table sets to zero) plus those with non-zero values.

Every problem raises a one-line ``ValueError`` naming the file or table and the key and saying what
to change: unknown keys (with a close match), missing keys, non-numeric or non-finite values,
masses, lengths, gear ratio or Coulomb slope ``<= 0``, negative ``r``, friction, Coulomb level or
rotor inertia, ``g < 0``, lengths or ``r`` above ``MAX_LENGTH`` (10 m) and masses above ``MAX_MASS``
(1000 kg) (a unit mistake: lengths are in metres, masses in kg), and an inertia about the centre of
mass below ``−NEGATIVE_INERTIA_ALLOWANCE m r²`` (−¼ m r²; typically an inertia about the centre of
mass given as ``I``). Identified parameter sets need not be physically consistent (the lab's double
pendulum has ``J2 = −0.074 m2 r2²``), hence the allowance rather than ``J >= 0``.

Reading a description is pure Python (no arrays) except where a preset is named, which builds the
preset arm (float64 needed, as for every ``TwoLinkArm``).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from ..types import did_you_mean
from ._two_link import OPTIONAL_TERMS
from .arm import TwoLinkArm
from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY, PARAMETER_NAMES
from .presets import double_pendulum, point_mass, table1

__all__ = [
    "PRESETS",
    "ANGLES",
    "DESCRIPTION_KEYS",
    "LAB_KEYS",
    "MAX_LENGTH",
    "MAX_MASS",
    "NEGATIVE_INERTIA_ALLOWANCE",
    "arm_preset",
    "arm_from_description",
    "describe_arm",
    "resolve_description",
    "load_parameters",
    "save_parameters",
]

#: The named arms: name -> constructor (no arguments).
PRESETS: dict[str, Callable[[], TwoLinkArm]] = {
    "point_mass": point_mass,
    "table1": table1,
    "double_pendulum": double_pendulum,
}

#: The one angle convention: from the downward vertical, counter-clockwise positive, q2 relative.
ANGLES = "downward_vertical_relative"

#: Longest plausible length or centre-of-mass distance [m]; a larger value is a unit mistake.
MAX_LENGTH = 10.0
#: Heaviest plausible link [kg]; a larger value is a unit mistake.
MAX_MASS = 1000.0
#: How far below zero an inertia about the centre of mass may be, as a fraction of ``m r²``.
NEGATIVE_INERTIA_ALLOWANCE = 0.25

#: Keys of the ``[arm]`` table -> what they hold (with units).
DESCRIPTION_KEYS: dict[str, str] = {
    "preset": f"a named arm, one of {list(PRESETS)}",
    "parameters": "a parameter file (.yml/.yaml lab format or .toml), relative to the file that names it",
    "angles": f'the angle convention, "{ANGLES}"',
    "m1": "mass of link 1 [kg]",
    "m2": "mass of link 2 [kg]",
    "l1": "length of link 1, joint to joint [m]",
    "l2": "length of link 2 [m]",
    "r1": "joint 1 to the centre of mass of link 1 [m]",
    "r2": "joint 2 to the centre of mass of link 2 [m]",
    "J1": "inertia of link 1 about its centre of mass [kg m²]",
    "J2": "inertia of link 2 about its centre of mass [kg m²]",
    "I1": "inertia of link 1 about joint 1's axis [kg m²]",
    "I2": "inertia of link 2 about joint 2's axis [kg m²]",
    "fv1": "viscous friction of joint 1 [N m s/rad]",
    "fv2": "viscous friction of joint 2 [N m s/rad]",
    "fc1": "Coulomb friction level of joint 1 [N m]",
    "fc2": "Coulomb friction level of joint 2 [N m]",
    "coulomb_slope": "slope of the smooth sign (2/π) atan(slope q') [s/rad]",
    "Ir": "rotor inertia [kg m²]",
    "gear_ratio": "gear ratio the rotor inertia sits behind [-]",
    "off1": "torque offset of joint 1 [N m]",
    "off2": "torque offset of joint 2 [N m]",
    "g": "gravitational acceleration [m/s²]",
    "terms": f"the optional terms present, some of {list(OPTIONAL_TERMS)}",
}

#: Keys of the lab's YAML parameter file (all required): I about the joint axes, b viscous,
#: cf Coulomb coefficients of ``cf atan(100 q')``, Ir rotor inertia, gr gear ratio.
LAB_KEYS = ("m1", "m2", "l1", "l2", "r1", "r2", "I1", "I2", "Ir", "b1", "b2", "cf1", "cf2", "g", "gr")
#: Keys of the lab's YAML that are read and ignored (torque limits [N m]).
LAB_IGNORED = ("tl1", "tl2")
#: jaxid's extension of the lab's format: torque offsets [N m], optional (default 0), written when non-zero.
LAB_OFFSETS = ("off1", "off2")
#: The Coulomb slope of the lab's model [s/rad].
LAB_COULOMB_SLOPE = 100.0

# The explicit table's numeric keys, in order (the inertias as J): the arm's named parameters, then
# the constants that are not parameters.
_CONSTANTS = ("coulomb_slope", "gear_ratio", "g")
_VALUES = (*PARAMETER_NAMES, *_CONSTANTS)
_REQUIRED = ("m1", "m2", "l1", "l2", "r1", "r2", "fv1", "fv2")
_DEFAULTS = {
    "fc1": 0.0,
    "fc2": 0.0,
    "coulomb_slope": DEFAULT_COULOMB_SLOPE,
    "Ir": 0.0,
    "gear_ratio": 1.0,
    "off1": 0.0,
    "off2": 0.0,
    "g": GRAVITY,
}
_TERM_KEYS = {"coulomb": ("fc1", "fc2"), "rotor": ("Ir",), "offset": ("off1", "off2")}
# key -> (rule, test, unit)
_RULES: dict[str, tuple[str, Callable[[float], bool], str]] = {
    **{k: ("> 0", lambda v: v > 0, "kg") for k in ("m1", "m2")},
    **{k: ("> 0", lambda v: v > 0, "m") for k in ("l1", "l2")},
    **{k: (">= 0", lambda v: v >= 0, "m") for k in ("r1", "r2")},
    **{k: (">= 0", lambda v: v >= 0, "N m s/rad") for k in ("fv1", "fv2")},
    **{k: (">= 0", lambda v: v >= 0, "N m") for k in ("fc1", "fc2")},
    "coulomb_slope": ("> 0", lambda v: v > 0, "s/rad"),
    "Ir": (">= 0", lambda v: v >= 0, "kg m²"),
    "gear_ratio": ("> 0", lambda v: v > 0, "-"),
    "g": (">= 0 (its magnitude; 0 for an arm in a horizontal plane)", lambda v: v >= 0, "m/s²"),
}
# Keys of other formats (the lab's) that a user may write in an [arm] table -> what to write.
_HINTS = {
    "b1": "the viscous friction is fv1 (the lab's b1)",
    "b2": "the viscous friction is fv2 (the lab's b2)",
    "cf1": "the Coulomb level is fc1 = cf1 π/2: the lab's cf1 multiplies atan(100 q'), jaxid's fc1 "
    "multiplies (2/π) atan(100 q')",
    "cf2": "the Coulomb level is fc2 = cf2 π/2: the lab's cf2 multiplies atan(100 q'), jaxid's fc2 "
    "multiplies (2/π) atan(100 q')",
    "gr": "the gear ratio is gear_ratio",
    "tl1": "torque limits are not part of the arm; drop tl1",
    "tl2": "torque limits are not part of the arm; drop tl2",
}


def arm_preset(name: str) -> TwoLinkArm:
    """The named arm (``PRESETS``): ``point_mass``, ``table1`` or ``double_pendulum``.

    Raises ``ValueError`` (one line, with the allowed names) for any other name.
    """
    if name not in PRESETS:
        raise ValueError(f"Unknown arm preset {name!r}; choose one of {list(PRESETS)}.{did_you_mean(name, PRESETS)}")
    return PRESETS[name]()


def _name(where: str, key: str) -> str:
    """``arm.m1`` for a table, ``file.yml: m1`` for a file (``where`` ending in a colon)."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def _number(value: Any, name: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number in {unit}, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} = {value} is not finite; give a finite number in {unit}.")
    return value


def _unit(key: str) -> str:
    return DESCRIPTION_KEYS[key].rsplit("[", 1)[-1].rstrip("]") if "[" in DESCRIPTION_KEYS[key] else "SI units"


def describe_arm(arm: TwoLinkArm) -> dict[str, Any]:
    """The explicit ``[arm]`` table of one arm: every key of ``DESCRIPTION_KEYS`` but ``preset``,
    ``parameters`` and ``I1 I2`` (the inertias as ``J``), as Python floats, with ``terms`` the
    arm's active terms. ``arm_from_description(describe_arm(arm))`` rebuilds ``arm`` exactly.

    Raises ``ValueError`` for a batched or traced arm (describe one concrete arm).
    """
    if not isinstance(arm, TwoLinkArm):
        raise ValueError(f"Expected a TwoLinkArm, got {type(arm).__name__}.")
    if np.shape(arm.masses) != (2,):
        raise ValueError(
            f"Describe one arm at a time: this arm is batched (masses of shape {np.shape(arm.masses)}); take arm[i] "
            "with jax.tree.map(lambda x: x[i], arm)."
        )
    try:
        fields = {name: arm.get(name) for name in PARAMETER_NAMES}
        fields.update(coulomb_slope=arm.coulomb_slope, gear_ratio=arm.gear_ratio, g=arm.gravity)
        values = {k: float(v) for k, v in fields.items()}
    except (TypeError, jax.errors.ConcretizationTypeError):  # a tracer (inside jit/vmap/grad)
        raise ValueError(
            "describe_arm needs a concrete arm, not one traced inside jit/vmap/grad; call it outside."
        ) from None
    return {"angles": ANGLES, **values, "terms": list(arm.active_terms)}


def _terms(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError(
            f'{name} must be a list of names, some of {list(OPTIONAL_TERMS)}, e.g. ["rotor"]; got {value!r}.'
        )
    for term in value:
        if term not in OPTIONAL_TERMS:
            raise ValueError(
                f"{name}: unknown term {term!r}; use some of {list(OPTIONAL_TERMS)}."
                f"{did_you_mean(term, OPTIONAL_TERMS)}"
            )
    if len(set(value)) != len(value):
        raise ValueError(f"{name} = {value} lists a term twice; list each once.")
    return [t for t in OPTIONAL_TERMS if t in value]


def _check_angles(value: Any, name: str) -> None:
    if value != ANGLES:
        raise ValueError(
            f"{name} = {value!r} is not supported: jaxid's angles are from the downward vertical, counter-clockwise "
            f'positive, q2 relative to link 1 (angles = "{ANGLES}"); convert your arm to it (from the upward vertical '
            "q1 -> q1 + π; an absolute q2 -> q2 − q1; clockwise-positive angles change sign) and write that."
        )


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
    ``f"{where} {key}"``). Raises ``ValueError`` (one line) as the module docstring lists.
    """
    return _resolve(table, None if base_dir is None else Path(base_dir), where, ())


def _resolve(table: Mapping[str, Any], base_dir: Path | None, where: str, seen: tuple[Path, ...]) -> dict[str, Any]:
    """``resolve_description``; ``seen``: the parameter files being read (a loop is an error)."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table of keys ({list(DESCRIPTION_KEYS)}), got {table!r}.")
    for key in table:
        if key not in DESCRIPTION_KEYS:
            hint = f" ({_HINTS[key]})" if key in _HINTS else ""
            raise ValueError(
                f"{_name(where, key)}: unknown key {key!r}{hint}; the arm's keys are {list(DESCRIPTION_KEYS)}."
                f"{'' if hint else did_you_mean(key, DESCRIPTION_KEYS)}"
            )
    if "angles" in table:
        _check_angles(table["angles"], _name(where, "angles"))
    base, label = _base(table, base_dir, where, seen)
    origin = f" (from the {label})" if label else ""

    values = {k: base[k] for k in _VALUES if k in base}
    given = {}
    for key, raw in table.items():
        if key in ("preset", "parameters", "angles", "terms"):
            continue
        given[key] = _number(raw, _name(where, key), _unit(key))
    for link in ("1", "2"):
        if f"J{link}" in given and f"I{link}" in given:
            raise ValueError(
                f"{where} gives both J{link} (about the centre of mass) and I{link} (about the joint axis) for link "
                f"{link}; give one of them (I{link} = J{link} + m{link} r{link}²)."
            )
    values.update({k: v for k, v in given.items() if k not in ("I1", "I2")})
    if not base:
        missing = [k for k in _REQUIRED if k not in values]
        missing += [f"J{i} or I{i}" for i in "12" if f"J{i}" not in given and f"I{i}" not in given]
        if missing:
            raise ValueError(
                f"{where} is missing {', '.join(missing)}; give them (SI units), or start from preset = ... or "
                'parameters = "file.yml".'
            )
        for key, default in _DEFAULTS.items():
            values.setdefault(key, default)

    for key, (rule, ok, unit) in _RULES.items():
        if not ok(values[key]):
            src = "" if key in given else origin
            raise ValueError(f"{_name(where, key)} = {values[key]:g}{src} must be {rule} [{unit}].")
    for key in ("l1", "l2", "r1", "r2"):
        if values[key] > MAX_LENGTH:
            raise ValueError(
                f"{_name(where, key)} = {values[key]:g} m is longer than {MAX_LENGTH:g} m: lengths are in metres "
                f"(e.g. 300 mm is 0.3); give it in m."
            )
    for key in ("m1", "m2"):
        if values[key] > MAX_MASS:
            raise ValueError(
                f"{_name(where, key)} = {values[key]:g} kg is heavier than {MAX_MASS:g} kg: masses are in kg "
                f"(e.g. 500 g is 0.5); give it in kg."
            )

    for i in "12":
        m, r = values[f"m{i}"], values[f"r{i}"]
        mr2 = m * r**2
        if f"I{i}" in given:
            inertia = given[f"I{i}"]
            if inertia < 0:
                raise ValueError(f"{_name(where, f'I{i}')} = {inertia:g} must be >= 0 [kg m²].")
            values[f"J{i}"] = inertia - m * r**2
        j = values[f"J{i}"]
        if j < -NEGATIVE_INERTIA_ALLOWANCE * mr2 or j + mr2 < 0:
            floor = f"{1 - NEGATIVE_INERTIA_ALLOWANCE:g} m{i} r{i}²"
            if f"I{i}" in given:
                raise ValueError(
                    f"{_name(where, f'I{i}')} = {given[f'I{i}']:g} kg m² is below m{i} r{i}² = {mr2:g} kg m² "
                    f"(J{i} = I{i} − m{i} r{i}² = {j:g}; I{i} >= {floor} is required): is it about the centre of "
                    f"mass? Then write it as J{i}; I{i} is about the joint axis."
                )
            src = "" if f"J{i}" in given else origin
            raise ValueError(
                f"{_name(where, f'J{i}')} = {j:g} kg m²{src} is below −{NEGATIVE_INERTIA_ALLOWANCE:g} m{i} r{i}² = "
                f"{-NEGATIVE_INERTIA_ALLOWANCE * mr2:g} kg m² (m{i} = {m:g}, r{i} = {r:g}): J{i} is about the centre "
                f"of mass and cannot be (much) negative; check its sign and units, or give I{i} about the joint axis."
            )

    listed = "terms" in table
    if listed:
        terms = _terms(table["terms"], _name(where, "terms"))
    else:  # the base's terms, less those this table sets to zero
        terms = [t for t in base.get("terms", []) if not all(given.get(k, 1.0) == 0 for k in _TERM_KEYS[t])]
    for term, keys in _TERM_KEYS.items():
        nonzero = [k for k in keys if values[k] != 0]
        if term in terms or not nonzero:
            continue
        if listed:
            k = nonzero[0]
            src = "" if k in given else origin
            raise ValueError(
                f"{_name(where, k)} = {values[k]:g}{src} is non-zero but {term!r} is not in {_name(where, 'terms')} = "
                f"{terms}: add {term!r} to terms, or set {' and '.join(f'{x} = 0' for x in keys)}."
            )
        terms.append(term)
    return {"angles": ANGLES, **{k: values[k] for k in _VALUES}, "terms": [t for t in OPTIONAL_TERMS if t in terms]}


def _build(values: Mapping[str, Any]) -> TwoLinkArm:
    """The arm of an explicit table (``resolve_description``'s output)."""
    return TwoLinkArm(
        masses=(values["m1"], values["m2"]),
        lengths=(values["l1"], values["l2"]),
        com=(values["r1"], values["r2"]),
        inertias=(values["J1"], values["J2"]),
        friction=(values["fv1"], values["fv2"]),
        gravity=values["g"],
        coulomb=(values["fc1"], values["fc2"]),
        rotor_inertia=values["Ir"],
        gear_ratio=values["gear_ratio"],
        torque_offset=(values["off1"], values["off2"]),
        coulomb_slope=values["coulomb_slope"],
        active_terms=tuple(values["terms"]),
    )


def arm_from_description(
    table: Mapping[str, Any], *, base_dir: str | Path | None = None, where: str = "arm"
) -> TwoLinkArm:
    """The arm an ``[arm]`` table describes (keys and rules in the module docstring).

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
    unknown suffix, not a flat mapping, unknown or missing keys, and every value check of the
    module docstring.
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
    resolve_description({k: v for k, v in values.items()}, where=f"{path} (not written): arm")
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
