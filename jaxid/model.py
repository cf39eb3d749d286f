"""The two-link arm: parameters, dynamics, energy and the linear-in-parameters regressor.

Conventions (DESIGN.md §2, fixed across jaxid):

- Angles are measured from the **downward vertical**, counter-clockwise positive; ``q2`` is the
  angle of link 2 relative to link 1. ``q = (0, 0)`` is the stable hanging equilibrium.
- ``D(q) q'' + C(q, q') q' + G(q) + Fv q' = tau`` with

  - ``d11 = J1 + J2 + m1 r1² + m2 (l1² + r2² + 2 l1 r2 cos q2)``
  - ``d12 = d21 = J2 + m2 (r2² + l1 r2 cos q2)``, ``d22 = J2 + m2 r2²``
  - ``C q' = [-h (2 q1' q2' + q2'²), h q1'²]``, ``h = m2 l1 r2 sin q2``
  - ``G = g [(m1 r1 + m2 l1) sin q1 + m2 r2 sin(q1 + q2), m2 r2 sin(q1 + q2)]``

SI units throughout: kg, m, kg m², N m s/rad, m/s², rad, N m.

All functions are pure and work unchanged under ``jit``, ``vmap`` and ``grad``; every
parameter is a JAX array leaf, so a sweep over parameter values never recompiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

__all__ = [
    "PARAMETER_NAMES",
    "TwoLinkArm",
    "point_mass",
    "table1",
    "mass_matrix",
    "coriolis_forces",
    "gravity_torque",
    "friction_torque",
    "forward_dynamics",
    "inverse_dynamics",
    "kinetic_energy",
    "potential_energy",
    "energy",
    "regressor",
    "validate_unknowns",
]

#: Names of the scalar physical parameters, in the order used by ``TwoLinkArm.parameter_vector``.
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
)

# Parameters in which the dynamics are exactly linear (so ``regressor`` is exact for them).
LINEAR_PARAMETERS: tuple[str, ...] = ("m1", "m2", "J1", "J2", "fv1", "fv2")

_FIELDS = {
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
}

GRAVITY = 9.81


def _suggest(name: str, allowed: Sequence[str]) -> str:
    import difflib

    folded = [a for a in allowed if a.lower() == name.lower()]
    close = folded or difflib.get_close_matches(name, allowed, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


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
            raise ValueError(f"Unknown parameter name {name!r}; allowed are {list(allowed)}.{_suggest(name, allowed)}")
    if len(set(unknowns)) != len(unknowns):
        raise ValueError(f"The unknowns {list(unknowns)} contain a duplicate; list each once.")
    return unknowns


def _pair(value: ArrayLike, name: str) -> Array:
    arr = jnp.asarray(value, dtype=float)
    if arr.shape[-1:] != (2,):
        raise ValueError(f"{name} must have a trailing axis of length 2 (one value per link), got shape {arr.shape}.")
    return arr


class TwoLinkArm(eqx.Module):
    """Physical parameters of a planar two-link arm (a pytree of arrays; batch it with ``vmap``).

    Attributes:
        masses: ``(m1, m2)`` link masses [kg].
        lengths: ``(l1, l2)`` joint-to-joint distances [m] (``l2`` only enters kinematics).
        com: ``(r1, r2)`` joint-to-centre-of-mass distances [m].
        inertias: ``(J1, J2)`` link inertias about the centre of mass [kg m²].
        friction: ``(fv1, fv2)`` viscous joint friction [N m s/rad]. Mandatory for a steady state.
        gravity: gravitational acceleration [m/s²].

    Every field may carry leading batch axes (e.g. ``masses`` of shape ``(B, 2)``) when the arm
    is used under ``vmap``. Construction checks shapes and, for concrete values, signs.
    """

    masses: Float[Array, "*batch 2"]
    lengths: Float[Array, "*batch 2"]
    com: Float[Array, "*batch 2"]
    inertias: Float[Array, "*batch 2"]
    friction: Float[Array, "*batch 2"]
    gravity: Float[Array, "*batch"]

    def __init__(
        self,
        masses: ArrayLike,
        lengths: ArrayLike,
        com: ArrayLike,
        inertias: ArrayLike,
        friction: ArrayLike = (5.0, 2.0),
        gravity: ArrayLike = GRAVITY,
    ):
        self.masses = _pair(masses, "masses")
        self.lengths = _pair(lengths, "lengths")
        self.com = _pair(com, "com")
        self.inertias = _pair(inertias, "inertias")
        self.friction = _pair(friction, "friction")
        self.gravity = jnp.asarray(gravity, dtype=float)
        self._check_values()

    def _check_values(self) -> None:
        # Only concrete values can be checked here; traced ones are the caller's responsibility.
        checks = {
            "masses": (self.masses, "positive", lambda a: np.all(a > 0)),
            "lengths": (self.lengths, "positive", lambda a: np.all(a > 0)),
            "com": (self.com, "non-negative", lambda a: np.all(a >= 0)),
            "inertias": (self.inertias, "non-negative", lambda a: np.all(a >= 0)),
            "friction": (self.friction, "non-negative", lambda a: np.all(a >= 0)),
        }
        for name, (value, word, ok) in checks.items():
            if isinstance(value, jax.core.Tracer):
                continue
            arr = np.asarray(value)
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"TwoLinkArm.{name} contains NaN or inf: {arr}; give finite values.")
            if not ok(arr):
                raise ValueError(f"TwoLinkArm.{name} must be {word} (SI units), got {arr}.")

    # -- parameter access ----------------------------------------------------------------------
    def get(self, name: str) -> Array:
        """The value of one named parameter (see ``PARAMETER_NAMES``)."""
        validate_unknowns((name,))
        field, index = _FIELDS[name]
        return getattr(self, field)[..., index]

    def parameter_vector(self, names: Sequence[str]) -> Float[Array, "*batch p"]:
        """The values of ``names`` stacked on a trailing axis."""
        names = validate_unknowns(names)
        return jnp.stack([self.get(n) for n in names], axis=-1)

    def with_parameters(self, names: Sequence[str], values: Float[ArrayLike, "*batch p"]) -> TwoLinkArm:
        """A copy with the parameters ``names`` replaced by ``values`` (trailing axis ``p``).

        Traceable: ``values`` may be a tracer (used by estimators and the Cramér–Rao bound).
        """
        names = validate_unknowns(names)
        values = jnp.asarray(values)
        if values.shape[-1:] != (len(names),):
            raise ValueError(
                f"values must have a trailing axis of length {len(names)} for {list(names)}, got {values.shape}."
            )
        arm = self
        for i, name in enumerate(names):
            field, index = _FIELDS[name]
            arm = eqx.tree_at(
                lambda a, field=field: getattr(a, field),
                arm,
                getattr(arm, field).at[..., index].set(values[..., i]),
            )
        return arm

    def replace(self, **kwargs: ArrayLike) -> TwoLinkArm:
        """A copy with fields or named parameters replaced, e.g. ``arm.replace(m2=2.0)``."""
        arm = self
        fields = {k: v for k, v in kwargs.items() if k not in _FIELDS}
        params = {k: v for k, v in kwargs.items() if k in _FIELDS}
        for name, value in fields.items():
            if name not in ("masses", "lengths", "com", "inertias", "friction", "gravity"):
                raise ValueError(
                    f"TwoLinkArm has no field or parameter {name!r}; use one of {list(PARAMETER_NAMES)} "
                    "or masses/lengths/com/inertias/friction/gravity."
                )
            arm = eqx.tree_at(lambda a, name=name: getattr(a, name), arm, jnp.asarray(value, dtype=float))
        if params:
            arm = arm.with_parameters(
                tuple(params), jnp.stack([jnp.asarray(v, dtype=float) for v in params.values()], -1)
            )
        return arm


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


# -- dynamics ------------------------------------------------------------------------------------


def _trig(q: Array) -> tuple[Array, Array, Array, Array, Array]:
    # sin q1, cos q1, sin q2, cos q2 are computed once; sin(q1 + q2) from the addition formula.
    s1, c1 = jnp.sin(q[..., 0]), jnp.cos(q[..., 0])
    s2, c2 = jnp.sin(q[..., 1]), jnp.cos(q[..., 1])
    s12 = s1 * c2 + c1 * s2
    return s1, c1, s2, c2, s12


def _mass_entries(arm: TwoLinkArm, c2: Array) -> tuple[Array, Array, Array]:
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    j1, j2 = arm.inertias[..., 0], arm.inertias[..., 1]
    d22 = j2 + m2 * r2**2
    d12 = d22 + m2 * l1 * r2 * c2
    d11 = j1 + m1 * r1**2 + m2 * l1**2 + d22 + 2 * m2 * l1 * r2 * c2
    return d11, d12, d22


def mass_matrix(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b 2 2"]:
    """Inertia matrix ``D(q)`` [kg m²], shape ``(..., 2, 2)``."""
    q = jnp.asarray(q)
    d11, d12, d22 = jnp.broadcast_arrays(*_mass_entries(arm, jnp.cos(q[..., 1])))
    return jnp.stack([jnp.stack([d11, d12], -1), jnp.stack([d12, d22], -1)], -2)


def coriolis_forces(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"], qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b 2"]:
    """Coriolis and centrifugal torques ``C(q, q') q'`` [N m]."""
    q, qd = jnp.asarray(q), jnp.asarray(qd)
    h = arm.masses[..., 1] * arm.lengths[..., 0] * arm.com[..., 1] * jnp.sin(q[..., 1])
    return _coriolis(h, qd)


def _coriolis(h: Array, qd: Array) -> Array:
    v1, v2 = qd[..., 0], qd[..., 1]
    return jnp.stack([-h * (2 * v1 * v2 + v2**2), h * v1**2], -1)


def gravity_torque(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b 2"]:
    """Gravity torques ``G(q)`` [N m]; zero at the hanging equilibrium ``q = 0``."""
    q = jnp.asarray(q)
    s1, _, _, _, s12 = _trig(q)
    return _gravity(arm, s1, s12)


def _gravity(arm: TwoLinkArm, s1: Array, s12: Array) -> Array:
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    g2 = arm.gravity * m2 * r2 * s12
    g1 = arm.gravity * (m1 * r1 + m2 * l1) * s1 + g2
    return jnp.stack([g1, g2], -1)


def friction_torque(arm: TwoLinkArm, qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b 2"]:
    """Viscous friction torques ``Fv q'`` [N m]."""
    return arm.friction * jnp.asarray(qd)


def forward_dynamics(
    arm: TwoLinkArm,
    q: Float[ArrayLike, "*b 2"],
    qd: Float[ArrayLike, "*b 2"],
    tau: Float[ArrayLike, "*b 2"],
) -> Float[Array, "*b 2"]:
    """Joint accelerations ``q''`` [rad/s²] from ``D q'' = tau - C q' - G - Fv q'``.

    The 2x2 solve is written out (Cramer's rule); the trigonometric functions are evaluated once.
    """
    q, qd, tau = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau)
    s1, _, s2, c2, s12 = _trig(q)
    d11, d12, d22 = _mass_entries(arm, c2)
    h = arm.masses[..., 1] * arm.lengths[..., 0] * arm.com[..., 1] * s2
    rhs = tau - _coriolis(h, qd) - _gravity(arm, s1, s12) - arm.friction * qd
    det = d11 * d22 - d12 * d12
    a1 = (d22 * rhs[..., 0] - d12 * rhs[..., 1]) / det
    a2 = (d11 * rhs[..., 1] - d12 * rhs[..., 0]) / det
    return jnp.stack([a1, a2], -1)


