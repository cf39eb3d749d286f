"""Names of the arm parameters and the check of a set of unknowns (the bottom of ``jaxid.model``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..types import did_you_mean

__all__ = [
    "GRAVITY",
    "DEFAULT_COULOMB_SLOPE",
    "PARAMETER_NAMES",
    "LINEAR_PARAMETERS",
    "REGRESSOR_PARAMETERS",
    "STANDARD_NAMES",
    "validate_unknowns",
]

#: Standard gravitational acceleration [m/s²], the default of every arm.
GRAVITY = 9.81

#: Default slope [s/rad] of the smooth Coulomb sign ``(2/π) atan(slope q')`` (the lab's 100).
DEFAULT_COULOMB_SLOPE = 100.0

#: Names of the scalar physical parameters of ``TwoLinkArm``, in the order of ``parameter_vector``:
#: masses [kg], joint distances [m], centre-of-mass distances [m], inertias about the centre of
#: mass [kg m²], viscous friction [N m s/rad], Coulomb levels [N m], rotor inertia [kg m²],
#: torque offsets [N m].
PARAMETER_NAMES: tuple[str, ...] = (
    "m1",
    "m2",
    "l1",
    "l2",
    "r1",
    "r2",
    "J1",
    "J2",
    "fv1",
    "fv2",
    "fc1",
    "fc2",
    "Ir",
    "off1",
    "off2",
)

#: Parameters in which the dynamics *and the linearisation at rest* (``jaxid.linearise``:
#: ``D0``, ``Fv``, ``K0``) are affine; the frequency-domain estimators accept these as unknowns.
LINEAR_PARAMETERS: tuple[str, ...] = ("m1", "m2", "J1", "J2", "fv1", "fv2")

#: Every parameter the inverse dynamics are exactly linear in (lengths, gravity, gear ratio and
#: the Coulomb slope fixed): what ``regressor`` accepts as unknowns.
REGRESSOR_PARAMETERS: tuple[str, ...] = (
    "m1",
    "m2",
    "J1",
    "J2",
    "fv1",
    "fv2",
    "fc1",
    "fc2",
    "Ir",
    "off1",
    "off2",
)

#: The standard (barycentric) parameters the inverse dynamics of ``TwoLinkArm`` are linear in:
#: ``I_i = J_i + m_i r_i²`` (inertia about joint i's axis) [kg m²], first moments ``m_i r_i`` [kg m],
#: masses [kg], rotor inertia, friction and offsets as in ``PARAMETER_NAMES``.
STANDARD_NAMES: tuple[str, ...] = (
    "I1",
    "m1r1",
    "m1",
    "I2",
    "m2r2",
    "m2",
    "Ir",
    "fv1",
    "fv2",
    "fc1",
    "fc2",
    "off1",
    "off2",
)


def validate_unknowns(unknowns: Sequence[str], allowed: Sequence[str] = PARAMETER_NAMES) -> tuple[str, ...]:
    """Check a set of unknown parameter names; return it as a tuple.

    Raises ``ValueError`` naming the bad entry, the allowed names and a close match.
    """
    if isinstance(unknowns, str):
        unknowns = (unknowns,)
    unknowns = tuple(unknowns)
    if not unknowns:
        raise ValueError(f"The set of unknowns is empty; choose some of {list(allowed)}.")
    for name in unknowns:
        if name not in allowed:
            raise ValueError(
                f"Unknown parameter name {name!r}; allowed are {list(allowed)}.{did_you_mean(name, allowed)}"
            )
    if len(set(unknowns)) != len(unknowns):
        raise ValueError(f"The unknowns {list(unknowns)} contain a duplicate; list each once.")
    return unknowns
