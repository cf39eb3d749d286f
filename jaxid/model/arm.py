"""The planar two-link arm ``TwoLinkArm`` (an ``AbstractArm``): fields, checks, parameter access.

The field table, value rules and optional-term bookkeeping it uses are ``jaxid.model.arm_fields``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..types import require_float64
from . import _two_link as eq
from ._two_link import OPTIONAL_TERMS, SinCos
from .arm_fields import (
    _ARRAY_FIELDS,
    _CHECKS,
    _FIELDS,
    _TERM_FIELDS,
    _TERM_OF,
    _copy_with,
    _pair,
    _static_slope,
    _terms,
    _which,
)
from .interface import AbstractArm
from .parameters import (
    DEFAULT_COULOMB_SLOPE,
    GRAVITY,
    PARAMETER_NAMES,
    REGRESSOR_PARAMETERS,
    STANDARD_NAMES,
    validate_unknowns,
)

__all__ = ["TwoLinkArm"]


class TwoLinkArm(AbstractArm):
    """Physical parameters of a planar two-link arm (a pytree of arrays; batch it with ``vmap``).

    Dynamics (angles from the downward vertical, ``q2`` relative to link 1; DESIGN.md §2)::

        tau = D(q) q'' + C(q, q') q' + G(q) + fv q' + fc (2/π) atan(coulomb_slope q') + offset

    with the rigid-body ``D, C, G`` of the module docstring plus the rotor inertia behind the gear
    ratio exactly as the DFKI lab model: ``d11 += (gr² + 1) Ir``, ``d12 += −gr Ir``,
    ``d22 += gr² Ir`` (the kinetic energy ``½ Ir (gr q1')² + ½ Ir (q1' − gr q2')²``).

    Attributes:
        masses: ``(m1, m2)`` link masses [kg].
        lengths: ``(l1, l2)`` joint-to-joint distances [m] (``l2`` only enters kinematics).
        com: ``(r1, r2)`` joint-to-centre-of-mass distances [m].
        inertias: ``(J1, J2)`` link inertias about the centre of mass [kg m²]. Only
            ``I_i = J_i + m_i r_i² ≥ 0`` is required: an identified parameter set need not be
            physically consistent (the lab's double pendulum has ``J2 < 0``).
        friction: ``(fv1, fv2)`` viscous joint friction [N m s/rad]. Mandatory for a steady state.
        gravity: gravitational acceleration [m/s²].
        coulomb: ``(fc1, fc2)`` Coulomb friction levels [N m] (the limit of the smooth sign);
            the lab's ``cf atan(100 q')`` is ``fc = cf π/2``. Default 0.
        rotor_inertia: ``Ir`` [kg m²], the motor rotor inertia. Default 0.
        gear_ratio: ``gr`` [-], known (not a named parameter). Default 1.
        torque_offset: ``(off1, off2)`` [N m], constant offsets of the torque reading. Default 0.
        coulomb_slope: static, ``slope`` of the smooth sign [s/rad]. Default 100 (the lab's).
        active_terms: static, which optional terms the dynamics evaluate, a sorted subset of
            ``("coulomb", "rotor", "offset")``. Set automatically: a term is active when its values
            are non-zero or traced at construction, when ``with_parameters``/``replace`` set one
            of its parameters, or when named in the ``active_terms`` argument (to compile once for
            a sweep that includes zero). An inactive term is not evaluated at all: a rigid arm
            runs the rigid-body arithmetic bit-for-bit at its cost. Change these values with
            ``with_parameters``/``replace``, not with ``eqx.tree_at`` (which cannot switch a term on).

    Every array field may carry leading batch axes (e.g. ``masses`` of shape ``(B, 2)``,
    ``rotor_inertia`` of shape ``(B,)``). Construction checks shapes and, for concrete values,
    finiteness and signs (``ValueError``); it refuses float32 (``jax_enable_x64`` off). With the
    defaults the arithmetic of every dynamics function is bit-for-bit the rigid-body model's.
    """

    dof: ClassVar[int] = 2
    parameter_names: ClassVar[tuple[str, ...]] = PARAMETER_NAMES
    regressor_parameters: ClassVar[tuple[str, ...]] = REGRESSOR_PARAMETERS
    standard_names: ClassVar[tuple[str, ...]] = STANDARD_NAMES

    masses: Float[Array, "*batch 2"]
    lengths: Float[Array, "*batch 2"]
    com: Float[Array, "*batch 2"]
    inertias: Float[Array, "*batch 2"]
    friction: Float[Array, "*batch 2"]
    gravity: Float[Array, "*batch"]
    coulomb: Float[Array, "*batch 2"]
    rotor_inertia: Float[Array, "*batch"]
    gear_ratio: Float[Array, "*batch"]
    torque_offset: Float[Array, "*batch 2"]
    coulomb_slope: float = eqx.field(static=True)
    active_terms: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        masses: ArrayLike,
        lengths: ArrayLike,
        com: ArrayLike,
        inertias: ArrayLike,
        friction: ArrayLike = (5.0, 2.0),
        gravity: ArrayLike = GRAVITY,
        coulomb: ArrayLike = (0.0, 0.0),
        rotor_inertia: ArrayLike = 0.0,
        gear_ratio: ArrayLike = 1.0,
        torque_offset: ArrayLike = (0.0, 0.0),
        coulomb_slope: float = DEFAULT_COULOMB_SLOPE,
        active_terms: Sequence[str] = (),
    ):
        require_float64("TwoLinkArm")
        self.masses = _pair(masses, "masses")
        self.lengths = _pair(lengths, "lengths")
        self.com = _pair(com, "com")
        self.inertias = _pair(inertias, "inertias")
        self.friction = _pair(friction, "friction")
        self.gravity = jnp.asarray(gravity, dtype=float)
        self.coulomb = _pair(coulomb, "coulomb")
        self.rotor_inertia = jnp.asarray(rotor_inertia, dtype=float)
        self.gear_ratio = jnp.asarray(gear_ratio, dtype=float)
        self.torque_offset = _pair(torque_offset, "torque_offset")
        self.coulomb_slope = _static_slope(coulomb_slope)
        self.active_terms = _terms(self, active_terms)

    def __check_init__(self) -> None:
        # Equinox runs this after __init__ (also for subclasses); with_parameters and replace
        # call _check_values themselves (eqx.tree_at does not construct).
        self._check_values()

    def _check_values(self) -> None:
        """The arm's one set of value rules, for concrete values (``ValueError`` naming the field).

        Every field finite; masses, lengths and gear ratio positive; centre-of-mass distances,
        friction, Coulomb levels and rotor inertia non-negative; the inertia about each joint
        ``J_i + m_i r_i² >= 0``. Traced values (inside ``jit``/``vmap``/``grad``) are skipped:
        they are the caller's responsibility.
        """
        for name, (word, ok) in _CHECKS.items():
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                continue
            arr = np.asarray(value)
            finite = np.isfinite(arr)
            if not np.all(finite):
                raise ValueError(
                    f"TwoLinkArm.{name} contains NaN or inf{_which(name, finite)}: {arr.tolist()}; give finite values."
                )
            good = ok(arr)
            if not np.all(good):
                raise ValueError(
                    f"TwoLinkArm.{name} must be {word} (SI units){_which(name, good)}, got {arr.tolist()}."
                )
        fields = (self.inertias, self.masses, self.com)
        if not any(isinstance(f, jax.core.Tracer) for f in fields):
            j, m, r = (np.asarray(f) for f in fields)
            about_joint = j + m * r**2
            if not np.all(about_joint >= 0):
                link = 1 + int(np.argwhere(~(about_joint >= 0))[0][-1])
                raise ValueError(
                    f"TwoLinkArm.inertias: the inertias about the joints J_i + m_i r_i² = {about_joint.tolist()} "
                    f"must be non-negative; raise J{link} so that J{link} + m{link} r{link}² >= 0 (J itself may be "
                    "negative only for a fitted, not physically consistent parameter set)."
                )

    # -- parameter access ----------------------------------------------------------------------
    def get(self, name: str) -> Array:
        """The value of one named parameter (see ``PARAMETER_NAMES``)."""
        validate_unknowns((name,))
        field, index = _FIELDS[name]
        value = getattr(self, field)
        return value if index is None else value[..., index]

    def parameter_vector(self, names: Sequence[str]) -> Float[Array, "*batch p"]:
        """The values of ``names`` stacked on a trailing axis."""
        names = validate_unknowns(names)
        return jnp.stack([self.get(n) for n in names], axis=-1)

    def with_parameters(self, names: Sequence[str], values: Float[ArrayLike, "*batch p"]) -> TwoLinkArm:
        """A copy with the parameters ``names`` replaced by ``values`` (trailing axis ``p``).

        Traceable: ``values`` may be a tracer (used by estimators and the Cramér–Rao bound); traced
        values are not range-checked (an optimiser inside ``jit`` may step outside). Concrete
        values are checked as in the constructor (``ValueError``, e.g. ``m1 = -1``).
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
            leaf = getattr(arm, field)
            if index is None:
                shape = jnp.broadcast_shapes(leaf.shape, values[..., i].shape)
                new = jnp.broadcast_to(values[..., i], shape).astype(leaf.dtype)
            else:
                new = leaf.at[..., index].set(values[..., i])
            arm = eqx.tree_at(lambda a, field=field: getattr(a, field), arm, new)
        switched = {_TERM_OF[n] for n in names if n in _TERM_OF}
        if not switched <= set(arm.active_terms):
            arm = _copy_with(
                arm, active_terms=tuple(t for t in OPTIONAL_TERMS if t in switched | set(arm.active_terms))
            )
        arm._check_values()
        return arm

    def replace(self, **kwargs: ArrayLike) -> TwoLinkArm:
        """A copy with fields or named parameters replaced, e.g. ``arm.replace(m2=2.0, gear_ratio=6.0)``.

        Fields: ``masses, lengths, com, inertias, friction, gravity, coulomb, rotor_inertia,
        gear_ratio, torque_offset, coulomb_slope, active_terms``; parameters: ``PARAMETER_NAMES``.
        Concrete values are checked as in the constructor (``ValueError``). Active optional terms
        stay active (unless ``active_terms`` is given); setting a Coulomb, rotor or offset value
        switches its term on.
        """
        fields = {k: v for k, v in kwargs.items() if k not in _FIELDS}
        params = {k: v for k, v in kwargs.items() if k in _FIELDS}
        for name in fields:
            if name not in (*_ARRAY_FIELDS, "coulomb_slope", "active_terms"):
                raise ValueError(
                    f"TwoLinkArm has no field or parameter {name!r}; use one of {list(PARAMETER_NAMES)} "
                    f"or the fields {[*_ARRAY_FIELDS, 'coulomb_slope', 'active_terms']}."
                )
        arm = self
        if fields:
            current = {f: getattr(self, f) for f in (*_ARRAY_FIELDS, "coulomb_slope", "active_terms")}
            switched = {t for t, f in _TERM_FIELDS.items() if f in fields}
            current["active_terms"] = tuple(set(self.active_terms) | switched)
            arm = TwoLinkArm(**{**current, **fields})
        if params:
            arm = arm.with_parameters(
                tuple(params), jnp.stack([jnp.asarray(v, dtype=float) for v in params.values()], -1)
            )
        return arm

    # -- dynamics (the module-level functions in jaxid.model call these) ------------------------
    def mass_matrix(self, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "... 2 2"]:
        q = jnp.asarray(q)
        d11, d12, d22 = jnp.broadcast_arrays(*eq.mass_entries(self, jnp.cos(q[..., 1])))
        return jnp.stack([jnp.stack([d11, d12], -1), jnp.stack([d12, d22], -1)], -2)

    def coriolis_forces(self, q: Float[ArrayLike, "*b 2"], qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "... 2"]:
        q, qd = jnp.asarray(q), jnp.asarray(qd)
        return eq.coriolis(eq.coupling(self, jnp.sin(q[..., 1])), qd)

    def gravity_torque(self, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "... 2"]:
        s1, _, _, _, s12 = eq.trig(jnp.asarray(q))
        return eq.gravity(self, s1, s12)

    def friction_torque(self, qd: Float[ArrayLike, "*b 2"]) -> Float[Array, "... 2"]:
        return eq.friction(self, jnp.asarray(qd))

    def forward_dynamics(
        self,
        q: Float[ArrayLike, "*b 2"],
        qd: Float[ArrayLike, "*b 2"],
        tau: Float[ArrayLike, "*b 2"],
        *,
        sincos: SinCos | None = None,
    ) -> Float[Array, "... 2"]:
        return eq.forward(self, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau), sincos)

    def inverse_dynamics(
        self,
        q: Float[ArrayLike, "*b 2"],
        qd: Float[ArrayLike, "*b 2"],
        qdd: Float[ArrayLike, "*b 2"],
        *,
        sincos: SinCos | None = None,
    ) -> Float[Array, "... 2"]:
        return eq.inverse(self, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd), sincos)

    def potential_energy(self, q: Float[ArrayLike, "*b 2"]) -> Float[Array, "..."]:
        return eq.potential(self, jnp.asarray(q))

    def standard_parameters(self) -> Float[Array, "*batch 13"]:
        return eq.standard_vector(self)

    def standard_regressor(
        self,
        q: Float[ArrayLike, "*b 2"],
        qd: Float[ArrayLike, "*b 2"],
        qdd: Float[ArrayLike, "*b 2"],
        *,
        sincos: SinCos | None = None,
    ) -> Float[Array, "... 2 13"]:
        return eq.standard_regressor(self, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd), sincos)

    def with_standard_parameters(self, standard: Float[ArrayLike, "*batch 13"]) -> TwoLinkArm:
        """The arm whose standard parameters are ``standard`` (lengths, gravity, gear ratio kept).

        ``r_i = (m_i r_i) / m_i`` and ``J_i = I_i − m_i r_i²``; needs ``m_i > 0``. Traceable. For
        concrete values, raises ``ValueError`` unless ``m_i > 0``, ``m_i r_i ≥ 0`` and the checks of
        the constructor pass (``J_i`` may come out negative: see ``inertias``).
        """
        phi = jnp.asarray(standard, dtype=float)
        if phi.shape[-1:] != (len(STANDARD_NAMES),):
            raise ValueError(
                f"standard parameters must have a trailing axis of length {len(STANDARD_NAMES)} "
                f"({list(STANDARD_NAMES)}), got shape {phi.shape}."
            )
        i1, m1r1, m1, i2, m2r2, m2 = (phi[..., k] for k in range(6))
        concrete = not isinstance(phi, jax.core.Tracer)
        if concrete:
            for name, value, ok in (
                ("m1", m1, m1 > 0),
                ("m2", m2, m2 > 0),
                ("m1r1", m1r1, m1r1 >= 0),
                ("m2r2", m2r2, m2r2 >= 0),
            ):
                if not np.all(np.asarray(ok)):
                    raise ValueError(
                        f"standard parameter {name} = {value} cannot be mapped back to an arm (needs m > 0, m r ≥ 0)."
                    )
        r1, r2 = m1r1 / m1, m2r2 / m2
        j = jnp.stack([i1 - m1r1 * r1, i2 - m2r2 * r2], -1)
        names = ("m1", "m2", "r1", "r2", "J1", "J2", "Ir", "fv1", "fv2", "fc1", "fc2", "off1", "off2")
        values = jnp.stack([m1, m2, r1, r2, j[..., 0], j[..., 1], *(phi[..., k] for k in range(6, 13))], -1)
        return self.with_parameters(names, values)
