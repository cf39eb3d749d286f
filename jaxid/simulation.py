"""Simulation of the arm under a multisine torque, with diffrax as the integration engine.

The arm starts at rest at the operating point ``q0`` with torque ``tau(t) = G(q0) + u(t)``.
``discard_periods`` whole periods of transient are integrated and thrown away (only the state at
each period boundary is kept, for the steady-state check), then ``measured_periods`` periods are
sampled on the grid ``t0 + n·Δ``, ``n = 0 … P·N − 1`` (``N = T/Δ``, no repeated end point).

Integration paths (all fixed-step paths step ``h = Δ / substeps`` exactly on the sampling grid):

- ``solver="rk4"`` (default): the classic fourth-order Runge–Kutta method, hand-written as a
  ``lax.scan`` over steps. The torque is tabulated once per period at RK4's stage times
  ``t, t + h/2, t + h`` in float64 (shared by the whole batch, multiplied by each trial's scale)
  and fed to the scan, never re-evaluated per stage. Error against a tight reference: about
  1e-8 rad for the Table 2 point-mass arm at ``Δ = 0.01 s`` (see ``scripts/bench_simulate.py``).
  Two measured details make it ~4x faster than a diffrax ``solver.step`` loop on CPU: the state
  is carried as four scalars (under ``vmap`` four contiguous ``(B,)`` arrays, not a strided
  ``(B, 4)``), and the four sines/cosines of a stage are evaluated once, by a shared
  range-reduction polynomial (``sincos``, ≤ 1 ulp), behind a ``lax.cond`` — XLA's CPU fusion
  otherwise recomputes each sin/cos inside every consumer (about 7x per step).
- ``solver="diffrax-rk4"`` / ``"tsit5"``: the same fixed steps through diffrax's ``solver.step``
  (the ``RK4`` solver below, or ``diffrax.Tsit5``), for comparison; ``tsit5`` evaluates the
  multisine at its own stage times.
- ``solver="adaptive"``: ``diffrax.diffeqsolve`` with Tsit5 and a PID step-size controller at
  ``rtol``/``atol``, saving at the same grid; the reference path for accuracy checks.

Memory is independent of the transient length: discarded periods are integrated in a loop that
keeps only the state (and the last period-boundary state, for the steady-state check).

A record carries a ``status``: ``SUCCESS``, ``DIVERGED`` (non-finite or runaway state),
``MAX_STEPS`` (adaptive solver ran out of steps) or ``NOT_STEADY`` (state changed more than
``steady_tolerance`` from one period boundary to the next over the measured window).

``simulate`` is one trajectory and is ``jit``/``vmap``/``grad``-compatible; ``simulate_batch``
is the compiled, device-sharded batch version used by sweeps.
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar, Literal

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .excitation import Multisine
from .integrate import sincos
from .linearisation import LinearArm, linearise
from .model import TwoLinkArm, forward_dynamics, gravity_torque
from .types import SIMULATION_STATUSES, Record, Status, steps_per_period

__all__ = [
    "Record",
    "SUCCESS",
    "DIVERGED",
    "MAX_STEPS",
    "NOT_STEADY",
    "STATUS_NAMES",
    "RK4",
    "simulate",
    "simulate_batch",
    "linear_steady_state",
    "transient_periods",
    "steps_per_period",
]

SUCCESS, DIVERGED, MAX_STEPS, NOT_STEADY = Status.SUCCESS, Status.DIVERGED, Status.MAX_STEPS, Status.NOT_STEADY
STATUS_NAMES = SIMULATION_STATUSES

# A state this large (rad or rad/s) is treated as a runaway trajectory.
_RUNAWAY = 1e4


# -- diffrax solver: classic RK4 --------------------------------------------------------------

_rk4_tableau = diffrax.ButcherTableau(
    c=np.array([0.5, 0.5, 1.0]),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.array([0.0, 0.0, 0.0, 0.0]),
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
)


class RK4(diffrax.AbstractERK):
    """The classic fourth-order Runge–Kutta method as a diffrax solver (fixed steps only).

    Its stages sit at ``t``, ``t + h/2`` and ``t + h``, so a torque tabulated on the half-step
    grid is exact at every stage.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = _rk4_tableau
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


