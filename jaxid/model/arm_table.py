"""The ``[arm]`` table of a two-link arm: its keys, the checks of its values and the arm it builds.

A config's ``[arm]`` table and a TOML parameter file hold the same keys. ``jaxid.model.description``
resolves a table's ``preset`` or ``parameters`` base and reads and writes parameter files; this
module says what a table may hold, checks an explicit table (every value given or defaulted), and
builds its ``TwoLinkArm``. The named arms (``PRESETS``, ``arm_preset``) and ``describe_arm`` (the
explicit table of an arm) are here too.

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
(1000 kg) (a unit mistake: lengths are in metres, masses in kg), and a negative inertia about the
joint axis ``J + m r² < 0``. Identified parameter sets need not be physically consistent (the lab's
double pendulum has ``J2 = −0.074 m2 r2²``): an inertia about the centre of mass below
``−NEGATIVE_INERTIA_ALLOWANCE m r²`` (−¼ m r²; a mistake when an inertia about the centre of mass was
given as ``I``, or a fitted set) is read as given with a one-line ``DescriptionWarning`` naming the
key, its value and the likely mistake.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from ..types import did_you_mean
from ._two_link import OPTIONAL_TERMS
from .arm import TwoLinkArm
from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY, PARAMETER_NAMES
from .presets import double_pendulum, point_mass, table1

__all__ = [
    "PRESETS",
    "ANGLES",
    "DESCRIPTION_KEYS",
    "MAX_LENGTH",
    "MAX_MASS",
    "NEGATIVE_INERTIA_ALLOWANCE",
    "arm_preset",
    "describe_arm",
    "DescriptionWarning",
]


class DescriptionWarning(UserWarning):
    """An arm description (a parameter file, an ``[arm]`` table) read as given although no physical arm has
    its values: an inertia about the centre of mass below the allowance (a fitted set)."""


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


def _check_keys(table: Mapping[str, Any], where: str) -> None:
    """A mapping of known keys, with the one angle convention where it names one (else ``ValueError``)."""
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


def _explicit(table: Mapping[str, Any], base: Mapping[str, Any], label: str, where: str) -> dict[str, Any]:
    """The explicit table of ``table`` over ``base``, the explicit table of its preset or file (``{}`` if
    none; ``label`` names it in messages): every value checked, defaults and terms filled in."""
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
                message = (
                    f"{_name(where, f'I{i}')} = {given[f'I{i}']:g} kg m² is below m{i} r{i}² = {mr2:g} kg m² "
                    f"(J{i} = I{i} − m{i} r{i}² = {j:g}, below the allowance I{i} >= {floor}): is it about the "
                    f"centre of mass? Then write it as J{i}; I{i} is about the joint axis."
                )
            else:
                src = "" if f"J{i}" in given else origin
                message = (
                    f"{_name(where, f'J{i}')} = {j:g} kg m²{src} is below −{NEGATIVE_INERTIA_ALLOWANCE:g} m{i} r{i}² = "
                    f"{-NEGATIVE_INERTIA_ALLOWANCE * mr2:g} kg m² (m{i} = {m:g}, r{i} = {r:g}): J{i} is about the "
                    f"centre of mass and no physical link has it (much) negative; check its sign and units, or give "
                    f"I{i} about the joint axis."
                )
            if j + mr2 < 0:  # no TwoLinkArm has it
                raise ValueError(message)
            # A non-negative inertia about the joint: an arm (a fitted, not physically consistent set, e.g. a
            # reference) that is read as given, with a warning.
            warnings.warn(f"{message} Read as given (not physically consistent).", DescriptionWarning, stacklevel=2)

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
