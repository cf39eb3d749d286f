"""The periodic reference of an identification experiment on a serial arm: joint limits and Fourier
trajectories (Swevers' finite Fourier series) that respect them.

``JointLimits`` (position, velocity, acceleration, effort per joint; ``joint_limits(arm)`` reads a
``SerialArm``'s URDF limits, with ``DEFAULT_LIMITS`` where it gives none), ``FourierTrajectory``
(``q(t) = q0 + Σ_l a_l sin(l ω t) + b_l cos(l ω t)`` per joint, with its exact derivatives),
``random_fourier_trajectory`` (a random draw scaled into the limits at a margin) and
``check_limits``. ``jaxid.simulation.closed_loop`` tracks such a reference;
``jaxid.excitation.fourier_design`` optimises one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..model.serial import SerialArm
from ..simulation.integrate import sincos

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_LIMITS",
    "JointLimits",
    "LimitRatios",
    "joint_limits",
    "FourierTrajectory",
    "random_fourier_trajectory",
    "check_limits",
]

#: ``random_fourier_trajectory`` scales each joint so that its binding limit is reached at this fraction.
DEFAULT_MARGIN = 0.9

#: Limits used where the URDF gives none, per joint type: half of the position range about 0
#: [rad or m] (continuous joints: ±π), velocity [rad/s or m/s], acceleration [rad/s² or m/s²] (URDF
#: has no acceleration limits: this value is used unless ``joint_limits(acceleration=…)`` is given).
#: A missing effort limit stays ``inf`` (no saturation on that joint).
DEFAULT_LIMITS: dict[str, dict[str, float]] = {
    "revolute": {"position": math.pi, "velocity": 2.0, "acceleration": 10.0},
    "prismatic": {"position": 0.5, "velocity": 0.5, "acceleration": 2.0},
}


# -- limits --------------------------------------------------------------------------------------


class JointLimits(eqx.Module):
    """Joint limits as array leaves (finite except ``effort``).

    Attributes:
        position: ``(n, 2)`` lower, upper [rad or m].
        velocity: ``(n,)`` largest ``|q'|`` [rad/s or m/s].
        acceleration: ``(n,)`` largest ``|q''|`` [rad/s² or m/s²].
        effort: ``(n,)`` largest ``|tau|`` [N m or N]; ``inf``: no saturation on that joint.
    """

    position: Float[Array, "n 2"]
    velocity: Float[Array, " n"]
    acceleration: Float[Array, " n"]
    effort: Float[Array, " n"]

    @property
    def dof(self) -> int:
        return self.velocity.shape[-1]

    @property
    def middle(self) -> Float[Array, " n"]:
        """Middle of the position range [rad or m]."""
        return 0.5 * (self.position[..., 0] + self.position[..., 1])

    @property
    def half_range(self) -> Float[Array, " n"]:
        """Half the position range [rad or m]."""
        return 0.5 * (self.position[..., 1] - self.position[..., 0])


def joint_limits(arm: SerialArm, *, acceleration: Float[ArrayLike, "*n"] | None = None) -> JointLimits:
    """The arm's joint limits (from its URDF), with ``DEFAULT_LIMITS`` where a limit is missing.

    Missing (``±inf``) position limits (continuous joints) become ``[−π, π]`` (prismatic ``±0.5 m``),
    missing velocity limits ``2 rad/s`` (``0.5 m/s``); the acceleration limit (never in URDF) is
    ``acceleration`` (scalar or ``(n,)``) or ``10 rad/s²`` (``2 m/s²``). A missing effort limit stays
    ``inf``. Host-side (reads the static geometry); raises ``ValueError`` for a non-positive
    ``acceleration``.
    """
    n = arm.dof
    kinds = arm.joint_types
    position = np.array(arm.position_limits, dtype=float)
    velocity = np.array(arm.velocity_limits, dtype=float)
    for j, kind in enumerate(kinds):
        default = DEFAULT_LIMITS[kind]
        if not np.all(np.isfinite(position[j])):
            position[j] = (-default["position"], default["position"])
        if not np.isfinite(velocity[j]):
            velocity[j] = default["velocity"]
    if acceleration is None:
        accel = np.array([DEFAULT_LIMITS[k]["acceleration"] for k in kinds])
    else:
        accel = np.broadcast_to(np.asarray(acceleration, dtype=float), (n,)).copy()
        if not (np.all(np.isfinite(accel)) and np.all(accel > 0)):
            raise ValueError(f"acceleration limits must be positive and finite, got {accel.tolist()}.")
    effort = np.array(arm.effort_limits, dtype=float)
    return JointLimits(jnp.asarray(position), jnp.asarray(velocity), jnp.asarray(accel), jnp.asarray(effort))


class LimitRatios(NamedTuple):
    """Worst ratio to the limit over joints and samples (``1`` = on the limit).

    ``position``: ``max |q − mid| / half-range``; ``velocity``: ``max |q'| / v_max``;
    ``acceleration``: ``max |q''| / a_max``.
    """

    position: Array
    velocity: Array
    acceleration: Array


# -- reference -----------------------------------------------------------------------------------


class FourierTrajectory(eqx.Module):
    """A Swevers periodic joint trajectory (see the module docstring for the formulas).

    Attributes:
        offset: ``(n,)`` ``q0`` [rad or m], the mean of ``q`` over a period.
        a: ``(n, L)`` cosine coefficients of the velocity [rad/s or m/s].
        b: ``(n, L)`` sine coefficients of the velocity [rad/s or m/s].
        period: static period ``T = 2π / ω_f`` [s].

    ``q(t + T) = q(t)``. Leaves may carry leading batch axes under ``vmap``.
    """

    offset: Float[Array, "*batch n"]
    a: Float[Array, "*batch n L"]
    b: Float[Array, "*batch n L"]
    period: float = eqx.field(static=True)

    def __init__(self, offset: Float[ArrayLike, "*batch n"], a: Float[ArrayLike, "*batch n L"], b, period: float):
        self.offset = jnp.asarray(offset, dtype=float)
        self.a = jnp.asarray(a, dtype=float)
        self.b = jnp.asarray(b, dtype=float)
        try:
            period = float(period)
        except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
            raise ValueError(f"FourierTrajectory.period is static (a Python float) [s], got {period!r}.") from None
        if not (np.isfinite(period) and period > 0):
            raise ValueError(f"FourierTrajectory.period must be positive and finite [s], got {period}.")
        self.period = period
        if self.a.shape != self.b.shape or self.a.ndim < 2 or self.a.shape[-2:-1] != self.offset.shape[-1:]:
            raise ValueError(
                f"FourierTrajectory: a and b must have shape (n, L) and offset (n,), "
                f"got offset {self.offset.shape}, a {self.a.shape}, b {self.b.shape}."
            )

    @property
    def dof(self) -> int:
        """Number of joints ``n``."""
        return self.offset.shape[-1]

    @property
    def harmonics(self) -> int:
        """Number of harmonics ``L``."""
        return self.a.shape[-1]

    @property
    def frequency(self) -> float:
        """Base angular frequency ``ω_f = 2π / T`` [rad/s]."""
        return 2 * math.pi / self.period

    def evaluate(self, t: Float[ArrayLike, "*t"]) -> tuple[Array, Array, Array]:
        """``(q, q', q'')`` at the times ``t`` [s], each ``(*t, n)``.

        ``t`` is reduced modulo the period before the phases are formed (accurate for long runs);
        the sines and cosines share one range reduction (``jaxid.simulation.integrate.sincos``). Pure;
        differentiable in ``t`` and in the leaves.
        """
        t = jnp.asarray(t, dtype=float)
        period = self.period
        reduced = t - period * jax.lax.stop_gradient(jnp.floor(t / period))
        w = self.frequency * jnp.arange(1, self.harmonics + 1, dtype=float)  # (L,) ω_f l
        s, c = sincos(reduced[..., None] * w)  # (*t, L)
        q = self.offset + jnp.einsum("...l,...jl->...j", s, self.a / w) - jnp.einsum("...l,...jl->...j", c, self.b / w)
        qd = jnp.einsum("...l,...jl->...j", c, self.a) + jnp.einsum("...l,...jl->...j", s, self.b)
        qdd = jnp.einsum("...l,...jl->...j", c, self.b * w) - jnp.einsum("...l,...jl->...j", s, self.a * w)
        return q, qd, qdd

    def q(self, t: Float[ArrayLike, "*t"]) -> Array:
        """Angles ``(*t, n)`` [rad or m] at ``t`` [s]."""
        return self.evaluate(t)[0]

    def qd(self, t: Float[ArrayLike, "*t"]) -> Array:
        """Velocities ``(*t, n)`` [rad/s or m/s] at ``t`` [s]."""
        return self.evaluate(t)[1]

    def qdd(self, t: Float[ArrayLike, "*t"]) -> Array:
        """Accelerations ``(*t, n)`` [rad/s² or m/s²] at ``t`` [s]."""
        return self.evaluate(t)[2]

    def initial_state(self) -> Float[Array, "*batch 2 n"]:
        """``(q(0), q'(0))`` stacked, ``(2, n)``: where a simulation that tracks it from rest on it starts."""
        q, qd, _ = self.evaluate(0.0)
        return jnp.stack([q, qd], axis=-2)


def _sample_times(period: float, samples: int) -> Array:
    return jnp.arange(samples) * (period / samples)


def _default_samples(harmonics: int) -> int:
    return 64 * harmonics


def random_fourier_trajectory(
    limits: JointLimits | SerialArm,
    harmonics: int,
    period: float,
    *,
    key: PRNGKeyArray,
    margin: float = DEFAULT_MARGIN,
    samples: int | None = None,
) -> FourierTrajectory:
    """A random Fourier trajectory inside the joint limits.

    The maths (no optimisation): draw ``a_jl, b_jl ~ N(0, 1)`` (``key``) and set ``q0_j`` to the middle
    of joint ``j``'s position range. On ``samples`` equally spaced times of one period (default
    ``64 L``: 64 per period of the highest harmonic) take the maxima ``P_j = max |q_j − q0_j|``,
    ``V_j = max |q'_j|``, ``A_j = max |q''_j|``. All three are linear in joint ``j``'s coefficients, so
    scaling them by ``s_j = margin · min(h_j / P_j, v_j / V_j, α_j / A_j)`` (``h_j`` the half range,
    ``v_j``, ``α_j`` the velocity and acceleration limits) puts the binding limit of every joint at
    exactly ``margin`` of it on those samples and the two others below. Between samples the maxima
    can exceed the sampled ones by a relative ``1 − cos(π / 64) ≈ 0.12 %`` for a pure top harmonic,
    so the continuous ratios stay below ``≈ 1.001 · margin``.

    Args:
        limits: ``JointLimits``, or a ``SerialArm`` (its ``joint_limits``, defaults where missing).
        harmonics: ``L`` (static).
        period: ``T`` [s] (static).
        key: PRNG key.
        margin: target fraction of the limits, in ``(0, 1]``.
        samples: static number of samples per period for the maxima.

    Returns a ``FourierTrajectory``. ``jit``-able with ``key`` (and ``limits``) traced; ``vmap`` over
    keys gives a batch. Raises ``ValueError`` for a bad ``harmonics``, ``margin`` or ``samples``.
    """
    if isinstance(limits, SerialArm):
        limits = joint_limits(limits)
    if isinstance(harmonics, bool) or not (isinstance(harmonics, (int, np.integer)) and harmonics >= 1):
        raise ValueError(f"harmonics must be a positive integer, got {harmonics!r}.")
    if not (isinstance(margin, (int, float)) and 0 < margin <= 1):
        raise ValueError(f"margin must be a number in (0, 1], got {margin!r}.")
    samples = _default_samples(int(harmonics)) if samples is None else samples
    if isinstance(samples, bool) or not (isinstance(samples, (int, np.integer)) and samples > 2 * harmonics):
        raise ValueError(f"samples must be an integer above 2 L = {2 * harmonics} (Nyquist), got {samples!r}.")
    n = limits.dof
    ka, kb = jax.random.split(key)
    a = jax.random.normal(ka, (n, int(harmonics)))
    b = jax.random.normal(kb, (n, int(harmonics)))
    unit = FourierTrajectory(limits.middle, a, b, period)
    q, qd, qdd = unit.evaluate(_sample_times(unit.period, int(samples)))
    ratios = jnp.stack(
        [
            jnp.max(jnp.abs(q - limits.middle), axis=0) / limits.half_range,
            jnp.max(jnp.abs(qd), axis=0) / limits.velocity,
            jnp.max(jnp.abs(qdd), axis=0) / limits.acceleration,
        ]
    )
    scale = margin / jnp.max(ratios, axis=0)  # (n,)
    return FourierTrajectory(limits.middle, a * scale[:, None], b * scale[:, None], period)


def check_limits(
    traj: FourierTrajectory, limits: JointLimits | SerialArm, *, samples: int | None = None
) -> LimitRatios:
    """The worst ratio of one trajectory to each kind of limit over ``samples`` times of one period
    (default ``1024 L``; static), all joints: ``LimitRatios(position, velocity, acceleration)`` of
    scalars (``vmap`` it for a batch). ``1`` means on a limit; see ``LimitRatios``."""
    if isinstance(limits, SerialArm):
        limits = joint_limits(limits)
    samples = 1024 * traj.harmonics if samples is None else int(samples)
    q, qd, qdd = traj.evaluate(_sample_times(traj.period, samples))
    return LimitRatios(
        jnp.max(jnp.abs(q - limits.middle) / limits.half_range),
        jnp.max(jnp.abs(qd) / limits.velocity),
        jnp.max(jnp.abs(qdd) / limits.acceleration),
    )
