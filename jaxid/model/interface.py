"""The arm interface: what the simulators, filters and estimators need from an arm model."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from ._two_link import SinCos
from .parameters import validate_unknowns

__all__ = ["AbstractArm"]


class AbstractArm(eqx.Module):
    """What the rest of jaxid needs from an arm model (a pytree whose parameters are array leaves).

    Subclasses give ``dof`` (number of joints ``n``), ``parameter_names`` (the named scalar
    parameters ``get``/``with_parameters`` accept), ``regressor_parameters`` (those of them the
    inverse dynamics are linear in: ``regressor`` accepts these), ``standard_names`` (the parameters the inverse
    dynamics are linear in, in the order of ``standard_parameters``) and the dynamics below. Shapes:
    ``q, qd, qdd, tau`` are ``(..., n)``. Inverse dynamics return the joint torque *reading*
    ``tau = D(q) q'' + c(q, q') + g(q) + friction(q') + offset``. The defaults of
    ``forward_dynamics``, ``holding_torque`` and ``kinetic_energy`` follow from
    ``mass_matrix`` and ``inverse_dynamics``; a subclass overrides them with faster forms.
    """

    dof: eqx.AbstractClassVar[int]
    parameter_names: eqx.AbstractClassVar[tuple[str, ...]]
    regressor_parameters: eqx.AbstractClassVar[tuple[str, ...]]
    standard_names: eqx.AbstractClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def get(self, name: str) -> Array:
        """The value of one named parameter (one of ``parameter_names``)."""

    @abc.abstractmethod
    def with_parameters(self, names: Sequence[str], values: ArrayLike) -> AbstractArm:
        """A copy with the named parameters replaced by ``values`` (trailing axis ``len(names)``)."""

    def parameter_vector(self, names: Sequence[str]) -> Array:
        """The values of ``names`` stacked on a trailing axis."""
        names = validate_unknowns(names, self.parameter_names)
        return jnp.stack([self.get(n) for n in names], axis=-1)

    @abc.abstractmethod
    def mass_matrix(self, q: ArrayLike) -> Array:
        """Inertia matrix ``D(q)`` [kg m²], shape ``(..., n, n)``."""

    @abc.abstractmethod
    def inverse_dynamics(self, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike, *, sincos: SinCos | None = None) -> Array:
        """Joint torques [N m] that produce ``qdd`` at ``(q, qd)``."""

    @abc.abstractmethod
    def potential_energy(self, q: ArrayLike) -> Array:
        """Gravitational potential energy [J]."""

    @abc.abstractmethod
    def standard_parameters(self) -> Array:
        """The standard parameters, shape ``(..., len(standard_names))``."""

    @abc.abstractmethod
    def standard_regressor(self, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike) -> Array:
        """``Y (..., n, s)`` with ``inverse_dynamics == Y @ standard_parameters()`` (known geometry from ``self``)."""

    def forward_dynamics(self, q: ArrayLike, qd: ArrayLike, tau: ArrayLike, *, sincos: SinCos | None = None) -> Array:
        """Joint accelerations [rad/s²]: ``D(q)⁻¹ (tau − inverse_dynamics(q, qd, 0))``."""
        q, qd, tau = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau)
        bias = self.inverse_dynamics(q, qd, jnp.zeros_like(qd), sincos=sincos)
        return jnp.linalg.solve(self.mass_matrix(q), (tau - bias)[..., None])[..., 0]

    def holding_torque(self, q0: ArrayLike) -> Array:
        """The torque reading that holds the arm at rest at ``q0``: ``inverse_dynamics(q0, 0, 0)``."""
        q0 = jnp.asarray(q0, dtype=float)
        zero = jnp.zeros_like(q0)
        return self.inverse_dynamics(q0, zero, zero)

    def kinetic_energy(self, q: ArrayLike, qd: ArrayLike) -> Array:
        """Kinetic energy ``½ q'ᵀ D(q) q'`` [J]."""
        qd = jnp.asarray(qd)
        return 0.5 * jnp.einsum("...i,...ij,...j->...", qd, self.mass_matrix(q), qd)

    def with_standard_parameters(self, standard: ArrayLike) -> AbstractArm:
        """The arm whose standard parameters are ``standard`` (where the known geometry allows)."""
        raise NotImplementedError(f"{type(self).__name__} cannot map standard parameters back to an arm.")
