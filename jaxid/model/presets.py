"""Preset arms: the paper's two (``point_mass``, ``table1``) and the measured DFKI double pendulum."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jaxtyping import ArrayLike

from .arm import TwoLinkArm
from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY

__all__ = ["point_mass", "table1", "double_pendulum", "DOUBLE_PENDULUM_PARAMETERS"]


def point_mass(
    masses: ArrayLike = (5.0, 1.5),
    lengths: ArrayLike = (1.0, 0.8),
    friction: ArrayLike = (5.0, 2.0),
    gravity: ArrayLike = GRAVITY,
) -> TwoLinkArm:
    """The point-mass arm the paper's eqs. 14-15 are derived from: ``r_i = l_i``, ``J_i = 0``."""
    lengths = jnp.asarray(lengths, dtype=float)
    return TwoLinkArm(masses, lengths, lengths, jnp.zeros_like(lengths), friction, gravity)


def table1(
    masses: ArrayLike = (5.0, 1.5),
    lengths: ArrayLike = (1.0, 0.8),
    inertias: ArrayLike = (5.0, 5.0),
    friction: ArrayLike = (5.0, 2.0),
    gravity: ArrayLike = GRAVITY,
) -> TwoLinkArm:
    """The paper's Table 1 arm: ``J1 = J2 = 5 kg m²``, ``r_i = l_i / 2``, ``m = (5, 1.5)``."""
    lengths = jnp.asarray(lengths, dtype=float)
    return TwoLinkArm(masses, lengths, lengths / 2, inertias, friction, gravity)


#: The DFKI double pendulum (design C.0, model 3.0) as identified by its makers: the values of
#: ``data/system_identification/identified_parameters/design_C.0/model_3.0/model_parameters.yml``
#: in github.com/dfki-ric-underactuated-lab/double_pendulum (commit 1e8544e), BSD 3-Clause License
#: (the notice is in ``data/double-pendulum/LICENSE``, beside the same file as
#: ``lab_model_parameters.yml``). ``I1, I2`` are
#: inertias about the joint axes, ``b`` viscous and ``cf`` Coulomb coefficients of
#: ``b q' + cf atan(100 q')``, ``Ir`` the rotor inertia, ``gr`` the gear ratio.
DOUBLE_PENDULUM_PARAMETERS: dict[str, float] = {
    "m1": 0.6416937799349799,
    "m2": 0.563935954099688,
    "l1": 0.2,
    "l2": 0.3,
    "r1": 0.2,
    "r2": 0.3212669909674605,
    "I1": 0.02671076499939512,
    "I2": 0.053878129629650884,
    "Ir": 9.937281205437459e-05,
    "gr": 6.0,
    "b1": 0.001,
    "b2": 0.001,
    "cf1": 0.093,
    "cf2": 0.078,
    "g": 9.81,
}


def double_pendulum() -> TwoLinkArm:
    """The measured DFKI double pendulum with its makers' identified parameters.

    ``l = (0.2, 0.3) m``, ``r = (0.2, 0.3213) m``, ``m = (0.642, 0.564) kg``, inertias about the
    centre of mass ``J_i = I_i − m_i r_i²`` from the lab's joint-axis inertias, rotor inertia
    ``Ir = 9.94e-5 kg m²`` behind ``gr = 6``, viscous ``fv = b``, Coulomb ``fc = cf π/2`` with the
    lab's slope 100 s/rad (so ``fc (2/π) atan(100 q') = cf atan(100 q')``), ``g = 9.81``, zero
    torque offsets. Source and license: ``DOUBLE_PENDULUM_PARAMETERS``. Its viscous friction is
    tiny (1e-3 N m s/rad): a periodic steady state takes a long time to reach.
    """
    p = DOUBLE_PENDULUM_PARAMETERS
    masses = (p["m1"], p["m2"])
    com = (p["r1"], p["r2"])
    inertias = (p["I1"] - p["m1"] * p["r1"] ** 2, p["I2"] - p["m2"] * p["r2"] ** 2)
    return TwoLinkArm(
        masses=masses,
        lengths=(p["l1"], p["l2"]),
        com=com,
        inertias=inertias,
        friction=(p["b1"], p["b2"]),
        gravity=p["g"],
        coulomb=(p["cf1"] * math.pi / 2, p["cf2"] * math.pi / 2),
        rotor_inertia=p["Ir"],
        gear_ratio=p["gr"],
        torque_offset=(0.0, 0.0),
        coulomb_slope=DEFAULT_COULOMB_SLOPE,
    )
