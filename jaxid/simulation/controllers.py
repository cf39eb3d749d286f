"""Joint controllers for closed-loop simulation, and their default gains.

A controller (``AbstractController``) maps the time, the (measured or true) joint state and the
reference to a joint torque before saturation; ``jaxid.simulation.closed_loop.simulate_closed_loop`` calls it.

- ``PDController``: PD on the tracking error, optionally with the feed-forward inverse dynamics of a
  nominal model at the reference.
- ``ComputedTorque``: inverse dynamics of a nominal model (which may differ from the true arm).
- ``OpenLoop``: a torque table played back without feedback.

Default gains (``PDController.tuned``, ``ComputedTorque.tuned``): every joint's closed loop a
critically damped second-order system of natural frequency ``DEFAULT_FREQUENCY = 10 Hz`` (computed
torque: ``kp = ω²``, ``kd = 2ω``; PD: the same times the joint's effective inertia ``1 / (M⁻¹)_jj`` at
the reference's mean posture, which bounds every coupled mode by ``√n · 10 Hz``).

Controllers are pure ``equinox`` modules; their gains and models are array leaves (a sweep over
gains does not recompile), ``OpenLoop.sample_step`` is static.
"""

from __future__ import annotations

import abc
import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..excitation.fourier import FourierTrajectory
from ..linalg import cholesky, solve_triangular
from ..model.interface import AbstractArm

__all__ = [
    "DEFAULT_FREQUENCY",
    "DEFAULT_DAMPING_RATIO",
    "AbstractController",
    "PDController",
    "ComputedTorque",
    "OpenLoop",
]

#: Default closed-loop natural frequency of every joint [Hz] (``PDController.tuned``, ``ComputedTorque.tuned``).
DEFAULT_FREQUENCY = 10.0
#: Default closed-loop damping ratio of every joint (critical damping).
DEFAULT_DAMPING_RATIO = 1.0


class AbstractController(eqx.Module):
    """A joint controller: ``controller(t, q, q', q_ref, q'_ref, q''_ref) -> tau`` (all ``(n,)``, ``t`` a
    scalar [s]), before saturation. Pure; its numbers are array leaves."""

    @property
    @abc.abstractmethod
    def dof(self) -> int:
        """Number of joints it drives."""

    @abc.abstractmethod
    def __call__(self, t, q, qd, q_reference, qd_reference, qdd_reference) -> Array:
        """Joint torque [N m] at time ``t`` from the (measured or true) state and the reference."""


def _rad_per_s(frequency: float) -> float:
    try:
        frequency = float(frequency)
    except (TypeError, ValueError):
        raise ValueError(f"frequency must be a number [Hz], got {frequency!r}.") from None
    if not (np.isfinite(frequency) and frequency > 0):
        raise ValueError(f"frequency must be positive and finite [Hz], got {frequency}.")
    return 2 * math.pi * frequency


def _gain(value: ArrayLike, name: str) -> Array:
    arr = jnp.asarray(value, dtype=float)
    if arr.ndim < 1:
        raise ValueError(f"{name} must have a trailing axis of length n (one gain per joint), got shape {arr.shape}.")
    return arr


class PDController(AbstractController):
    """``tau = kp ⊙ e + kd ⊙ e' (+ ID_model(q_ref, q'_ref, q''_ref))`` with ``e = q_ref − q``.

    Attributes:
        kp: ``(n,)`` stiffness [N m/rad].
        kd: ``(n,)`` damping [N m s/rad].
        model: nominal arm for the feed-forward inverse dynamics at the reference (its friction and
            offset included), or ``None`` for a pure PD.
    """

    kp: Float[Array, "*batch n"]
    kd: Float[Array, "*batch n"]
    model: AbstractArm | None = None

    def __init__(self, kp: Float[ArrayLike, "*batch n"], kd: Float[ArrayLike, "*batch n"], model=None):
        self.kp = _gain(kp, "kp")
        self.kd = _gain(kd, "kd")
        self.model = model
        if self.kp.shape[-1:] != self.kd.shape[-1:] or (model is not None and model.dof != self.kp.shape[-1]):
            raise ValueError(
                f"PDController: kp {self.kp.shape} and kd {self.kd.shape} need one gain per joint"
                + ("" if model is None else f" of the model ({model.dof} joints)")
                + "."
            )

    @property
    def dof(self) -> int:
        return self.kp.shape[-1]

    @classmethod
    def tuned(
        cls,
        model: AbstractArm,
        reference: FourierTrajectory,
        *,
        frequency: float = DEFAULT_FREQUENCY,
        damping_ratio: float = DEFAULT_DAMPING_RATIO,
        feedforward: bool = True,
    ) -> PDController:
        """The default gains rule: ``kp_j = m_j ω²``, ``kd_j = 2 ζ ω m_j`` with ``m_j = 1 / (M⁻¹(q̄))_jj`` the
        effective inertia of joint ``j`` when the other joints are free, ``M`` the model's mass matrix
        (armature included) at the reference's mean posture ``q̄ = reference.offset``,
        ``ω = 2π · frequency``, ``ζ = damping_ratio``. Driven alone (the other joints unactuated), each
        joint then has the closed-loop poles of ``s² + 2ζω s + ω²`` (a double pole at ``−ω`` for ``ζ = 1``).

        Coupled, the closed-loop natural frequencies at ``q̄`` are ``ω √λ`` with ``λ`` the eigenvalues of
        ``M⁻¹ diag(m)``, similar to a unit-diagonal positive-definite matrix: ``0 < λ < n``, so no mode
        is faster than ``√n · frequency`` (what keeps a 1 kHz zero-order hold stable at 10 Hz). The
        locked-joint alternative ``m_j = M_jj`` has no such bound: on the Panda URDF (no rotor
        inertia) it puts a mode at ``8.8 ×`` the design frequency, unstable at 1 kHz.

        With ``feedforward`` the model's inverse dynamics at the reference are added (so gravity and
        the reference's own motion need no error). Computed once, host-side or traced (the model's
        unrolled Cholesky inverse, no LAPACK). Raises ``ValueError`` for a non-positive frequency or
        damping ratio.
        """
        omega = _rad_per_s(frequency)
        if not damping_ratio > 0:
            raise ValueError(f"damping_ratio must be positive, got {damping_ratio!r}.")
        n = model.dof
        lower = cholesky(model.mass_matrix(reference.offset))
        # (M⁻¹)_jj = ‖L⁻¹ e_j‖² with M = L Lᵀ.
        columns = solve_triangular(lower, jnp.eye(n), lower=True)
        inertia = 1.0 / jnp.sum(columns**2, axis=0)
        return cls(inertia * omega**2, inertia * (2 * damping_ratio * omega), model if feedforward else None)

    def __call__(self, t, q, qd, q_reference, qd_reference, qdd_reference) -> Array:
        tau = self.kp * (q_reference - q) + self.kd * (qd_reference - qd)
        if self.model is not None:
            tau = tau + self.model.inverse_dynamics(q_reference, qd_reference, qdd_reference)
        return tau