# -- vector fields -----------------------------------------------------------------------------


def _nonlinear_field(arm: TwoLinkArm, y: Array, tau: Array) -> Array:
    q, qd = y[:2], y[2:]
    return jnp.concatenate([qd, forward_dynamics(arm, q, qd, tau)])


def _linear_field(lin: LinearArm, y: Array, tau: Array) -> Array:
    dq, dqd = y[:2] - lin.q0, y[2:]
    rhs = tau - lin.tau0 - lin.stiffness @ dq - lin.damping @ dqd
    # 2x2 solve written out: no LAPACK call (batched LAPACK kernels can stall when several
    # host devices run at once; see jaxid/study.py).
    m = lin.mass
    det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    acc = jnp.stack([m[1, 1] * rhs[0] - m[0, 1] * rhs[1], m[0, 0] * rhs[1] - m[1, 0] * rhs[0]]) / det
    return jnp.concatenate([dqd, acc])


class _TabulatedTorque(eqx.Module):
    # Torque on the grid t_start + i·h/2 over one period (periodic lookup).
    table: Array  # (L, 2), L = 2 · steps per period
    offset: Array  # (2,)
    scale: Array  # ()
    t_start: Array
    half_step: float = eqx.field(static=True)

    def __call__(self, t):
        i = jnp.round((t - self.t_start) / self.half_step).astype(jnp.int32)
        i = jnp.mod(i, self.table.shape[0])
        return self.offset + self.scale * self.table[i]


class _AnalyticTorque(eqx.Module):
    excitation: Multisine
    offset: Array

    def __call__(self, t):
        return self.offset + self.excitation.torque(t)


def _vector_field(t, y, args):
    system, torque = args
    tau = torque(t)
    if isinstance(system, LinearArm):
        return _linear_field(system, y, tau)
    return _nonlinear_field(system, y, tau)


_TERM = diffrax.ODETerm(_vector_field)


# -- hand-written fixed-step RK4 ----------------------------------------------------------------


def _trig_pair(q: tuple[Array, Array]) -> tuple[Array, Array, Array, Array]:
    s1, c1 = sincos(q[0])
    s2, c2 = sincos(q[1])
    return s1, c1, s2, c2


def _nonlinear_rates(arm: TwoLinkArm):
    """``f(y, tau, pred)`` for the arm, with the parameter combinations hoisted out of the loop.

    ``y`` is a tuple ``(q1, q2, q1', q2')``; ``pred`` is an unbatched boolean that is always true
    but unknown to XLA: the trigonometry sits behind ``lax.cond(pred, …)`` so XLA materialises
    it once instead of fusing a copy into each consumer.
    """
    m1, m2 = arm.masses[0], arm.masses[1]
    l1 = arm.lengths[0]
    r1, r2 = arm.com[0], arm.com[1]
    j1, j2 = arm.inertias[0], arm.inertias[1]
    fv1, fv2 = arm.friction[0], arm.friction[1]
    d22 = j2 + m2 * r2**2
    d11_0 = j1 + m1 * r1**2 + m2 * l1**2 + d22
    b = m2 * l1 * r2
    g1 = arm.gravity * (m1 * r1 + m2 * l1)
    g2 = arm.gravity * m2 * r2

    def rates(y, tau, pred):
        q1, q2, v1, v2 = y
        s1, c1, s2, c2 = jax.lax.cond(pred, _trig_pair, _trig_pair, (q1, q2))
        s12 = s1 * c2 + c1 * s2
        bc = b * c2
        d11 = d11_0 + 2 * bc
        d12 = d22 + bc
        h = b * s2
        grav2 = g2 * s12
        rhs1 = tau[0] + h * (2 * v1 + v2) * v2 - g1 * s1 - grav2 - fv1 * v1
        rhs2 = tau[1] - h * v1 * v1 - grav2 - fv2 * v2
        inv_det = 1 / (d11 * d22 - d12 * d12)
        return v1, v2, (d22 * rhs1 - d12 * rhs2) * inv_det, (d11 * rhs2 - d12 * rhs1) * inv_det

    return rates


