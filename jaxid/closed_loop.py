"""Closed-loop simulation of N-joint arms: a periodic reference, a joint controller, a robot's log.

A seven-joint arm under gravity falls under an open-loop torque, so identification experiments on
real arms track an exciting periodic reference with a joint controller (DESIGN §8). This module
holds the three pieces and the simulator that joins them:

- **Reference** ``FourierTrajectory``: the periodic trajectory of Swevers et al. (1997), per joint
  ``j``, with base frequency ``ω_f = 2π / T`` and ``L`` harmonics::

      q_j(t)   = q0_j + Σ_{l=1..L} [ a_jl/(ω_f l) sin(ω_f l t) − b_jl/(ω_f l) cos(ω_f l t) ]
      q'_j(t)  =        Σ_{l=1..L} [ a_jl cos(ω_f l t) + b_jl sin(ω_f l t) ]
      q''_j(t) =        Σ_{l=1..L} ω_f l [ −a_jl sin(ω_f l t) + b_jl cos(ω_f l t) ]

  evaluated analytically. ``random_fourier_trajectory`` draws one inside the joint limits
  (``JointLimits``, read from the arm by ``joint_limits``), ``check_limits`` measures how close a
  trajectory comes to them.
- **Controllers** (``AbstractController``): ``PDController`` (optionally with the feed-forward
  inverse dynamics of a nominal model), ``ComputedTorque`` (inverse dynamics of a nominal model,
  which may differ from the true arm) and ``OpenLoop`` (a torque table played back). Default gains
  (``PDController.tuned``, ``ComputedTorque.tuned``): every joint's closed loop a critically damped
  second-order system of natural frequency ``DEFAULT_FREQUENCY = 10 Hz`` (computed torque:
  ``kp = ω²``, ``kd = 2ω``; PD: the same times the joint's effective inertia ``1 / (M⁻¹)_jj`` at the
  reference's mean posture, which bounds every coupled mode by ``√n · 10 Hz``).
- **Simulation** ``simulate_closed_loop`` (one trial; pure, ``jit``/``vmap``-able) and
  ``simulate_closed_loop_batch`` (a batch of arms and noise keys, chunked and sharded over the local
  devices): fixed-step RK4 (``jaxid.integrate.rk4_step``, the one RK4 step) on the state
  ``(q, q')`` of the true arm, accelerations from its ``forward_dynamics`` (Cholesky of
  ``jaxid.linalg``, no LAPACK). A ``SerialArm`` takes the fast path (``fast_path``): the same
  dynamics written out on scalars (``jaxid.model.unrolled``), the state carried as ``2 n`` scalars
  (under ``vmap`` contiguous ``(B,)`` vectors), so that a batched step is elementwise arithmetic
  along the batch instead of many tiny batched 6×6 products; it equals the generic path to
  round-off (``tests/test_unrolled.py``). The result is a ``ClosedLoopRecord``: what a robot logs (time,
  measured angles and velocities, commanded and measured torque, the reference) and a status.

Control timing (``control=``):

- ``"hold"`` (default; what a real robot's 1 kHz joint controller does): at each sample time
  ``t_k = k Δ`` the controller reads the *measured* angles and velocities (the logged values, noise
  included) and its torque is held constant over ``[t_k, t_k + Δ)`` (zero-order hold), integrated
  with ``substeps`` RK4 steps. The measurement noise therefore enters the motion: closed-loop data
  correlate the noise with the regressor (why IDIM-LS is biased in closed loop, DESIGN §8).
- ``"stage"``: the controller is evaluated at every RK4 stage from the *true* state (a
  continuous-time control law; measurement noise stays outside the loop). With a computed-torque
  controller whose model is the true arm the error dynamics are then exactly linear.

In both modes the logged commanded torque at ``t_k`` is the torque applied to the arm at ``t_k``
(``"hold"``: over the whole interval), so ``tau_command = ID_true(q, q', q''(t_k⁺))`` holds at every
sample.

Measurement (``MeasurementNoise``, Gaussian, per joint): measured angle ``= q + e_q``, velocity
``= q' + e_v``, torque ``= tau_command + e_tau`` (a sensor error, not a disturbance). A trial's noise
is drawn from its own key only (``measurement_noise``), never from its position in a batch.

Status: ``Status.SUCCESS`` ("ok") or ``Status.DIVERGED`` ("diverged") when the state becomes
non-finite or an angle leaves ``10 ×`` its position range about the range's middle
(``|q − mid| > 10 · half-range``); the signals of a diverged trial may hold NaN, never silently.

Static versus traced: every number that may vary across a sweep is an array leaf (coefficients,
offsets, gains, model parameters, noise levels, limits, keys; saturation too: without it the effort
limit is infinite, the same program); the period, the number of harmonics, the sample step,
substeps, duration and control mode are static (a new value recompiles).
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Key, PRNGKeyArray, UInt32

from .integrate import rk4_step, sincos
from .linalg import cholesky, solve_triangular
from .model import unrolled
from .model.interface import AbstractArm
from .model.serial import SerialArm
from .reference import (
    FourierTrajectory,
    JointLimits,
    joint_limits,
)
from .trajectory import _unreachable
from .types import Status, any_traced, compiled_when_concrete, require_float64

__all__ = [
    "DEFAULT_FREQUENCY",
    "DEFAULT_DAMPING_RATIO",
    "DIVERGENCE_FACTOR",
    "AbstractController",
    "PDController",
    "ComputedTorque",
    "OpenLoop",
    "MeasurementNoise",
    "measurement_noise",
    "ClosedLoopRecord",
    "simulate_closed_loop",
    "simulate_closed_loop_batch",
]

#: Default closed-loop natural frequency of every joint [Hz] (``PDController.tuned``, ``ComputedTorque.tuned``).
DEFAULT_FREQUENCY = 10.0
#: Default closed-loop damping ratio of every joint (critical damping).
DEFAULT_DAMPING_RATIO = 1.0
#: A trial is ``DIVERGED`` when an angle leaves this many half-ranges about its range's middle.
DIVERGENCE_FACTOR = 10.0

Control = Literal["hold", "stage"]
CONTROLS: tuple[str, ...] = ("hold", "stage")


# -- controllers ---------------------------------------------------------------------------------


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


# -- measurement ---------------------------------------------------------------------------------


class MeasurementNoise(eqx.Module):
    """Gaussian measurement noise standard deviations (scalars or ``(n,)`` per joint; array leaves).

    Attributes:
        angle_std: angle encoder noise [rad or m].
        velocity_std: reported velocity noise [rad/s or m/s].
        torque_std: torque reading noise [N m or N].
    """

    angle_std: Float[Array, "*#n"]
    velocity_std: Float[Array, "*#n"]
    torque_std: Float[Array, "*#n"]

    def __init__(self, angle_std: ArrayLike = 0.0, velocity_std: ArrayLike = 0.0, torque_std: ArrayLike = 0.0):
        self.angle_std = jnp.asarray(angle_std, dtype=float)
        self.velocity_std = jnp.asarray(velocity_std, dtype=float)
        self.torque_std = jnp.asarray(torque_std, dtype=float)
        for name in ("angle_std", "velocity_std", "torque_std"):
            value = getattr(self, name)
            if value.ndim > 1:
                raise ValueError(f"MeasurementNoise.{name} must be a scalar or (n,), got shape {value.shape}.")
            if not any_traced(value) and not bool(jnp.all(value >= 0)):
                raise ValueError(f"MeasurementNoise.{name} must be non-negative, got {value}.")


def measurement_noise(
    noise: MeasurementNoise, key: PRNGKeyArray, samples: int, dof: int
) -> tuple[Float[Array, "samples dof"], Float[Array, "samples dof"], Float[Array, "samples dof"]]:
    """The noise a trial adds to its angles, velocities and torque: three ``(samples, dof)`` arrays,
    ``std · N(0, 1)`` from ``jax.random.split(key, 3)`` (in that order). ``simulate_closed_loop``
    draws exactly these, so ``record.tau − measurement_noise(...)[2] == record.tau_command``."""
    keys = jax.random.split(key, 3)
    stds = (noise.angle_std, noise.velocity_std, noise.torque_std)
    return tuple(std * jax.random.normal(k, (samples, dof)) for std, k in zip(stds, keys, strict=True))


# -- record --------------------------------------------------------------------------------------


class ClosedLoopRecord(eqx.Module):
    """What the robot logs over a closed-loop run of ``N`` samples (``t_k = k Δ``, ``k = 0 … N − 1``).

    Attributes:
        t: ``(N,)`` sample times [s].
        q: ``(N, n)`` measured angles [rad] (true + ``angle_std`` noise).
        qd: ``(N, n)`` measured velocities [rad/s] (true + ``velocity_std`` noise).
        tau_command: ``(N, n)`` commanded torque [N m]: the controller's output after saturation, the
            torque the arm receives at ``t_k`` (``"hold"``: over ``[t_k, t_k + Δ)``).
        tau: ``(N, n)`` measured torque [N m] (``tau_command`` + ``torque_std`` noise).
        q_reference, qd_reference, qdd_reference: ``(N, n)`` the reference at ``t_k``.
        saturated: ``(n,)`` number of samples whose command was clipped at the effort limit, per joint.
        status: ``Status.SUCCESS`` or ``Status.DIVERGED`` (``int32``).
        sample_step: static ``Δ`` [s].

    Under ``vmap`` (or from ``simulate_closed_loop_batch``) every array gains a leading batch axis.
    """

    t: Float[Array, "*batch N"]
    q: Float[Array, "*batch N n"]
    qd: Float[Array, "*batch N n"]
    tau_command: Float[Array, "*batch N n"]
    tau: Float[Array, "*batch N n"]
    q_reference: Float[Array, "*batch N n"]
    qd_reference: Float[Array, "*batch N n"]
    qdd_reference: Float[Array, "*batch N n"]
    saturated: Int[Array, "*batch n"]
    status: Int[Array, "*batch"]
    sample_step: float = eqx.field(static=True)


# -- simulation ----------------------------------------------------------------------------------


def fast_path(arm: AbstractArm) -> bool:
    """Whether the simulator integrates ``arm`` by the unrolled scalar dynamics
    (``jaxid.model.unrolled``): every ``SerialArm``. Other arms (``TwoLinkArm``) take their own
    ``forward_dynamics`` on ``(n,)`` vectors."""
    return isinstance(arm, SerialArm)


class _Generic:
    """The state as ``(q, q')`` of ``(n,)`` arrays; accelerations from ``arm.forward_dynamics``."""

    def __init__(self, arm: AbstractArm):
        self.arm = arm

    def state(self, y0: Array):
        return (y0[0], y0[1])

    def stacked(self, y) -> tuple[Array, Array]:
        return y

    def rates(self, y, tau, pred):
        return y[1], self.arm.forward_dynamics(y[0], y[1], tau)


class _Unrolled:
    """A ``SerialArm``'s state as ``(q, q')`` of ``n``-tuples of scalars (under ``vmap`` ``2 n``
    contiguous ``(B,)`` vectors) and its accelerations from ``jaxid.model.unrolled``.

    The accelerations are computed behind a ``lax.cond`` on an always-true unbatched ``pred`` (as
    ``jaxid.trajectory.fast_rates`` does): XLA then materialises them once per RK4 stage, and the
    cond's operands (the state, torques, and the sines and cosines of the revolute joints' angles by
    ``jaxid.integrate.sincos``) once before it. Without it XLA's CPU fusion recomputes the whole
    dynamics inside every consumer of the accelerations (the RK4 stage updates and the final
    combination): measured ~500x slower per step. A second cond around the sine/cosine kernels (the
    two-link path's) measured no faster and was dropped.
    """

    def __init__(self, arm: SerialArm):
        self.n = arm.dof
        self.geometry = unrolled.joint_geometry(arm)
        self.params = unrolled.split_parameters(arm)  # once per trial, outside the time loop
        self.slope = arm.coulomb_slope
        self.revolute = tuple(i for i, g in enumerate(self.geometry) if g.revolute)

    def state(self, y0: Array):
        return tuple(y0[0, i] for i in range(self.n)), tuple(y0[1, i] for i in range(self.n))

    def stacked(self, y) -> tuple[Array, Array]:
        return jnp.stack(y[0]), jnp.stack(y[1])

    def _accelerations(self, q, qd, tau, sin, cos):
        return tuple(unrolled.forward_dynamics(self.geometry, self.params, self.slope, q, qd, tau, sin, cos))

    def rates(self, y, tau, pred):
        q, qd = y
        n = self.n
        sin, cos = [0.0] * n, [1.0] * n  # prismatic joints: unused
        for i in self.revolute:
            sin[i], cos[i] = sincos(q[i])
        taus = tuple(tau[i] for i in range(n))
        acc = jax.lax.cond(
            pred, self._accelerations, _unreachable(self._accelerations), q, qd, taus, tuple(sin), tuple(cos)
        )
        return qd, acc


def _stage_times(t: Array, h: float) -> Float[Array, "3"]:
    # ``rk4_step`` feeds row i of its stage input to the rates at t, t + h/2, t + h; the closed loop
    # passes those stage times and its rates compute the controller's torque at them.
    return t + h * jnp.array([0.0, 0.5, 1.0])


def _closed_loop(
    arm: AbstractArm,
    reference: FourierTrajectory,
    controller: AbstractController,
    noise: MeasurementNoise | None,
    limits: JointLimits,
    key,
    initial_state: Array,
    *,
    samples: int,
    sample_step: float,
    substeps: int,
    control: str,
    unrolled: bool = True,
) -> ClosedLoopRecord:
    """One trial (unbatched, traceable): see ``simulate_closed_loop``. The command is always clipped at
    ``± limits.effort`` (``inf``: not clipped; ``saturate=False`` passes ``inf``)."""
    n = arm.dof
    h = sample_step / substeps
    if key is None:
        zeros = jnp.zeros((samples, n))
        noises = (zeros, zeros, zeros)
    else:
        noises = measurement_noise(noise, key, samples, n)
    middle, bound = limits.middle, DIVERGENCE_FACTOR * limits.half_range
    effort = limits.effort
    dynamics = _Unrolled(arm) if unrolled and fast_path(arm) else _Generic(arm)

    def command(t, q, qd, r):
        # The controller's torque at t from the state (q, q') and the reference r = (q, q', q'')_ref(t),
        # saturated; and which joints were clipped.
        tau = controller(t, q, qd, *r)
        return jnp.clip(tau, -effort, effort), jnp.abs(tau) > effort

    def advance(y, t0, rates):
        def one(i, y):
            return rk4_step(rates, y, _stage_times(t0 + i * h, h), h)

        return one(0, y) if substeps == 1 else jax.lax.fori_loop(0, substeps, one, y)

    def step(carry, xs):
        y, ok, count = carry
        k, noise_q, noise_qd, noise_tau = xs
        pred = k >= 0  # always true, unbatched: the materialisation barrier of the unrolled path
        t = k * sample_step
        r = reference.evaluate(t)
        q_true, qd_true = dynamics.stacked(y)
        q_measured, qd_measured = q_true + noise_q, qd_true + noise_qd
        if control == "hold":
            tau, clipped = command(t, q_measured, qd_measured, r)

            def rates(state, stage):
                return dynamics.rates(state, tau, pred)

        else:
            tau, clipped = command(t, q_true, qd_true, r)

            def rates(state, ts):
                tau_stage = command(ts, *dynamics.stacked(state), reference.evaluate(ts))[0]
                return dynamics.rates(state, tau_stage, pred)

        y_next = advance(y, t, rates)
        q_next, qd_next = dynamics.stacked(y_next)
        inside = jnp.all(jnp.abs(q_next - middle) <= bound) & jnp.all(jnp.isfinite(qd_next))
        out = (q_measured, qd_measured, tau, tau + noise_tau, *r)
        return (y_next, ok & inside, count + clipped.astype(jnp.int32)), out

    ok0 = jnp.all(jnp.abs(initial_state[0] - middle) <= bound) & jnp.all(jnp.isfinite(initial_state[1]))
    xs = (jnp.arange(samples), *noises)
    carry0 = (dynamics.state(initial_state), ok0, jnp.zeros((n,), dtype=jnp.int32))
    (_, ok, count), out = jax.lax.scan(step, carry0, xs)
    q, qd, tau_command, tau, q_ref, qd_ref, qdd_ref = out
    status = jnp.where(ok, Status.SUCCESS, Status.DIVERGED).astype(jnp.int32)
    return ClosedLoopRecord(
        t=jnp.arange(samples) * sample_step,
        q=q,
        qd=qd,
        tau_command=tau_command,
        tau=tau,
        q_reference=q_ref,
        qd_reference=qd_ref,
        qdd_reference=qdd_ref,
        saturated=count,
        status=status,
        sample_step=sample_step,
    )


_compiled_closed_loop = compiled_when_concrete(_closed_loop)


def _samples(duration: float, sample_step: float) -> int:
    try:
        duration, sample_step = float(duration), float(sample_step)
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        raise ValueError(
            f"duration and sample_step are static (Python floats) [s], got {duration!r}, {sample_step!r}."
        ) from None
    if not (np.isfinite(sample_step) and sample_step > 0 and np.isfinite(duration) and duration > 0):
        raise ValueError(f"duration and sample_step must be positive [s], got {duration}, {sample_step}.")
    n = duration / sample_step
    if abs(n - round(n)) > 1e-9 * max(1.0, n) or round(n) < 1:
        raise ValueError(
            f"duration {duration:g} s is not a whole number of samples of {sample_step:g} s (ratio {n:.6g}); "
            f"choose duration = N · sample_step, e.g. {max(1, round(n)) * sample_step:.6g} s."
        )
    return int(round(n))


def _check_options(arm, reference, controller, noise, key, limits, substeps, control, saturate, duration, sample_step):
    require_float64("simulate_closed_loop")
    n = arm.dof
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {list(CONTROLS)}, got {control!r}.")
    if isinstance(substeps, bool) or not (isinstance(substeps, (int, np.integer)) and substeps >= 1):
        raise ValueError(f"substeps must be a positive integer, got {substeps!r}.")
    if not isinstance(saturate, bool):
        raise ValueError(f"saturate must be True or False, got {saturate!r}.")
    if not isinstance(reference, FourierTrajectory) or reference.dof != n:
        raise ValueError(f"reference must be a FourierTrajectory of the arm's {n} joints, got {reference!r:.80}.")
    if not isinstance(controller, AbstractController) or controller.dof != n:
        raise ValueError(f"controller must be an AbstractController for the arm's {n} joints, got {controller!r:.80}.")
    if noise is not None and key is None:
        raise ValueError("noise needs a key: pass key=jax.random.key(seed) (each trial's noise comes from its key).")
    if limits is None:
        if not isinstance(arm, SerialArm):
            raise ValueError(f"{type(arm).__name__} carries no joint limits; pass limits=JointLimits(...).")
        limits = joint_limits(arm)
    if limits.dof != n:
        raise ValueError(f"limits are for {limits.dof} joints, the arm has {n}.")
    if not saturate:  # the same program either way: an infinite effort limit clips nothing
        limits = eqx.tree_at(lambda lim: lim.effort, limits, jnp.full((n,), jnp.inf, dtype=float))
    return _samples(duration, sample_step), limits


def _initial(reference: FourierTrajectory, initial_state, n: int) -> Array:
    if initial_state is None:
        return reference.initial_state()
    y0 = jnp.asarray(initial_state, dtype=float)
    if y0.shape[-2:] != (2, n):
        raise ValueError(f"initial_state must be (q, q') of shape (2, {n}), got {y0.shape}.")
    return y0


def simulate_closed_loop(
    arm: AbstractArm,
    reference: FourierTrajectory,
    controller: AbstractController,
    *,
    duration: float,
    sample_step: float = 1e-3,
    substeps: int = 1,
    key: PRNGKeyArray | None = None,
    noise: MeasurementNoise | None = None,
    control: Control = "hold",
    saturate: bool = False,
    initial_state: Float[ArrayLike, "2 n"] | None = None,
    limits: JointLimits | None = None,
) -> ClosedLoopRecord:
    """Simulate one closed-loop run of the true ``arm`` tracking ``reference`` with ``controller``.

    Args:
        arm: the true arm (unbatched; ``vmap`` this function or use ``simulate_closed_loop_batch``).
        reference: the ``FourierTrajectory`` to track.
        controller: ``PDController``, ``ComputedTorque``, ``OpenLoop`` or another ``AbstractController``.
        duration: logged time ``N Δ`` [s] (static; a whole number of samples).
        sample_step: ``Δ`` [s] (static): the log's and, with ``control="hold"``, the controller's period.
        substeps: RK4 steps per sample (static), ``h = Δ / substeps``.
        key: PRNG key of this trial's measurement noise (``measurement_noise``); ``None``: no noise.
        noise: ``MeasurementNoise`` (needs ``key``); ``None``: no noise.
        control: ``"hold"`` (default; zero-order hold at the sample rate on the measured signals) or
            ``"stage"`` (evaluated at every RK4 stage on the true state); see the module docstring.
        saturate: clip the command at ``± limits.effort`` (the URDF effort limits) and count the
            clipped samples (``record.saturated``); not a static option (one program with or without).
        initial_state: ``(2, n)`` ``(q, q')`` at ``t = 0``; default the reference's (``reference.initial_state()``).
        limits: ``JointLimits`` for saturation and the divergence test; default ``joint_limits(arm)``.

    Returns a ``ClosedLoopRecord``. Pure and ``jit``/``vmap``-able (the trial's result depends only on
    its own ``arm``, ``key`` and ``initial_state``); on concrete inputs it runs as one compiled program
    per set of static options and shapes. Raises ``ValueError`` before compiling for inconsistent
    options (joint counts, a duration that is not whole samples, noise without a key, float32).
    """
    samples, limits = _check_options(
        arm, reference, controller, noise, key, limits, substeps, control, saturate, duration, sample_step
    )
    if isinstance(arm, SerialArm) and arm.inertial.ndim != 2:
        raise ValueError(
            f"simulate_closed_loop takes one arm (inertial (n, 10)), got inertial {arm.inertial.shape}; "
            "use simulate_closed_loop_batch or jax.vmap for a batch."
        )
    y0 = _initial(reference, initial_state, arm.dof)
    if key is not None and noise is None:
        noise = MeasurementNoise()
    return _compiled_closed_loop(
        arm,
        reference,
        controller,
        noise,
        limits,
        key,
        y0,
        samples=samples,
        sample_step=float(sample_step),
        substeps=int(substeps),
        control=control,
    )


# -- batch ---------------------------------------------------------------------------------------

_ARM_LEAF_NDIM = {"inertial": 2, "viscous": 1, "coulomb": 1, "armature": 1, "offset": 1, "gravity": 1}


def _batched_arms(arms: SerialArm, batch: int) -> SerialArm:
    """Every leaf with a leading axis ``batch`` (unbatched leaves are broadcast)."""
    leaves = []
    for name, ndim in _ARM_LEAF_NDIM.items():
        leaf = getattr(arms, name)
        if leaf.ndim == ndim:
            leaf = jnp.broadcast_to(leaf, (batch, *leaf.shape))
        elif leaf.ndim != ndim + 1 or leaf.shape[0] != batch:
            raise ValueError(
                f"arms.{name} must be unbatched or have one leading batch axis of {batch}, got {leaf.shape}."
            )
        leaves.append(leaf)
    return eqx.tree_at(lambda a: tuple(getattr(a, f) for f in _ARM_LEAF_NDIM), arms, tuple(leaves))


@functools.lru_cache(maxsize=32)
def _runner(static_items, ndev: int, chunk: int, noisy: bool):
    static = dict(static_items)

    def local(arms, keys, initial_states, reference, controller, noise, limits):
        def one(trial):
            arm, key, y0 = trial
            return _closed_loop(arm, reference, controller, noise, limits, key if noisy else None, y0, **static)

        return jax.lax.map(one, (arms, keys, initial_states), batch_size=chunk)

    if ndev > 1:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
        spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
        local = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(spec, spec, spec, shared, shared, shared, shared),
            out_specs=spec,
            check_vma=False,
        )
    # XLA's default vector width, not ``jaxid.batch.CPU_COMPILER_OPTIONS`` (512-bit): compiled with
    # it, an open-loop batch (a torque shared by the trials) returned non-finite or diverged states
    # in one SIMD lane of a chunk (every 8th trial) in 6 of 26 identical runs on an AVX-512 CPU
    # (jax 0.10.2), never in 16 runs at the default width. Reproduced by scripts/check_vector_width.py
    # (Panda, OpenLoop, 1 kHz, chunk 256, 2 host devices) on the generic path (unrolled=False), batch
    # 1024 (two chunks per device), 0.5 s: at 512 bits 2 of 5 fresh runs had 32 diverged trials, all
    # lane 3 of 8 of one device's second chunk, and in 3 of 5 a second call of the same executable
    # gave other bits (a run-time fault); 5/5 bitwise equal at the default width. Not seen at batch
    # 512 (one chunk per device; 10 runs) nor on the unrolled fast path at batch 1024 (13 runs, every
    # one bitwise equal to the default width). Cause unknown: kept at the default width.
    # docs/performance.md, "The 512-bit vector option".
    return jax.jit(local)


