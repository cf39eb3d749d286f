"""The arm model: parameters, dynamics, energy, regressors and identifiable parameters.

Conventions (DESIGN.md §2, fixed across jaxid):

- Angles are measured from the **downward vertical**, counter-clockwise positive; ``q2`` is the
  angle of link 2 relative to link 1. ``q = (0, 0)`` is the stable hanging equilibrium.
- ``D(q) q'' + C(q, q') q' + G(q) + Fv q' + Fc s(q') + offset = tau`` with

  - ``d11 = J1 + J2 + m1 r1² + m2 (l1² + r2² + 2 l1 r2 cos q2) + (gr² + 1) Ir``
  - ``d12 = d21 = J2 + m2 (r2² + l1 r2 cos q2) − gr Ir``, ``d22 = J2 + m2 r2² + gr² Ir``
  - ``C q' = [-h (2 q1' q2' + q2'²), h q1'²]``, ``h = m2 l1 r2 sin q2``
  - ``G = g [(m1 r1 + m2 l1) sin q1 + m2 r2 sin(q1 + q2), m2 r2 sin(q1 + q2)]``
  - ``s(q') = (2/π) atan(coulomb_slope q')`` (a smooth sign; slope static, default 100 s/rad)
  - ``offset``: a constant offset of the torque reading (``tau`` is what the drive reports).

  Rotor inertia ``Ir`` behind the gear ratio ``gr`` enters exactly as in the DFKI lab model
  (kinetic energy ``½ Ir (gr q1')² + ½ Ir (q1' − gr q2')²``). Coulomb friction, rotor inertia and
  offsets default to zero, and then every result is bit-for-bit the rigid-body model's.

SI units throughout: kg, m, kg m², N m s/rad, N m, m/s², rad.

Layout: ``parameters`` (names), ``interface`` (``AbstractArm``), ``arm`` (``TwoLinkArm``),
``dynamics`` (the public functions, for any ``AbstractArm``), ``presets``, ``base_parameters``.
All dynamics functions are pure and work unchanged under ``jit``, ``vmap`` and ``grad``; every
parameter is a JAX array leaf, so a sweep over parameter values never recompiles.
"""

from .arm import TwoLinkArm
from .arm_table import PRESETS, arm_preset, describe_arm
from .base_parameters import BaseParameters, base_parameters, base_regressor
from .description import arm_from_description, load_parameters, save_parameters
from .dynamics import (
    arm_from_standard,
    coriolis_forces,
    energy,
    forward_dynamics,
    friction_torque,
    gravity_torque,
    holding_torque,
    inverse_dynamics,
    kinetic_energy,
    mass_matrix,
    potential_energy,
    regressor,
    standard_parameters,
    standard_regressor,
)
from .interface import AbstractArm
from .parameters import (
    DEFAULT_COULOMB_SLOPE,
    GRAVITY,
    LINEAR_PARAMETERS,
    PARAMETER_NAMES,
    REGRESSOR_PARAMETERS,
    STANDARD_NAMES,
    validate_unknowns,
)
from .presets import DOUBLE_PENDULUM_PARAMETERS, double_pendulum, point_mass, table1
from .serial import SerialArm
from .urdf import load_arm, parse_urdf

__all__ = [
    "PARAMETER_NAMES",
    "LINEAR_PARAMETERS",
    "REGRESSOR_PARAMETERS",
    "STANDARD_NAMES",
    "GRAVITY",
    "DEFAULT_COULOMB_SLOPE",
    "AbstractArm",
    "TwoLinkArm",
    "point_mass",
    "table1",
    "double_pendulum",
    "DOUBLE_PENDULUM_PARAMETERS",
    "PRESETS",
    "SerialArm",
    "load_arm",
    "parse_urdf",
    "arm_preset",
    "arm_from_description",
    "describe_arm",
    "load_parameters",
    "save_parameters",
    "mass_matrix",
    "coriolis_forces",
    "gravity_torque",
    "friction_torque",
    "forward_dynamics",
    "inverse_dynamics",
    "holding_torque",
    "kinetic_energy",
    "potential_energy",
    "energy",
    "regressor",
    "validate_unknowns",
    "standard_parameters",
    "standard_regressor",
    "arm_from_standard",
    "BaseParameters",
    "base_parameters",
    "base_regressor",
]
