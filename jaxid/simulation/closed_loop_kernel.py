"""The closed loop of one trial, traced: the integration kernel ``simulate_closed_loop`` and
``simulate_closed_loop_batch`` both run, and the option checks they share.

``_closed_loop`` integrates the state ``(q, q')`` of the true arm with fixed-step RK4
(``jaxid.simulation.integrate.rk4_step``, the one RK4 step), accelerations from its ``forward_dynamics``
(Cholesky of ``jaxid.linalg``, no LAPACK), the controller's torque held or evaluated per stage
(``control``, see ``jaxid.simulation.closed_loop``), and returns a ``ClosedLoopRecord``. A ``SerialArm`` takes
the fast path (``fast_path``): the same dynamics written out on scalars (``jaxid.model.unrolled``),
the state carried as ``2 n`` scalars (under ``vmap`` contiguous ``(B,)`` vectors), so that a batched
step is elementwise arithmetic along the batch instead of many tiny batched 6×6 products; it equals
the generic path to round-off (``tests/test_unrolled.py``).

Status: ``Status.SUCCESS`` ("ok") or ``Status.DIVERGED`` ("diverged") when the state becomes
non-finite or an angle leaves ``DIVERGENCE_FACTOR = 10 ×`` its position range about the range's
middle (``|q − mid| > 10 · half-range``); the signals of a diverged trial may hold NaN, never silently.
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..excitation.fourier import FourierTrajectory, JointLimits, joint_limits
from ..model import unrolled
from ..model.interface import AbstractArm
from ..model.serial import SerialArm
from ..types import Status, require_float64
from .closed_loop_record import ClosedLoopRecord, MeasurementNoise, measurement_noise
from .controllers import AbstractController
from .integrate import rk4_step, sincos
from .rate_kernels import _unreachable

__all__ = ["DIVERGENCE_FACTOR", "CONTROLS", "fast_path", "unrolled_dynamics"]

#: A trial is ``DIVERGED`` when an angle leaves this many half-ranges about its range's middle.
DIVERGENCE_FACTOR = 10.0

Control = Literal["hold", "stage"]
CONTROLS: tuple[str, ...] = ("hold", "stage")


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
    ``jaxid.simulation.rate_kernels.fast_rates`` does): XLA then materialises them once per RK4 stage, and the
    cond's operands (the state, torques, and the sines and cosines of the revolute joints' angles by
    ``jaxid.simulation.integrate.sincos``) once before it. Without it XLA's CPU fusion recomputes the whole
    dynamics inside every consumer of the accelerations (the RK4 stage updates and the final
    combination): measured ~500x slower per step. A second cond around the sine/cosine kernels (the
    two-link path's) measured no faster and was dropped.
    """

    def __init__(self, arm: SerialArm, params: unrolled.UnrolledParameters | None = None, definite: bool = True):
        self.n = arm.dof
        self.definite = definite  # ``unrolled.forward_dynamics``' solve: Cholesky, else LDLᵀ
        self.geometry = unrolled.joint_geometry(arm)
        # Once per trial, outside the time loop (``params``: given, e.g. ``unrolled.split_standard``'s).
        self.params = unrolled.split_parameters(arm) if params is None else params
        self.slope = arm.coulomb_slope
        self.revolute = tuple(i for i, g in enumerate(self.geometry) if g.revolute)

    def state(self, y0: Array):
        return tuple(y0[0, i] for i in range(self.n)), tuple(y0[1, i] for i in range(self.n))

    def stacked(self, y) -> tuple[Array, Array]:
        return jnp.stack(y[0]), jnp.stack(y[1])

    def _accelerations(self, q, qd, tau, sin, cos):
        return tuple(
            unrolled.forward_dynamics(self.geometry, self.params, self.slope, q, qd, tau, sin, cos, self.definite)
        )

    def trig(self, q) -> tuple[tuple, tuple]:
        """``(sin q_i, cos q_i)`` of the revolute joints as ``n``-tuples (``0``, ``1`` for prismatic ones: unused)."""
        sin, cos = [0.0] * self.n, [1.0] * self.n
        for i in self.revolute:
            sin[i], cos[i] = sincos(q[i])
        return tuple(sin), tuple(cos)

    def rates(self, y, tau, pred):
        q, qd = y
        taus = tuple(tau[i] for i in range(self.n))
        acc = jax.lax.cond(pred, self._accelerations, _unreachable(self._accelerations), q, qd, taus, *self.trig(q))
        return qd, acc


def unrolled_dynamics(arm: SerialArm, standard: Array) -> _Unrolled:
    """The unrolled dynamics (``_Unrolled``: ``rates(y, τ, pred)`` on ``(q, q')`` as ``n``-tuples of scalars,
    the accelerations behind the ``lax.cond`` barrier) of ``arm`` with the standard vector ``standard``
    ``(14 n,)`` (traced: ``unrolled.split_standard``), solved by ``LDLᵀ`` (``definite=False``): an identified
    model's mass matrix need not be positive definite, and its simulation then goes on as the generic
    path's elimination does (IDIM-IV restarts it, or flags its instruments weak) instead of giving ``nan``."""
    return _Unrolled(arm, unrolled.split_standard(arm, standard), definite=False)


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