def inverse_dynamics(
    arm: TwoLinkArm,
    q: Float[ArrayLike, "*b 2"],
    qd: Float[ArrayLike, "*b 2"],
    qdd: Float[ArrayLike, "*b 2"],
) -> Float[Array, "*b 2"]:
    """Joint torques ``tau = D q'' + C q' + G + Fv q'`` [N m]."""
    q, qd, qdd = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)
    s1, _, s2, c2, s12 = _trig(q)
    d11, d12, d22 = _mass_entries(arm, c2)
    h = arm.masses[..., 1] * arm.lengths[..., 0] * arm.com[..., 1] * s2
    dq = jnp.stack([d11 * qdd[..., 0] + d12 * qdd[..., 1], d12 * qdd[..., 0] + d22 * qdd[..., 1]], -1)
    return dq + _coriolis(h, qd) + _gravity(arm, s1, s12) + arm.friction * qd


def kinetic_energy(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"], qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b"]:
    """Kinetic energy ``½ q'ᵀ D(q) q'`` [J]."""
    qd = jnp.asarray(qd)
    return 0.5 * jnp.einsum("...i,...ij,...j->...", qd, mass_matrix(arm, q), qd)


def potential_energy(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b"]:
    """Gravitational potential energy [J], zero reference at the joint-1 height."""
    q = jnp.asarray(q)
    m1, m2 = arm.masses[..., 0], arm.masses[..., 1]
    l1 = arm.lengths[..., 0]
    r1, r2 = arm.com[..., 0], arm.com[..., 1]
    c1 = jnp.cos(q[..., 0])
    c12 = jnp.cos(q[..., 0] + q[..., 1])
    return -arm.gravity * (m1 * r1 * c1 + m2 * (l1 * c1 + r2 * c12))


def energy(arm: TwoLinkArm, q: Float[ArrayLike, "*b 2"], qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "*b"]:
    """Total mechanical energy [J]; conserved without friction and input torque."""
    return kinetic_energy(arm, q, qd) + potential_energy(arm, q)


def regressor(
    arm: TwoLinkArm,
    q: Float[ArrayLike, "*b 2"],
    qd: Float[ArrayLike, "*b 2"],
    qdd: Float[ArrayLike, "*b 2"],
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
) -> tuple[Float[Array, "*b 2 p"], Float[Array, "*b 2"]]:
    """Linear-in-parameters form ``tau = Y(q, q', q'') theta + tau_known``.

    ``theta = arm.parameter_vector(unknowns)``; ``unknowns`` must be a subset of
    ``("m1", "m2", "J1", "J2", "fv1", "fv2")``, the parameters the dynamics are linear in (with
    the lengths fixed). ``Y`` is the exact Jacobian of the inverse dynamics in ``theta`` and
    ``tau_known`` the torque with those parameters set to zero.

    Returns:
        ``(Y, tau_known)`` of shapes ``(..., 2, p)`` and ``(..., 2)``.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    q, qd, qdd = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)
    batch = jnp.broadcast_shapes(q.shape[:-1], qd.shape[:-1], qdd.shape[:-1])
    zero = jnp.zeros((len(unknowns),))

    def tau_of(theta: Array) -> Array:
        return inverse_dynamics(arm.with_parameters(unknowns, theta), q, qd, qdd)

    tau_known = tau_of(zero)
    # The map is affine in theta, so one forward-mode Jacobian is exact.
    y = jax.jacfwd(tau_of)(zero)
    return jnp.broadcast_to(y, (*batch, 2, len(unknowns))), jnp.broadcast_to(tau_known, (*batch, 2))