class ComputedTorque(AbstractController):
    """``tau = M̂(q) (q''_ref + kd ⊙ e' + kp ⊙ e) + ĥ(q, q')``, ``e = q_ref − q``, with ``M̂`` and ``ĥ`` the
    mass matrix and the remaining terms (Coriolis, gravity, friction, offset) of the nominal ``model``.

    Evaluated as one inverse dynamics call ``ID_model(q, q', q''_ref + kd e' + kp e)`` (the same thing:
    the inverse dynamics are ``M q'' + h``). With the true arm as model the joint errors obey
    ``e'' + kd e' + kp e = 0`` exactly (continuous-time control, ``control="stage"``).

    Attributes:
        kp: ``(n,)`` [1/s²]; kd: ``(n,)`` [1/s] (acceleration gains: independent of the inertia).
        model: the nominal arm (may differ from the true one).
    """

    kp: Float[Array, "*batch n"]
    kd: Float[Array, "*batch n"]
    model: AbstractArm

    def __init__(self, kp: Float[ArrayLike, "*batch n"], kd: Float[ArrayLike, "*batch n"], model: AbstractArm):
        self.kp = _gain(kp, "kp")
        self.kd = _gain(kd, "kd")
        self.model = model
        if self.kp.shape[-1:] != (model.dof,) or self.kd.shape[-1:] != (model.dof,):
            raise ValueError(
                f"ComputedTorque: kp {self.kp.shape} and kd {self.kd.shape} need one gain per joint of the model "
                f"({model.dof} joints)."
            )

    @property
    def dof(self) -> int:
        return self.kp.shape[-1]

    @classmethod
    def tuned(
        cls,
        model: AbstractArm,
        *,
        frequency: float = DEFAULT_FREQUENCY,
        damping_ratio: float = DEFAULT_DAMPING_RATIO,
    ) -> ComputedTorque:
        """The default gains rule: ``kp = ω²``, ``kd = 2 ζ ω`` on every joint (``ω = 2π · frequency``):
        each joint's error obeys ``e'' + 2ζω e' + ω² e = 0`` when the model is exact."""
        omega = _rad_per_s(frequency)
        if not damping_ratio > 0:
            raise ValueError(f"damping_ratio must be positive, got {damping_ratio!r}.")
        n = model.dof
        return cls(jnp.full((n,), omega**2), jnp.full((n,), 2 * damping_ratio * omega), model)

    def __call__(self, t, q, qd, q_reference, qd_reference, qdd_reference) -> Array:
        command = qdd_reference + self.kd * (qd_reference - qd) + self.kp * (q_reference - q)
        return self.model.inverse_dynamics(q, qd, command)


class OpenLoop(AbstractController):
    """A torque table played back without feedback (e.g. a logged ``tau_command``).

    ``tau(t)`` interpolates the rows linearly at ``t / sample_step`` (row ``k`` at ``t = k Δ``; held
    at the ends): with ``control="hold"`` at the same sample step the arm receives row ``k`` over
    ``[t_k, t_k + Δ)``, a zero-order hold of the table.

    Attributes:
        torques: ``(N, n)`` [N m].
        sample_step: static ``Δ`` [s] between rows.
    """

    torques: Float[Array, "N n"]
    sample_step: float = eqx.field(static=True)

    def __init__(self, torques: Float[ArrayLike, "N n"], sample_step: float):
        self.torques = jnp.asarray(torques, dtype=float)
        if self.torques.ndim != 2 or self.torques.shape[0] < 1:
            raise ValueError(f"OpenLoop.torques must have shape (N, n), N >= 1, got {self.torques.shape}.")
        self.sample_step = float(sample_step)
        if not (np.isfinite(self.sample_step) and self.sample_step > 0):
            raise ValueError(f"OpenLoop.sample_step must be positive [s], got {sample_step!r}.")

    @property
    def dof(self) -> int:
        return self.torques.shape[-1]

    def __call__(self, t, q, qd, q_reference, qd_reference, qdd_reference) -> Array:
        rows = self.torques.shape[0]
        x = jnp.clip(t / self.sample_step, 0, rows - 1)
        k = jnp.clip(jnp.floor(x).astype(jnp.int32), 0, max(rows - 2, 0))
        frac = x - k
        upper = jnp.minimum(k + 1, rows - 1)
        return (1 - frac) * self.torques[k] + frac * self.torques[upper]