def _linear_rates(lin: LinearArm):
    """``f(y, tau, pred)`` for ``D0 δq'' + Fv δq' + K0 δq = tau − tau0`` (``pred`` unused)."""
    dinv = jnp.linalg.inv(lin.mass)
    a_q = -dinv @ lin.stiffness
    a_v = -dinv @ lin.damping

    def rates(y, tau, pred):
        dq = (y[0] - lin.q0[0], y[1] - lin.q0[1])
        v = (y[2], y[3])
        u = (tau[0] - lin.tau0[0], tau[1] - lin.tau0[1])
        acc = tuple(
            a_q[i, 0] * dq[0]
            + a_q[i, 1] * dq[1]
            + a_v[i, 0] * v[0]
            + a_v[i, 1] * v[1]
            + dinv[i, 0] * u[0]
            + dinv[i, 1] * u[1]
            for i in range(2)
        )
        return v[0], v[1], acc[0], acc[1]

    return rates


def _rk4_step(rates, y, taus, h, pred):
    # taus: (3, 2) torques at t, t + h/2, t + h.
    def shift(k, c):
        return tuple(a + c * x for a, x in zip(y, k, strict=True))

    k1 = rates(y, taus[0], pred)
    k2 = rates(shift(k1, 0.5 * h), taus[1], pred)
    k3 = rates(shift(k2, 0.5 * h), taus[1], pred)
    k4 = rates(shift(k3, h), taus[2], pred)
    return tuple(a + (h / 6) * (x1 + 2 * (x2 + x3) + x4) for a, x1, x2, x3, x4 in zip(y, k1, k2, k3, k4, strict=True))


def _stage_table(excitation: Multisine, h: float, steps: int) -> Array:
    """Unit-scale torque at the RK4 stage times of each step of one period, ``(steps, 3, 2)``."""
    u = excitation.replace(scale=1.0).torque(jnp.arange(2 * steps + 1) * (h / 2))
    return jnp.stack([u[0:-1:2], u[1::2], u[2::2]], axis=1)


def _fast_rk4(rates, y0, table, offset, scale, h, substeps, n_per, discard_periods, measured_periods):
    """Integrate from ``y0``; return ``(boundaries (P + 2, 4), q (P · N, 2))``.

    ``boundaries`` are the states at period boundaries ``(D − 1) T, D T, …, (D + P) T`` (the
    first repeated when ``D = 0``).
    """
    steps = n_per * substeps
    index = jnp.arange(steps)

    def step(y, xs):
        u, n = xs
        return _rk4_step(rates, y, offset + scale * u, h, n >= 0), None

    def run_period(carry, _):
        y, _prev = carry
        y_end, _ = jax.lax.scan(step, y, (table, index))
        return (y_end, y), None

    y = tuple(y0[i] for i in range(4))
    (y, prev), _ = jax.lax.scan(run_period, (y, y), None, length=discard_periods)

    def sample(y, xs):
        u, n = xs
        y1 = y
        for s in range(substeps):
            y1 = _rk4_step(rates, y1, offset + scale * u[s], h, n[s] >= 0)
        return y1, jnp.stack(y[:2])

    samples = (table.reshape(n_per, substeps, 3, 2), index.reshape(n_per, substeps))

    def measure_period(y, _):
        y_end, q = jax.lax.scan(sample, y, samples)
        return y_end, (q, jnp.stack(y_end))

    y_last, (q, bound_meas) = jax.lax.scan(measure_period, y, None, length=measured_periods)
    boundaries = jnp.concatenate([jnp.stack(prev)[None], jnp.stack(y)[None], bound_meas], axis=0)
    return boundaries, q.reshape(-1, 2)


# -- transient length ------------------------------------------------------------------------


