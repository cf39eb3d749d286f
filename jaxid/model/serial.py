"""``SerialArm``: an N-joint serial arm (revolute and prismatic joints) as an ``AbstractArm``.

Spatial algebra in Featherstone's convention (*Rigid Body Dynamics Algorithms*, 2008; the
conventions and the recursions are in ``jaxid.model.spatial``): motion vectors ``(ω, v)``, forces
``(n, f)``, the motion transform ``X_i`` from the parent frame to link ``i``, linear in
``(cos q_i, sin q_i)`` (revolute) or ``q_i`` (prismatic) with constants computed from the static
geometry at trace time.

Every link carries the 10 standard parameters about its frame origin, ``[m, m cx, m cy, m cz,
Ixx, Ixy, Ixz, Iyy, Iyz, Izz]`` (first moment ``h = m c``, inertia tensor ``Ī`` about the origin,
tensor entries as in URDF: ``Ixy = −∫ x y dm``); its spatial inertia
``[[Ī, [h]×], [[h]×ᵀ, m 1]]`` is linear in the parameters. Joint ``i`` moves link ``i`` about or
along the unit ``axis`` (link coordinates): ``R_i = R_tree Rot(axis, q_i)`` (revolute) or
``p_i = p_tree + q_i R_tree axis`` (prismatic).

Dynamics, per joint (``n = dof``)::

    tau = M(q) q'' + C(q, q') q' + G(q) + Ia q'' + fv q' + fc (2/π) atan(slope q') + offset

with ``M`` the rigid-body mass matrix (composite rigid body algorithm), ``C q' + G`` from the
recursive Newton–Euler algorithm at ``q'' = 0`` (gravity as a base acceleration ``−g``), the
armature ``Ia`` (rotor inertia, on the diagonal of the mass matrix), viscous ``fv`` and Coulomb
``fc`` friction (the smooth sign of ``TwoLinkArm``) and a torque offset. ``mass_matrix`` includes
the armature. All of it is linear in the standard vector (``standard_names``)::

    [link 1: m1 mx1 my1 mz1 Ixx1 Ixy1 Ixz1 Iyy1 Iyz1 Izz1, link 2: …, Ia1…Ian, fv1…fvn, fc1…fcn, off1…offn]

(``mx1 = m1 cx1``, first moments). Units: kg, kg m, kg m², N m s/rad (N s/m), N m (N), m/s².

Static versus traced: the geometry (joint types, axes, parent transforms, limits) and the Coulomb
slope are static fields (hashable tuples of Python floats, compiled in as constants: a new
geometry recompiles); the inertial parameters, friction, armature, offsets and gravity are array
leaves (traced, batched, differentiated; a sweep over them compiles once). Loops over joints are
Python loops unrolled at trace time (``n`` is static); batches are ``vmap``-ped (``jnp.vectorize``),
never looped. Small solves use ``jaxid.linalg`` (no LAPACK call, see ``docs/lapack-deadlock.md``).

This module holds the class (fields, checks, names and parameter access, the dynamics methods); the
per-state kernels the methods evaluate, and their batching, are ``jaxid.model.serial_dynamics``.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..types import require_float64
from .interface import AbstractArm
from .parameters import DEFAULT_COULOMB_SLOPE, GRAVITY, validate_unknowns
from .serial_dynamics import _TWO_OVER_PI, SinCos, _evaluate

__all__ = ["SerialArm", "LINK_PARAMETERS", "JOINT_PARAMETERS", "serial_standard_names"]

#: The 10 standard parameters of a link about its frame origin (suffixed with the link number).
LINK_PARAMETERS: tuple[str, ...] = ("m", "mx", "my", "mz", "Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz")
#: The per-joint parameters: armature, viscous and Coulomb friction, torque offset (numbered).
JOINT_PARAMETERS: tuple[str, ...] = ("Ia", "fv", "fc", "off")

JOINT_TYPES = ("revolute", "prismatic")


def serial_standard_names(dof: int) -> tuple[str, ...]:
    """The standard parameter names of a ``dof``-joint ``SerialArm``, in the order of its vector:
    ``m1 mx1 … Izz1, m2 …, Ia1 … Ian, fv1 …, fc1 …, off1 …`` (``14 dof`` names)."""
    links = tuple(f"{p}{i}" for i in range(1, dof + 1) for p in LINK_PARAMETERS)
    joints = tuple(f"{p}{i}" for p in JOINT_PARAMETERS for i in range(1, dof + 1))
    return links + joints


def _as_floats(value, shape: tuple[int, ...], name: str) -> tuple:
    arr = np.asarray(value, dtype=float)
    if arr.shape != shape:
        raise ValueError(f"SerialArm.{name} must have shape {shape}, got {arr.shape}.")
    if np.isnan(arr).any():
        raise ValueError(f"SerialArm.{name} contains NaN; give numbers.")
    return tuple(arr.tolist()) if arr.ndim == 1 else tuple(tuple(r) for r in arr.tolist())


def _per_joint(value: ArrayLike, n: int, name: str) -> Array:
    arr = jnp.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = jnp.full((n,), arr)
    if arr.shape[-1:] != (n,):
        raise ValueError(f"SerialArm.{name} must be a scalar or have a trailing axis of length {n}, got {arr.shape}.")
    return arr


class SerialArm(AbstractArm):
    """A serial arm of ``n`` revolute or prismatic joints fixed to the ground (a pytree; see the module
    docstring for the conventions). Build it from a URDF with ``jaxid.model.urdf.load_arm``.

    Static fields (geometry, hashable tuples):
        joint_types: ``"revolute"`` or ``"prismatic"`` per joint.
        axes: ``(n, 3)`` unit joint axes in the link (child) frame.
        parent_rotations: ``(n, 3, 3)`` orientation of link ``i``'s frame at ``q_i = 0`` in the frame
            of link ``i − 1`` (link 0: the fixed base), columns = the link's axes.
        parent_translations: ``(n, 3)`` [m] origin of link ``i``'s frame at ``q_i = 0`` in link ``i − 1``.
        joint_names, link_names: names (from the URDF).
        position_limits: ``(n, 2)`` lower, upper [rad or m] (``±inf`` for continuous joints).
        velocity_limits, effort_limits: ``(n,)`` [rad/s or m/s], [N m or N] (``inf`` when not given).
        coulomb_slope: ``slope`` of the smooth sign [s/rad], default 100.

    Array leaves (each may carry leading batch axes; they broadcast against each other and ``q``):
        inertial: ``(*batch, n, 10)`` standard parameters per link about its frame origin.
        viscous: ``(*batch, n)`` viscous friction ``fv`` [N m s/rad].
        coulomb: ``(*batch, n)`` Coulomb friction level ``fc`` [N m].
        armature: ``(*batch, n)`` rotor inertia ``Ia`` reflected on the joint [kg m²].
        offset: ``(*batch, n)`` constant offset of the torque reading [N m].
        gravity: ``(*batch, 3)`` gravitational acceleration in the base frame [m/s²], default
            ``(0, 0, −9.81)``.

    Construction refuses float32 and checks, for concrete values, that every leaf is finite and that
    ``viscous``, ``coulomb`` and ``armature`` are non-negative (``ValueError``). Physical consistency of
    the inertial parameters is not required (an identified parameter set need not be): the URDF
    parser checks the file's values.
    """

    joint_types: tuple[str, ...] = eqx.field(static=True)
    axes: tuple[tuple[float, float, float], ...] = eqx.field(static=True)
    parent_rotations: tuple = eqx.field(static=True)
    parent_translations: tuple[tuple[float, float, float], ...] = eqx.field(static=True)
    joint_names: tuple[str, ...] = eqx.field(static=True)
    link_names: tuple[str, ...] = eqx.field(static=True)
    position_limits: tuple[tuple[float, float], ...] = eqx.field(static=True)
    velocity_limits: tuple[float, ...] = eqx.field(static=True)
    effort_limits: tuple[float, ...] = eqx.field(static=True)
    coulomb_slope: float = eqx.field(static=True)
    inertial: Float[Array, "*#batch n 10"]
    viscous: Float[Array, "*#batch n"]
    coulomb: Float[Array, "*#batch n"]
    armature: Float[Array, "*#batch n"]
    offset: Float[Array, "*#batch n"]
    gravity: Float[Array, "*#batch 3"]

    def __init__(
        self,
        joint_types: Sequence[str],
        axes: ArrayLike,
        parent_rotations: ArrayLike,
        parent_translations: ArrayLike,
        inertial: ArrayLike,
        *,
        viscous: ArrayLike = 0.0,
        coulomb: ArrayLike = 0.0,
        armature: ArrayLike = 0.0,
        offset: ArrayLike = 0.0,
        gravity: ArrayLike = (0.0, 0.0, -GRAVITY),
        coulomb_slope: float = DEFAULT_COULOMB_SLOPE,
        joint_names: Sequence[str] | None = None,
        link_names: Sequence[str] | None = None,
        position_limits: ArrayLike | None = None,
        velocity_limits: ArrayLike | None = None,
        effort_limits: ArrayLike | None = None,
    ):
        require_float64("SerialArm")
        joint_types = tuple(joint_types)
        n = len(joint_types)
        if n == 0:
            raise ValueError("SerialArm needs at least one joint.")
        for kind in joint_types:
            if kind not in JOINT_TYPES:
                raise ValueError(f"SerialArm joint type {kind!r} is not supported; use one of {list(JOINT_TYPES)}.")
        self.joint_types = joint_types
        axes_np = np.asarray(axes, dtype=float)
        if axes_np.shape != (n, 3):
            raise ValueError(f"SerialArm.axes must have shape ({n}, 3), got {axes_np.shape}.")
        norms = np.linalg.norm(axes_np, axis=1)
        if not np.all(norms > 0):
            raise ValueError(f"SerialArm.axes: joint {int(np.argmin(norms)) + 1} has a zero axis; give a direction.")
        self.axes = _as_floats(axes_np / norms[:, None], (n, 3), "axes")
        rotations = np.asarray(parent_rotations, dtype=float)
        if rotations.shape != (n, 3, 3):
            raise ValueError(f"SerialArm.parent_rotations must have shape ({n}, 3, 3), got {rotations.shape}.")
        error = np.abs(np.einsum("kji,kjl->kil", rotations, rotations) - np.eye(3)).max()
        if not error < 1e-9 or not np.all(np.linalg.det(rotations) > 0):
            raise ValueError("SerialArm.parent_rotations must be rotation matrices (orthonormal, det +1).")
        self.parent_rotations = tuple(tuple(tuple(row) for row in r) for r in rotations.tolist())
        self.parent_translations = _as_floats(parent_translations, (n, 3), "parent_translations")
        self.joint_names = tuple(joint_names) if joint_names is not None else tuple(f"joint{i + 1}" for i in range(n))
        self.link_names = tuple(link_names) if link_names is not None else tuple(f"link{i + 1}" for i in range(n))
        if len(self.joint_names) != n or len(self.link_names) != n:
            raise ValueError(f"SerialArm needs {n} joint_names and link_names.")
        inf = float("inf")
        self.position_limits = _as_floats(
            [(-inf, inf)] * n if position_limits is None else position_limits, (n, 2), "position_limits"
        )
        self.velocity_limits = _as_floats(
            [inf] * n if velocity_limits is None else velocity_limits, (n,), "velocity_limits"
        )
        self.effort_limits = _as_floats([inf] * n if effort_limits is None else effort_limits, (n,), "effort_limits")
        try:
            slope = float(coulomb_slope)
        except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
            raise ValueError(f"coulomb_slope is static (a Python float), got {coulomb_slope!r}.") from None
        if not (np.isfinite(slope) and slope > 0):
            raise ValueError(f"SerialArm.coulomb_slope must be positive and finite [s/rad], got {slope}.")
        self.coulomb_slope = slope
        self.inertial = jnp.asarray(inertial, dtype=float)
        if self.inertial.shape[-2:] != (n, 10):
            raise ValueError(
                f"SerialArm.inertial must have trailing axes ({n}, 10) (10 standard parameters per link), "
                f"got {self.inertial.shape}."
            )
        self.viscous = _per_joint(viscous, n, "viscous")
        self.coulomb = _per_joint(coulomb, n, "coulomb")
        self.armature = _per_joint(armature, n, "armature")
        self.offset = _per_joint(offset, n, "offset")
        self.gravity = jnp.asarray(gravity, dtype=float)
        if self.gravity.shape[-1:] != (3,):
            raise ValueError(f"SerialArm.gravity must have a trailing axis of length 3, got {self.gravity.shape}.")

    def __check_init__(self) -> None:
        self._check_values()

    def _check_values(self) -> None:
        """Concrete leaves finite; ``viscous``, ``coulomb``, ``armature`` non-negative (``ValueError``)."""
        for name in ("inertial", "viscous", "coulomb", "armature", "offset", "gravity"):
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                continue
            arr = np.asarray(value)
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"SerialArm.{name} contains NaN or inf; give finite values.")
            if name in ("viscous", "coulomb", "armature") and not np.all(arr >= 0):
                joint = int(np.argwhere(~(arr >= 0))[0][-1]) + 1
                raise ValueError(f"SerialArm.{name} must be non-negative (joint {joint}), got {arr.tolist()}.")

    # -- names and parameters ------------------------------------------------------------------
    @property
    def dof(self) -> int:
        """Number of joints ``n``."""
        return len(self.joint_types)

    @property
    def standard_names(self) -> tuple[str, ...]:
        """``serial_standard_names(dof)``: ``14 n`` names."""
        return serial_standard_names(self.dof)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The named parameters (``get``/``with_parameters``): the standard names."""
        return self.standard_names

    @property
    def regressor_parameters(self) -> tuple[str, ...]:
        """All standard parameters: the inverse dynamics are linear in each of them."""
        return self.standard_names

    def standard_parameters(self) -> Float[Array, "*batch s"]:
        """The standard vector ``(*batch, 14 n)`` in ``standard_names`` order."""
        n = self.dof
        batch = jnp.broadcast_shapes(
            self.inertial.shape[:-2], *(getattr(self, f).shape[:-1] for f in ("armature", "viscous", "coulomb"))
        )
        batch = jnp.broadcast_shapes(batch, self.offset.shape[:-1])
        parts = [jnp.broadcast_to(self.inertial, (*batch, n, 10)).reshape(*batch, 10 * n)]
        parts += [jnp.broadcast_to(getattr(self, f), (*batch, n)) for f in ("armature", "viscous", "coulomb", "offset")]
        return jnp.concatenate(parts, axis=-1)

    def with_standard_parameters(self, standard: Float[ArrayLike, "*batch s"]) -> SerialArm:
        """The arm whose standard vector is ``standard`` (geometry and gravity kept). Traceable;
        concrete values are checked as in the constructor (``ValueError``)."""
        theta = jnp.asarray(standard, dtype=float)
        n = self.dof
        if theta.shape[-1:] != (14 * n,):
            raise ValueError(
                f"standard parameters must have a trailing axis of length {14 * n} (standard_names), got {theta.shape}."
            )
        fields = _split(theta, n)
        arm = eqx.tree_at(lambda a: (a.inertial, a.armature, a.viscous, a.coulomb, a.offset), self, fields)
        arm._check_values()
        return arm

    def get(self, name: str) -> Array:
        """The value of one standard parameter, e.g. ``"m3"`` or ``"fv1"`` (batch axes kept)."""
        validate_unknowns((name,), self.standard_names)
        return self.standard_parameters()[..., self.standard_names.index(name)]

    def with_parameters(self, names: Sequence[str], values: Float[ArrayLike, "*batch p"]) -> SerialArm:
        """A copy with the standard parameters ``names`` set to ``values`` (trailing axis ``len(names)``).

        Traceable; batch axes of ``values`` broadcast against the arm's. Raises ``ValueError`` for an
        unknown name or a wrong trailing axis, and for concrete values the constructor rejects.
        """
        names = validate_unknowns(names, self.standard_names)
        values = jnp.asarray(values, dtype=float)
        if values.shape[-1:] != (len(names),):
            raise ValueError(
                f"values must have a trailing axis of length {len(names)} for {list(names)}, got {values.shape}."
            )
        theta = self.standard_parameters()
        batch = jnp.broadcast_shapes(theta.shape[:-1], values.shape[:-1])
        theta = jnp.broadcast_to(theta, (*batch, theta.shape[-1]))
        index = np.array([self.standard_names.index(n) for n in names])
        theta = theta.at[..., index].set(jnp.broadcast_to(values, (*batch, len(names))))
        return self.with_standard_parameters(theta)

    # -- dynamics ------------------------------------------------------------------------------
    def mass_matrix(self, q: Float[ArrayLike, "*b n"]) -> Float[Array, "... n n"]:
        """``M(q)`` [kg m²] by the composite rigid body algorithm, armature on the diagonal; ``(..., n, n)``."""
        return _evaluate(self, "mass", None, self._joint_vector(q, "q"))

    def inverse_dynamics(
        self,
        q: Float[ArrayLike, "*b n"],
        qd: Float[ArrayLike, "*b n"],
        qdd: Float[ArrayLike, "*b n"],
        *,
        sincos: SinCos | None = None,
    ) -> Float[Array, "... n"]:
        """Joint torque reading [N m] by recursive Newton–Euler plus armature, friction and offset.

        ``sincos(q) -> (sin q, cos q)`` on the ``(n,)`` angles replaces ``jnp.sin``/``jnp.cos``.
        """
        states = (self._joint_vector(q, "q"), self._joint_vector(qd, "qd"), self._joint_vector(qdd, "qdd"))
        return _evaluate(self, "inverse", sincos, *states)

    def forward_dynamics(
        self,
        q: Float[ArrayLike, "*b n"],
        qd: Float[ArrayLike, "*b n"],
        tau: Float[ArrayLike, "*b n"],
        *,
        sincos: SinCos | None = None,
    ) -> Float[Array, "... n"]:
        """``q''`` from ``M q'' = tau − offset − C q' − G − friction`` by an unrolled Cholesky solve
        (``jaxid.linalg``, no LAPACK). A mass matrix that is not positive definite gives ``nan``."""
        states = (self._joint_vector(q, "q"), self._joint_vector(qd, "qd"), self._joint_vector(tau, "tau"))
        return _evaluate(self, "forward", sincos, *states)

    def bias_forces(self, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
        """``C(q, q') q' + G(q)`` [N m]: Newton–Euler at ``q'' = 0`` (no friction, no offset)."""
        return _evaluate(self, "bias", None, self._joint_vector(q, "q"), self._joint_vector(qd, "qd"))

    def coriolis_forces(self, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
        """``C(q, q') q'`` [N m]: Newton–Euler at ``q'' = 0`` without gravity."""
        return _evaluate(self, "coriolis", None, self._joint_vector(q, "q"), self._joint_vector(qd, "qd"))

    def gravity_torque(self, q: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
        """``G(q)`` [N m]: Newton–Euler at rest."""
        return _evaluate(self, "gravity", None, self._joint_vector(q, "q"))

    def friction_torque(self, qd: Float[ArrayLike, "*b n"]) -> Float[Array, "... n"]:
        """``fv q' + fc (2/π) atan(slope q')`` [N m] (no offset)."""
        qd = self._joint_vector(qd, "qd")
        return self.viscous * qd + self.coulomb * _TWO_OVER_PI * jnp.arctan(self.coulomb_slope * qd)

    def potential_energy(self, q: Float[ArrayLike, "*b n"]) -> Float[Array, "..."]:
        """Gravitational potential energy [J], ``−Σ g · (m_i p_i + R_i h_i)``; zero at the base origin."""
        return _evaluate(self, "potential", None, self._joint_vector(q, "q"))

    def standard_regressor(
        self, q: Float[ArrayLike, "*b n"], qd: Float[ArrayLike, "*b n"], qdd: Float[ArrayLike, "*b n"]
    ) -> Float[Array, "... n s"]:
        """``Y (..., n, 14 n)`` with ``inverse_dynamics == Y @ standard_parameters()``: the regressor
        recursion of ``jaxid.model.spatial.rnea_regressor`` for the links, evaluated for the whole
        batch at once (``rnea_regressor_batched``), diagonal columns for the joint terms (exact; equal to the Jacobian of the inverse dynamics in the standard vector,
        tested). Depends on the geometry, gravity and Coulomb slope only."""
        states = (self._joint_vector(q, "q"), self._joint_vector(qd, "qd"), self._joint_vector(qdd, "qdd"))
        return _evaluate(self, "regressor", None, *states)

    # -- helpers -------------------------------------------------------------------------------
    def _joint_vector(self, x: ArrayLike, name: str) -> Array:
        arr = jnp.asarray(x, dtype=float)
        if arr.shape[-1:] != (self.dof,):
            raise ValueError(f"{name} must have a trailing axis of length {self.dof} (one per joint), got {arr.shape}.")
        return arr


def _split(theta: Array, n: int) -> tuple[Array, Array, Array, Array, Array]:
    """Standard vector ``(..., 14 n)`` → inertial ``(..., n, 10)``, armature, viscous, Coulomb, offset."""
    link = theta[..., : 10 * n].reshape(*theta.shape[:-1], n, 10)
    rest = [theta[..., 10 * n + k * n : 10 * n + (k + 1) * n] for k in range(4)]
    return (link, *rest)
