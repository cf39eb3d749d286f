"""One trajectory of the arm under a multisine: the integration paths behind ``simulate``.

``trajectory(arm, excitation, q0, y0, ...)`` integrates ``discard_periods`` periods of transient
(keeping only the state) and samples ``measured_periods`` periods on the grid, by one of

- ``"rk4"``: ``jaxid.simulation.integrate.rk4_step`` in a ``lax.scan``, the state carried as four scalars,
  the torque from ``jaxid.simulation.integrate.torque_grid`` (computed once, shared by a batch), each
  stage's sine/cosine kernels and its two accelerations materialised once behind ``lax.cond``
  (XLA's CPU fusion otherwise recomputes them inside every consumer; the rates kernels of
  ``jaxid.simulation.rate_kernels``);
- ``"diffrax-rk4"``: the same steps through diffrax's ``solver.step`` with ``jaxid.simulation.integrate.RK4``
  (stage torques from the same grid, so both integrate the same discrete dynamics);
- ``"tsit5"``: diffrax Tsit5 at the same fixed step (multisine evaluated at its own stages);
- ``"adaptive"``: ``diffrax.diffeqsolve`` (Tsit5, PID controller), the accuracy reference.

The nonlinear arm's accelerations come from the model's ``forward_dynamics`` (one dynamics
function), the linearised arm's from its constant matrices. ``discard_periods`` may be a Python
int or a traced integer (a per-trial count under ``vmap``): the transient loop is a
``fori_loop`` either way. The status rules are here too.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..excitation.multisine import Multisine
from ..linalg import solve_2x2
from ..model import forward_dynamics, holding_torque
from ..types import Record, Status
from .integrate import RK4, rk4_step, torque_grid
from .linearisation import LinearArm, linearise
from .rate_kernels import _linear_rates, fast_rates

__all__ = ["trajectory", "RUNAWAY"]

#: A state this large (rad or rad/s) is treated as a runaway trajectory (``DIVERGED``).
RUNAWAY = 1e4


# -- vector fields (diffrax paths) ---------------------------------------------------------------


def _field(system, y: Array, tau: Array) -> Array:
    if isinstance(system, LinearArm):
        rhs = tau - system.tau0 - system.stiffness @ (y[:2] - system.q0) - system.damping @ y[2:]
        return jnp.concatenate([y[2:], solve_2x2(system.mass, rhs)])
    return jnp.concatenate([y[2:], forward_dynamics(system, y[:2], y[2:], tau)])


class _StepTorque(eqx.Module):
    # The torques of one RK4 step (a torque_grid row, offset and scaled), looked up by stage time.
    stages: Array  # (3, 2) at t0, t0 + h/2, t0 + h
    t0: Array | float
    half_step: float = eqx.field(static=True)

    def __call__(self, t):
        return self.stages[jnp.clip(jnp.round((t - self.t0) / self.half_step).astype(jnp.int32), 0, 2)]


class _AnalyticTorque(eqx.Module):
    excitation: Multisine
    offset: Array

    def __call__(self, t):
        return self.offset + self.excitation.torque(t)


def _vector_field(t, y, args):
    system, torque = args
    return _field(system, y, torque(t))


_TERM = diffrax.ODETerm(_vector_field)


# -- fast RK4 ------------------------------------------------------------------------------------


def _record_block(n_per: int, largest: int = 256) -> int:
    # Samples per record block: the largest divisor of N up to ``largest`` (250 for N = 10 000), or
    # the whole period when N has no divisor of a useful size.
    block = max(d for d in range(1, min(n_per, largest) + 1) if n_per % d == 0)
    return block if block >= 16 else n_per


def _fast_rk4(rates, y0, grid, offset, scale, h, substeps, n_per, discard_periods, measured_periods):
    """Integrate from ``y0``; return ``(boundaries (P + 2, 4), q (P · N, 2), max |q|)``.

    ``boundaries`` are the states at period boundaries ``(D − 1) T, D T, …, (D + P) T`` (the
    first repeated when ``D = 0``).
    """
    steps = n_per * substeps
    index = jnp.arange(steps)

    def step(y, xs):
        u, n = xs
        return rk4_step(lambda y, tau: rates(y, tau, n >= 0), y, offset + scale * u, h), None

    def run_period(_, carry):
        y, _prev = carry
        y_end, _ = jax.lax.scan(step, y, (grid, index))
        return (y_end, y)

    y = tuple(y0[i] for i in range(4))
    y, prev = jax.lax.fori_loop(0, discard_periods, run_period, (y, y))

    def sample(carry, xs):
        y, peak = carry
        u, n = xs
        y1 = y
        for s in range(substeps):
            y1 = rk4_step(lambda y, tau, s=s: rates(y, tau, n[s] >= 0), y1, offset + scale * u[s], h)
        # The largest |q| recorded so far, carried (NaN propagates through maximum): reducing the
        # record afterwards cost about a fifth of the integration on CPU.
        peak = jnp.maximum(peak, jnp.maximum(jnp.abs(y[0]), jnp.abs(y[1])))
        return (y1, peak), jnp.stack(y[:2])

    # The record is written in blocks of samples into a carried (P · N, 2) buffer: under vmap the
    # buffer is (B, P · N, 2), the final layout, and each block is transposed from the scan's
    # (block, B, 2) while it is in cache (stacking the samples as scan outputs gave (P · N, B, 2) and
    # one transpose of the whole record afterwards).
    block = _record_block(n_per)
    n_blocks = n_per // block
    samples = (grid.reshape(n_blocks, block, substeps, 3, 2), index.reshape(n_blocks, block, substeps))

    def measure_block(j, carry):
        y, peak, q, p = carry
        (y, peak), q_block = jax.lax.scan(sample, (y, peak), jax.tree.map(lambda x: x[j], samples))
        q = jax.lax.dynamic_update_slice(q, q_block, ((p * n_blocks + j) * block, 0))
        return y, peak, q, p

    def measure_period(carry, p):
        y, peak, q, _ = jax.lax.fori_loop(0, n_blocks, measure_block, (*carry, p))
        return (y, peak, q), jnp.stack(y)

    record = jnp.zeros((measured_periods * n_per, 2), dtype=y[0].dtype)
    (y_last, peak, q), bound_meas = jax.lax.scan(
        measure_period, (y, jnp.zeros_like(y[0]), record), jnp.arange(measured_periods)
    )
    boundaries = jnp.concatenate([jnp.stack(prev)[None], jnp.stack(y)[None], bound_meas], axis=0)
    return boundaries, q, peak


# -- diffrax paths -------------------------------------------------------------------------------


def _fixed(solver, system, torque_at, y0, h, substeps, n_per, discard_periods, measured_periods):
    """Fixed steps through a diffrax solver's ``step``; boundaries as ``_fast_rk4``.

    ``torque_at(n)`` is the torque function for step ``n`` (its stage times ``n h … (n + 1) h``).
    """
    state0 = solver.init(_TERM, 0.0, h, y0, (system, torque_at(0)))

    def step(carry, n):
        y, state = carry
        t0 = n * h
        y1, _, _, state, _ = solver.step(_TERM, t0, t0 + h, y, (system, torque_at(n)), state, made_jump=False)
        return (y1, state), None

    def run_period(p, carry):
        # One period of steps with no output (the transient is not stored).
        inner, _prev = carry
        n0 = p * n_per * substeps
        inner_end, _ = jax.lax.scan(step, inner, n0 + jnp.arange(n_per * substeps))
        return (inner_end, inner[0])

    carry, prev = jax.lax.fori_loop(0, discard_periods, run_period, ((y0, state0), y0))
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
    # Boundaries from one period before the measurement (repeated at t = 0 when D = 0) to its end.
    d = discard_periods
    first = jnp.maximum(d - 1, 0) if isinstance(d, jax.Array) else max(d - 1, 0)
    t_bound = jnp.concatenate([jnp.reshape(first, (1,)), d + jnp.arange(measured_periods + 1)]) * period
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
    failed = sol.result != diffrax.RESULTS.successful
    return ys[:n_bound], ys[n_bound:, :2], failed


# -- one trajectory ------------------------------------------------------------------------------


def trajectory(
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
    """One record (options already checked by ``simulate``); ``discard_periods`` int or traced."""
    period = excitation.period
    offset = holding_torque(arm, q0)
    system = linearise(arm, q0) if model == "linear" else arm
    n_meas = measured_periods * n_per
    t_meas = discard_periods * period + jnp.arange(n_meas) * sample_step
    max_steps_hit = jnp.asarray(False)
    peak = None  # max |q| over the record, when the integrator tracked it
    h = sample_step / substeps
    if solver == "adaptive":
        torque = _AnalyticTorque(excitation, offset)
        boundaries, q, max_steps_hit = _adaptive(
            system, torque, y0, t_meas, period, discard_periods, measured_periods, rtol, atol, max_steps
        )
    elif solver == "rk4":
        rates = _linear_rates(system) if model == "linear" else fast_rates(system)
        grid = torque_grid(excitation, h, n_per * substeps)
        boundaries, q, peak = _fast_rk4(
            rates, y0, grid, offset, excitation.scale, h, substeps, n_per, discard_periods, measured_periods
        )
    else:
        if solver == "diffrax-rk4":
            # RK4's stages sit on the torque grid: the same stage torques as the fast path.
            grid = torque_grid(excitation, h, n_per * substeps)
            steps = n_per * substeps

            def torque_at(n):
                return _StepTorque(offset + excitation.scale * grid[jnp.mod(n, steps)], n * h, h / 2)

            fixed = RK4()
        else:
            # Tsit5's stages are off the grid: evaluate the multisine there.
            analytic = _AnalyticTorque(excitation, offset)

            def torque_at(n):
                return analytic

            fixed = diffrax.Tsit5()
        boundaries, q = _fixed(fixed, system, torque_at, y0, h, substeps, n_per, discard_periods, measured_periods)
    # The applied torque on the sampling grid. The multisine has period T, so the unit multisine is
    # evaluated on one period's grid n Δ and repeated: it depends neither on the trial nor on its
    # (traced) number of discarded periods, so under vmap it is computed once per batch (evaluated at
    # D T + n Δ per trial it cost several times the integration itself). These are the torques the
    # fixed-step paths apply at the samples (the torque_grid rows: bit for bit with jax 0.10; jax 0.12
    # may round the sum of cosines in another fused context differently, by up to 2 ulp).
    unit = excitation.replace(scale=1.0).torque(jnp.arange(n_per) * sample_step)
    tau = offset + excitation.scale * jnp.tile(unit, (measured_periods, 1))
    return Record(
        t_meas,
        tau,
        q,
        _status(boundaries, q if peak is None else peak, max_steps_hit, steady_tolerance),
        _change(boundaries),
        sample_step,
        period,
        measured_periods,
    )


def _change(boundaries):
    # Steady-state check: the state's change from each period boundary of the measured window to
    # the next, D T … (D + P) T (the boundary (D − 1) T is not used: with D = 1 it is the initial
    # rest state, whose difference from the orbit says nothing about the measured periods).
    return jnp.max(jnp.abs(jnp.diff(boundaries[1:], axis=0)))


def _status(boundaries, q, max_steps_hit, steady_tolerance):
    # ``q``: the recorded angles, or their largest magnitude (tracked during the integration).
    # One max-abs reduction per array: NaN propagates through the max and fails the comparison, as
    # does inf (two reductions per array over a record cost a sizeable share of a short simulation).
    bounded = (jnp.max(jnp.abs(q)) <= RUNAWAY) & (jnp.max(jnp.abs(boundaries)) <= RUNAWAY)
    # A solver that gave up leaves non-finite samples behind: report why, not the symptom.
    status = jnp.where(
        max_steps_hit,
        Status.MAX_STEPS,
        jnp.where(
            ~bounded,
            Status.DIVERGED,
            jnp.where(_change(boundaries) > steady_tolerance, Status.NOT_STEADY, Status.SUCCESS),
        ),
    )
    return status.astype(jnp.int32)