def simulate_closed_loop_batch(
    arms: SerialArm,
    reference: FourierTrajectory,
    controller: AbstractController,
    *,
    duration: float,
    keys: Key[Array, " B"] | UInt32[Array, "B 2"] | None = None,
    sample_step: float = 1e-3,
    substeps: int = 1,
    noise: MeasurementNoise | None = None,
    control: Control = "hold",
    saturate: bool = False,
    initial_states: Float[ArrayLike, "B 2 n"] | None = None,
    limits: JointLimits | None = None,
    shard: bool = True,
    chunk_size: int = 256,
) -> ClosedLoopRecord:
    """``simulate_closed_loop`` over a batch of ``B`` true arms and noise keys, in one compiled call.

    The batch is split over the local devices (``shard_map``; on CPU expose the cores with
    ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before importing jax) and each device
    runs its share ``chunk_size`` trials at a time (``lax.map`` over ``vmap``-ed chunks), as
    ``jaxid.simulate_batch`` does, compiled with XLA's default options (not the 512-bit vectors of
    ``jaxid.batch.CPU_COMPILER_OPTIONS``: see ``_runner``). A batch that is not a multiple of the
    device count is padded with copies of its last trial (then dropped). A trial's record depends
    only on its own arm, key and initial state (the chunk width and device count change it by
    rounding at most).

    Args:
        arms: a ``SerialArm`` whose leaves carry a leading batch axis ``B`` (unbatched leaves, e.g.
            gravity, are shared), e.g. ``arm.with_parameters(names, values)`` with ``values (B, p)``.
        reference, controller, noise, limits: shared by the batch (unbatched); ``vmap``
            ``simulate_closed_loop`` yourself for per-trial references or controllers.
        keys: ``(B,)`` PRNG keys, one per trial (e.g. ``jax.vmap(lambda i: jax.random.fold_in(root, i))``);
            ``None``: no noise.
        initial_states: ``(B, 2, n)``; default every trial starts on the reference.
        shard: split over ``jax.devices()``; chunk_size: trials per ``vmap`` on a device (static).
        Other arguments as ``simulate_closed_loop``.

    Returns a ``ClosedLoopRecord`` with a leading batch axis ``B``. One compile per set of static
    options and shapes. Raises ``ValueError`` as ``simulate_closed_loop`` does, and for inconsistent
    batch sizes.
    """
    samples, limits = _check_options(
        arms, reference, controller, noise, keys, limits, substeps, control, saturate, duration, sample_step
    )
    if not isinstance(arms, SerialArm):
        raise ValueError(f"simulate_closed_loop_batch takes a batched SerialArm, got {type(arms).__name__}.")
    if isinstance(chunk_size, bool) or not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    n = arms.dof
    sizes = {}
    if arms.inertial.ndim == 3:
        sizes["arms"] = arms.inertial.shape[0]
    if keys is not None:
        sizes["keys"] = keys.shape[0] if keys.ndim >= 1 else None
    if initial_states is not None:
        initial_states = jnp.asarray(initial_states, dtype=float)
        if initial_states.ndim != 3 or initial_states.shape[1:] != (2, n):
            raise ValueError(f"initial_states must have shape (B, 2, {n}), got {initial_states.shape}.")
        sizes["initial_states"] = initial_states.shape[0]
    if not sizes or len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(
            f"simulate_closed_loop_batch needs one batch size B from arms (inertial (B, n, 10)), keys (B,) or "
            f"initial_states (B, 2, n); got {sizes or 'none'}."
        )
    batch = next(iter(sizes.values()))
    arms = _batched_arms(arms, batch)
    if initial_states is None:
        initial_states = jnp.broadcast_to(reference.initial_state(), (batch, 2, n))
    noisy = keys is not None
    if noisy and noise is None:
        noise = MeasurementNoise()
    if not noisy:
        keys = jnp.zeros((batch,), dtype=jnp.int32)  # placeholder leaf, unused
    static = dict(samples=samples, sample_step=float(sample_step), substeps=int(substeps), control=control)
    ndev = len(jax.devices()) if shard else 1
    pad = (-batch) % ndev
    chunk = min(chunk_size, (batch + pad) // ndev)
    trials = (arms, keys, initial_states)
    if pad:
        trials = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), trials)
    run = _runner(tuple(sorted(static.items())), ndev, chunk, noisy)
    record = run(*trials, reference, controller, noise, limits)
    if pad:
        record = jax.tree.map(lambda x: x[:batch], record)
    return record
