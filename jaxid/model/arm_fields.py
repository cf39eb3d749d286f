"""The fields of the planar two-link arm ``TwoLinkArm`` (``jaxid.model.arm``) and their rules.

Which field (and index) holds each named parameter (``PARAMETER_NAMES``), the array fields, the
value rules the constructor, ``with_parameters`` and ``replace`` apply to concrete values (finite;
positive, non-negative), the optional terms (Coulomb, rotor, offset) a set of values switches on, and
the constructor's helpers (a per-link pair, the static Coulomb slope, a copy with fields replaced
without re-running ``__init__``). Errors are one-line ``ValueError`` naming the field or parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from ._two_link import OPTIONAL_TERMS
from .parameters import PARAMETER_NAMES

# name -> (field, index on the trailing axis or None for a scalar field)
_FIELDS: dict[str, tuple[str, int | None]] = {
    "m1": ("masses", 0),
    "m2": ("masses", 1),
    "l1": ("lengths", 0),
    "l2": ("lengths", 1),
    "r1": ("com", 0),
    "r2": ("com", 1),
    "J1": ("inertias", 0),
    "J2": ("inertias", 1),
    "fv1": ("friction", 0),
    "fv2": ("friction", 1),
    "fc1": ("coulomb", 0),
    "fc2": ("coulomb", 1),
    "Ir": ("rotor_inertia", None),
    "off1": ("torque_offset", 0),
    "off2": ("torque_offset", 1),
}
assert tuple(_FIELDS) == PARAMETER_NAMES

_ARRAY_FIELDS = (
    "masses",
    "lengths",
    "com",
    "inertias",
    "friction",
    "gravity",
    "coulomb",
    "rotor_inertia",
    "gear_ratio",
    "torque_offset",
)

# field -> (requirement, elementwise test) for concrete values; every field must also be finite.
_CHECKS = {
    "masses": ("positive", lambda a: a > 0),
    "lengths": ("positive", lambda a: a > 0),
    "com": ("non-negative", lambda a: a >= 0),
    "inertias": ("finite", lambda a: np.ones_like(a, dtype=bool)),  # J_i + m_i r_i² ≥ 0: checked below
    "friction": ("non-negative", lambda a: a >= 0),
    "gravity": ("finite", lambda a: np.ones_like(a, dtype=bool)),
    "coulomb": ("non-negative", lambda a: a >= 0),
    "rotor_inertia": ("non-negative", lambda a: a >= 0),
    "gear_ratio": ("positive", lambda a: a > 0),
    "torque_offset": ("finite", lambda a: np.ones_like(a, dtype=bool)),
}


# optional term -> its field; parameter name -> the optional term it belongs to
_TERM_FIELDS = {"coulomb": "coulomb", "rotor": "rotor_inertia", "offset": "torque_offset"}
_TERM_OF = {"fc1": "coulomb", "fc2": "coulomb", "Ir": "rotor", "off1": "offset", "off2": "offset"}


def _terms(arm, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The optional terms ``arm`` needs (traced or non-zero values) plus ``extra``, in order."""
    extra = (extra,) if isinstance(extra, str) else tuple(extra)
    for term in extra:
        if term not in OPTIONAL_TERMS:
            raise ValueError(f"Unknown optional term {term!r} in active_terms; use some of {list(OPTIONAL_TERMS)}.")
    needed = set(extra)
    for term, field in _TERM_FIELDS.items():
        value = getattr(arm, field)
        if isinstance(value, jax.core.Tracer) or np.any(np.asarray(value) != 0):
            needed.add(term)
    return tuple(t for t in OPTIONAL_TERMS if t in needed)


def _which(field: str, good: np.ndarray | np.bool_) -> str:
    """`` (m1)``: the parameter of the first bad entry of ``field``, for an error message."""
    names = [n for n, (f, _) in _FIELDS.items() if f == field]
    if not names:
        return ""
    index = int(np.argwhere(~good)[0][-1]) if good.ndim and good.shape[-1:] == (2,) else 0
    return f" ({names[min(index, len(names) - 1)]})"


def _copy_with(arm, **changes):
    # A copy with some fields (static ones included) replaced, without re-running __init__.
    new = object.__new__(type(arm))
    for f in dataclasses.fields(arm):
        object.__setattr__(new, f.name, changes.get(f.name, getattr(arm, f.name)))
    return new


def _pair(value: ArrayLike, name: str) -> Array:
    arr = jnp.asarray(value, dtype=float)
    if arr.shape[-1:] != (2,):
        raise ValueError(f"{name} must have a trailing axis of length 2 (one value per link), got shape {arr.shape}.")
    return arr


def _static_slope(value) -> float:
    try:
        slope = float(value)
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        raise ValueError(
            f"coulomb_slope is a static option (a Python float, it is not traced), got {value!r}."
        ) from None
    if not (np.isfinite(slope) and slope > 0):
        raise ValueError(f"TwoLinkArm.coulomb_slope must be positive and finite [s/rad], got {slope}.")
    return slope