def transient_periods(
    arm: TwoLinkArm,
    excitation: Multisine,
    q0: ArrayLike = (0.0, 0.0),
    tolerance: float = 1e-10,
) -> int:
    """Whole periods to discard so the slowest transient ``e^{−σ t}`` falls below ``tolerance``.

    ``σ`` is the smallest decay rate ``min |Re λ|`` of the linearisation at ``q0`` (over all arms
    if ``arm`` is batched). The initial transient is of the order of the response itself, so
    ``tolerance`` is relative. Needs concrete (not traced) parameters; raises if the
    linearisation is not stable (then give ``discard_periods`` yourself and add feedback).
    """
    rates = np.atleast_1d(np.asarray(_decay_rates(arm, jnp.asarray(q0, dtype=float))))
    sigma = float(np.min(rates))
    if not sigma > 0:
        raise ValueError(
            f"The linearisation at q0={list(np.asarray(q0))} is not asymptotically stable (slowest decay "
            f"rate {sigma:.3g} 1/s): without friction or at an unstable posture there is no steady state. "
            "Add viscous friction, choose a stable q0, or pass discard_periods explicitly."
        )
    return max(1, math.ceil(math.log(1 / tolerance) / sigma / excitation.period))


@jax.jit
def _decay_rates(arm, q0):
    if arm.masses.ndim == 1:
        return linearise(arm, q0).slowest_decay_rate()
    return jax.vmap(lambda a: linearise(a, q0).slowest_decay_rate())(arm)


# -- one trajectory -----------------------------------------------------------------------------

Solver = Literal["rk4", "diffrax-rk4", "tsit5", "adaptive"]
SOLVERS: tuple[str, ...] = ("rk4", "diffrax-rk4", "tsit5", "adaptive")
Model = Literal["nonlinear", "linear"]


def _check_options(model, solver, sample_step, substeps, discard_periods, measured_periods, period):
    if model not in ("nonlinear", "linear"):
        raise ValueError(f"model must be 'nonlinear' or 'linear', got {model!r}.")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {list(SOLVERS)}, got {solver!r}.")
    if not (isinstance(substeps, int) and substeps >= 1):
        raise ValueError(f"substeps must be a positive integer, got {substeps!r}.")
    if not (isinstance(measured_periods, int) and measured_periods >= 1):
        raise ValueError(f"measured_periods must be a positive integer (whole periods), got {measured_periods!r}.")
    if discard_periods is not None and not (isinstance(discard_periods, int) and discard_periods >= 0):
        raise ValueError(f"discard_periods must be a non-negative integer or None (derived), got {discard_periods!r}.")
    return steps_per_period(period, sample_step)


def simulate(
    arm: TwoLinkArm,
    excitation: Multisine,
    *,
    q0: ArrayLike = (0.0, 0.0),
    model: Model = "nonlinear",
    solver: Solver = "rk4",
    sample_step: float = 0.01,
    substeps: int = 1,
    discard_periods: int | None = None,
    measured_periods: int = 1,
    initial_state: ArrayLike | None = None,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 2_000_000,
    steady_tolerance: float = 1e-6,
) -> Record:
    """Simulate one trajectory and return the measured record.

    Args:
        arm: the arm (unbatched here; use ``vmap`` or ``simulate_batch`` for batches).
        excitation: the multisine ``u(t)``; the applied torque is ``G(q0) + u(t)``.
        q0: operating point [rad]; the arm starts at rest there unless ``initial_state`` is given.
        model: ``"nonlinear"`` arm or its ``"linear"`` isation at ``q0``.
        solver: ``"rk4"`` / ``"tsit5"`` fixed step ``sample_step / substeps``, or ``"adaptive"``.
        sample_step: sampling step ``Δ`` [s]; must divide the period.
        substeps: integration steps per sample (fixed-step solvers).
        discard_periods: transient periods thrown away; ``None`` derives it from the slowest
            decay rate (``transient_periods``; needs concrete parameters).
        measured_periods: number ``P`` of whole periods sampled.
        initial_state: optional ``(q, q')`` start ``(4,)`` instead of rest at ``q0``.
        rtol, atol, max_steps: adaptive solver settings.
        steady_tolerance: largest allowed period-to-period state change before ``NOT_STEADY``.

    Returns:
        A ``Record``. Raises ``ValueError`` for inconsistent options (before tracing).
    """
    n_per = _check_options(model, solver, sample_step, substeps, discard_periods, measured_periods, excitation.period)
    if discard_periods is None:
        discard_periods = transient_periods(arm, excitation, q0)
    q0 = jnp.asarray(q0, dtype=float)
    if q0.shape != (2,):
        raise ValueError(f"q0 must have shape (2,), got {q0.shape}.")
    if initial_state is None:
        y0 = jnp.concatenate([q0, jnp.zeros(2)])
    else:
        y0 = jnp.asarray(initial_state, dtype=float)
        if y0.shape != (4,):
            raise ValueError(f"initial_state must be (q1, q2, q1', q2') of shape (4,), got {y0.shape}.")
    return _simulate(
        arm,
        excitation,
        q0,
        y0,
        model=model,
        solver=solver,
        sample_step=sample_step,
        substeps=substeps,
        n_per=n_per,
        discard_periods=discard_periods,
        measured_periods=measured_periods,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        steady_tolerance=steady_tolerance,
    )


def _simulate(
    arm,
    excitation,
    q0,
    y0,
    *,
    model,
    solver,
    sample_step,
    substeps,
    n_per,
    discard_periods,
    measured_periods,
    rtol,
    atol,
    max_steps,
    steady_tolerance,
) -> Record:
    period = excitation.period
    offset = gravity_torque(arm, q0)
    system = linearise(arm, q0) if model == "linear" else arm
    n_meas = measured_periods * n_per
    t_meas = discard_periods * period + jnp.arange(n_meas) * sample_step
    max_steps_hit = jnp.asarray(False)
    if solver == "adaptive":
        torque = _AnalyticTorque(excitation, offset)
        boundaries, q, max_steps_hit = _adaptive(
            system, torque, y0, t_meas, period, discard_periods, measured_periods, rtol, atol, max_steps
        )
    elif solver == "rk4":
        h = sample_step / substeps
        rates = _linear_rates(system) if model == "linear" else _nonlinear_rates(system)
        table = _stage_table(excitation, h, n_per * substeps)
        boundaries, q = _fast_rk4(
            rates, y0, table, offset, excitation.scale, h, substeps, n_per, discard_periods, measured_periods
        )
    else:
        h = sample_step / substeps
        if solver == "diffrax-rk4":
            # RK4's stages sit on the half-step grid: tabulate the torque there.
            grid = jnp.arange(2 * n_per * substeps) * (h / 2)
            unit = excitation.replace(scale=1.0)
            torque = _TabulatedTorque(unit.torque(grid), offset, excitation.scale, jnp.zeros(()), h / 2)
            fixed = RK4()
        else:
            # Tsit5's stages are off the half-step grid: evaluate the multisine there.
            torque = _AnalyticTorque(excitation, offset)
            fixed = diffrax.Tsit5()
        boundaries, q = _fixed(fixed, system, torque, y0, h, substeps, n_per, discard_periods, measured_periods)
    # The applied torque on the sampling grid: the unit multisine does not depend on the trial
    # (unbatched under vmap), only its scale and offset do.
    tau = offset + excitation.scale * excitation.replace(scale=1.0).torque(t_meas)
    # Steady-state check: the state's change from each period boundary of the measured window to
    # the next, D T … (D + P) T (the boundary (D − 1) T is not used: with D = 1 it is the initial
    # rest state, whose difference from the orbit says nothing about the measured periods).
    change = jnp.max(jnp.abs(jnp.diff(boundaries[1:], axis=0)))
    finite = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(boundaries))
    runaway = jnp.any(jnp.abs(boundaries) > _RUNAWAY) | jnp.any(jnp.abs(q) > _RUNAWAY)
    # A solver that gave up leaves non-finite samples behind: report why, not the symptom.
    status = jnp.where(
        max_steps_hit,
        MAX_STEPS,
        jnp.where(~finite | runaway, DIVERGED, jnp.where(change > steady_tolerance, NOT_STEADY, SUCCESS)),
    )
    return Record(t_meas, tau, q, status.astype(jnp.int32), change, sample_step, period, measured_periods)


def _fixed(solver, system, torque, y0, h, substeps, n_per, discard_periods, measured_periods):
    """Fixed steps through a diffrax solver's ``step``; boundaries as ``_fast_rk4``."""
    args = (system, torque)
    state0 = solver.init(_TERM, 0.0, h, y0, args)

    def step(carry, n):
        y, state = carry
        t0 = n * h
        y1, _, _, state, _ = solver.step(_TERM, t0, t0 + h, y, args, state, made_jump=False)
        return (y1, state), None

    def run_period(carry, p):
        # One period of steps with no output (the transient is not stored).
        inner, _prev = carry
        n0 = p * n_per * substeps
        inner_end, _ = jax.lax.scan(step, inner, n0 + jnp.arange(n_per * substeps))
        return (inner_end, inner[0]), None

    (carry, prev), _ = jax.lax.scan(run_period, ((y0, state0), y0), jnp.arange(discard_periods))
    y_discard = carry[0]

    def sample(carry, i):
        y = carry[0]
        n0 = discard_periods * n_per * substeps + i * substeps
        carry, _ = jax.lax.scan(step, carry, n0 + jnp.arange(substeps))
        return carry, y

    def measure_period(carry, p):
        carry, ys = jax.lax.scan(sample, carry, p * n_per + jnp.arange(n_per))
        return carry, (ys[:, :2], carry[0])

    carry, (q, bound_meas) = jax.lax.scan(measure_period, carry, jnp.arange(measured_periods))
    boundaries = jnp.concatenate([prev[None], y_discard[None], bound_meas], axis=0)
    return boundaries, q.reshape(-1, 2)


def _adaptive(system, torque, y0, t_meas, period, discard_periods, measured_periods, rtol, atol, max_steps):
    """``diffeqsolve`` (Tsit5, PID controller); boundaries as ``_fast_rk4``."""
    # Boundaries from one period before the measurement (or t = 0) to its end.
    t_bound = jnp.arange(max(discard_periods - 1, 0), discard_periods + measured_periods + 1) * period
    ts = jnp.concatenate([t_bound, t_meas])
    order = jnp.argsort(ts)
    sol = diffrax.diffeqsolve(
        _TERM,
        diffrax.Tsit5(),
        t0=0.0,
        t1=t_bound[-1],
        dt0=min(period / 1000, 0.01),
        y0=y0,
        args=(system, torque),
        saveat=diffrax.SaveAt(ts=ts[order]),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )
    ys = jnp.zeros_like(sol.ys).at[order].set(sol.ys)
    n_bound = t_bound.shape[0]
    boundaries = ys[:n_bound]
    failed = sol.result != diffrax.RESULTS.successful
    return boundaries, ys[n_bound:, :2], failed


# -- batches ------------------------------------------------------------------------------------


def simulate_batch(
    arms: TwoLinkArm,
    excitation: Multisine,
    *,
    scales: ArrayLike | None = None,
    q0: ArrayLike = (0.0, 0.0),
    initial_states: ArrayLike | None = None,
    discard_periods: int | None = None,
    shard: bool = True,
    chunk_size: int = 128,
    **options,
) -> Record:
    """Simulate a batch in one compiled call, sharded over all local devices.

    Each device runs its share of the trials ``chunk_size`` at a time (``lax.map`` over
    ``vmap``-ed chunks): on CPU a chunk of ~128 trials keeps the loop's working set in cache and
    is ~2x faster per trial than one 1024-wide ``vmap``; results do not depend on the chunk size.

    Args:
        arms: an arm with a leading batch axis ``B`` on every field (e.g.
            ``jax.vmap(lambda m: point_mass(masses=m))(masses)``).
        excitation: the multisine shared by the batch (unbatched amplitudes and phases; its
            torque table is computed once for the whole batch).
        scales: optional ``(B,)`` per-trial excitation scales (default: ``excitation.scale``).
        q0: operating point shared by the batch.
        initial_states: ``(B, 4)`` or ``None`` (rest at ``q0``).
        discard_periods: ``None`` derives it from the slowest decay over the batch.
        shard: split the batch over ``jax.devices()`` (pad to a multiple of the device count) with
            ``shard_map``. On CPU, expose the cores as devices before importing jax:
            ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>``.
        chunk_size: trials integrated together on one device (static; memory and speed only).
        options: the static options of ``simulate`` (``model``, ``solver``, ``sample_step``,
            ``substeps``, ``measured_periods``, ``rtol``, ``atol``, ``max_steps``,
            ``steady_tolerance``).

    Returns a ``Record`` with a leading batch axis. Results do not depend on the device count.
    One compile per distinct set of static options and shapes.
    """
    if arms.masses.ndim != 2:
        raise ValueError(
            "simulate_batch needs arms with a leading batch axis (masses of shape (B, 2)); use simulate for one arm."
        )
    if excitation.amplitudes.ndim != 2 or excitation.phases.ndim != 2 or excitation.scale.ndim != 0:
        raise ValueError(
            "simulate_batch shares one excitation over the batch; pass per-trial scales with scales=, "
            "or vmap simulate yourself for per-trial amplitudes or phases."
        )
    batch = arms.masses.shape[0]
    q0 = jnp.asarray(q0, dtype=float)
    scales = jnp.broadcast_to(jnp.asarray(excitation.scale if scales is None else scales, dtype=float), (batch,))
    if initial_states is None:
        initial_states = jnp.broadcast_to(jnp.concatenate([q0, jnp.zeros(2)]), (batch, 4))
    initial_states = jnp.asarray(initial_states, dtype=float)
    if initial_states.shape != (batch, 4):
        raise ValueError(f"initial_states must have shape ({batch}, 4), got {initial_states.shape}.")
    opts = _resolve_options(options)
    n_per = _check_options(
        opts["model"],
        opts["solver"],
        opts["sample_step"],
        opts["substeps"],
        discard_periods,
        opts["measured_periods"],
        excitation.period,
    )
    if discard_periods is None:
        discard_periods = transient_periods(arms, excitation, q0)
    if not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    ndev = len(jax.devices()) if shard else 1
    pad = (-batch) % ndev
    chunk = min(chunk_size, (batch + pad) // ndev)
    run = _batched_runner(n_per=n_per, discard_periods=discard_periods, ndev=ndev, chunk=chunk, **opts)
    trials = (arms, scales, initial_states)
    if pad:
        trials = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), trials)
    rec = run(*trials, excitation, q0)
    if pad:
        rec = jax.tree.map(lambda x: x[:batch], rec)
    return rec


_DEFAULT_OPTIONS = dict(
    model="nonlinear",
    solver="rk4",
    sample_step=0.01,
    substeps=1,
    measured_periods=1,
    rtol=1e-10,
    atol=1e-12,
    max_steps=2_000_000,
    steady_tolerance=1e-6,
)


def _resolve_options(options: dict) -> dict:
    unknown = set(options) - set(_DEFAULT_OPTIONS)
    if unknown:
        raise ValueError(f"Unknown simulation option(s) {sorted(unknown)}; allowed: {sorted(_DEFAULT_OPTIONS)}.")
    return {**_DEFAULT_OPTIONS, **options}


@functools.lru_cache(maxsize=64)
def _batched_runner_cached(options_items, ndev, chunk):
    options = dict(options_items)

    def one(arm, scale, y0, excitation, q0):
        return _simulate(arm, excitation.replace(scale=scale), q0, y0, **options)

    def local(arms, scales, initial_states, excitation, q0):
        # This device's trials, ``chunk`` at a time.
        return jax.lax.map(lambda trial: one(*trial, excitation, q0), (arms, scales, initial_states), batch_size=chunk)

    if ndev > 1:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
        spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
        local = jax.shard_map(
            local, mesh=mesh, in_specs=(spec, spec, spec, shared, shared), out_specs=spec, check_vma=False
        )
    return jax.jit(local)


def _batched_runner(ndev: int = 1, chunk: int = 128, **options):
    return _batched_runner_cached(tuple(sorted(options.items())), ndev, chunk)


# -- exact linear steady state ------------------------------------------------------------------


def linear_steady_state(
    arm: TwoLinkArm,
    excitation: Multisine,
    t: Float[ArrayLike, " M"],
    q0: ArrayLike = (0.0, 0.0),
) -> Float[Array, "M 2"]:
    """Exact steady state of the linearised arm: ``q0 + Re Σ_k H(jω_k) U_k e^{jω_k t}`` [rad]."""
    lin = linearise(arm, q0)
    omega = jnp.asarray(excitation.line_frequencies)
    qk = jnp.einsum("kij,kj->ki", lin.frequency_response(omega), excitation.phasors())
    t = jnp.asarray(t)
    phase = jnp.exp(1j * omega[None, :] * t[:, None])
    return lin.q0 + jnp.real(phase @ qk)
