"""Simulation of the arm under a multisine torque, with diffrax as the integration engine.

The arm starts at rest at the operating point ``q0`` with torque ``tau(t) = tau0 + u(t)``,
``tau0 = holding_torque(arm, q0)`` (``G(q0)`` plus any torque offset).
``discard_periods`` whole periods of transient are integrated and thrown away (only the state at
each period boundary is kept, for the steady-state check), then ``measured_periods`` periods are
sampled on the grid ``t0 + n·Δ``, ``n = 0 … P·N − 1`` (``N = T/Δ``, no repeated end point).

Integration paths (all fixed-step paths step ``h = Δ / substeps`` exactly on the sampling grid):

- ``solver="rk4"`` (default): the classic fourth-order Runge–Kutta method
  (``jaxid.simulation.integrate.rk4_step``) in a ``lax.scan`` over steps, the accelerations from the model's
  ``forward_dynamics``. The torque is tabulated once per period at RK4's stage times
  ``t, t + h/2, t + h`` in float64 (``jaxid.simulation.integrate.torque_grid``, shared by the whole batch,
  multiplied by each trial's scale) and fed to the scan, never re-evaluated per stage. Error against a tight reference: about
  1e-8 rad for the Table 2 point-mass arm at ``Δ = 0.01 s`` (see ``scripts/bench_simulate.py``).
  What makes it fast on CPU (measured, ``docs/performance.md``): the state is carried as four
  scalars (under ``vmap`` four contiguous ``(B,)`` arrays, not a strided ``(B, 4)``); the sines and
  cosines share one range-reduction polynomial (``sincos``, ≤ 1 ulp); and two ``lax.cond`` per
  stage make XLA materialise the kernel polynomials and the two accelerations once — XLA's CPU
  fusion otherwise recomputes them inside every consumer, the dynamics in each stage update and
  again in the final combination. The recorded torque is one period's unit multisine, shared by the
  batch; the angles are written in blocks of samples straight into the record's ``(B, N, 2)``
  layout; the status reads the largest ``|q|`` tracked during the integration; and on CPU
  ``simulate_batch`` compiles with 512-bit vectors (``jaxid.simulation.batch.CPU_COMPILER_OPTIONS``).
- ``solver="diffrax-rk4"`` / ``"tsit5"``: the same fixed steps through diffrax's ``solver.step``
  (``jaxid.simulation.integrate.RK4`` with the stage torques of the same grid, or ``diffrax.Tsit5``), for
  comparison; ``tsit5`` evaluates the multisine at its own stage times.
- ``solver="adaptive"``: ``diffrax.diffeqsolve`` with Tsit5 and a PID step-size controller at
  ``rtol``/``atol``, saving at the same grid; the reference path for accuracy checks.

Memory is independent of the transient length: discarded periods are integrated in a loop that
keeps only the state (and the last period-boundary state, for the steady-state check).

A record carries a ``status``: ``SUCCESS``, ``DIVERGED`` (non-finite or runaway state),
``MAX_STEPS`` (adaptive solver ran out of steps) or ``NOT_STEADY`` (state changed more than
``steady_tolerance`` from one period boundary to the next over the measured window).

``simulate`` is one trajectory and is ``jit``/``vmap``/``grad``-compatible; ``simulate_batch``
is the compiled, device-sharded batch version used by sweeps. The integration paths live in
``jaxid.simulation.paths``, the RK4 step, torque grid and trigonometry in ``jaxid.simulation.integrate``, the
transient length in ``jaxid.simulation.transient`` and the sharded runner in ``jaxid.simulation.batch``.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..excitation.multisine import Multisine
from ..excitation.phasors import respond, synthesise
from ..model import TwoLinkArm
from ..types import SIMULATION_STATUSES, Record, Status, compiled_when_concrete, require_float64, steps_per_period
from .batch import resolve_options, run_batch
from .integrate import RK4, sincos
from .linearisation import linearise
from .paths import trajectory
from .transient import transient_periods, transient_periods_each

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
    "transient_periods_each",
    "steps_per_period",
    "sincos",
]

SUCCESS, DIVERGED, MAX_STEPS, NOT_STEADY = Status.SUCCESS, Status.DIVERGED, Status.MAX_STEPS, Status.NOT_STEADY
STATUS_NAMES = SIMULATION_STATUSES


Solver = Literal["rk4", "diffrax-rk4", "tsit5", "adaptive"]
SOLVERS: tuple[str, ...] = ("rk4", "diffrax-rk4", "tsit5", "adaptive")
Model = Literal["nonlinear", "linear"]


def _valid_count(n) -> bool:
    if isinstance(n, jax.core.Tracer):
        return jnp.issubdtype(n.dtype, jnp.integer) and n.ndim == 0
    if isinstance(n, bool):
        return False
    return isinstance(n, (int, np.integer)) and n >= 0


def _check_options(model, solver, sample_step, substeps, discard_periods, measured_periods, period):
    if model not in ("nonlinear", "linear"):
        raise ValueError(f"model must be 'nonlinear' or 'linear', got {model!r}.")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {list(SOLVERS)}, got {solver!r}.")
    if not (isinstance(substeps, int) and substeps >= 1):
        raise ValueError(f"substeps must be a positive integer, got {substeps!r}.")
    if not (isinstance(measured_periods, int) and measured_periods >= 1):
        raise ValueError(f"measured_periods must be a positive integer (whole periods), got {measured_periods!r}.")
    if discard_periods is not None and not _valid_count(discard_periods):
        raise ValueError(f"discard_periods must be a non-negative integer or None (derived), got {discard_periods!r}.")
    return steps_per_period(period, sample_step)


#: ``simulate``'s record, compiled as one program on concrete inputs (the options are checked first).
_trajectory = compiled_when_concrete(trajectory)


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
        discard_periods: transient periods thrown away (a Python int, or a traced integer);
            ``None`` derives it from the slowest decay rate (``transient_periods``; needs
            concrete parameters).
        measured_periods: number ``P`` of whole periods sampled.
        initial_state: optional ``(q, q')`` start ``(4,)`` instead of rest at ``q0``.
        rtol, atol, max_steps: adaptive solver settings.
        steady_tolerance: largest allowed period-to-period state change before ``NOT_STEADY``.

    Returns:
        A ``Record``. Raises ``ValueError`` for inconsistent options (before tracing).
    """
    require_float64("simulate")
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
    return _trajectory(
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


def simulate_batch(
    arms: TwoLinkArm,
    excitation: Multisine,
    *,
    scales: ArrayLike | None = None,
    q0: ArrayLike = (0.0, 0.0),
    initial_states: ArrayLike | None = None,
    discard_periods: int | ArrayLike | None = None,
    shard: bool = True,
    chunk_size: int = 512,
    **options,
) -> Record:
    """Simulate a batch in one compiled call, sharded over all local devices.

    Each device runs its share of the trials ``chunk_size`` at a time (``lax.map`` over
    ``vmap``-ed chunks). On CPU wider chunks amortise the per-operation overhead of XLA's loop
    (about 56 small kernels per RK4 step) and 2048 and more fall out of cache: a chunk of 512
    measured ~1.3x faster per trial than 128 (``scripts/bench_simulate.py``). The chunk size
    changes results by rounding at most. On CPU the call is compiled with
    ``jaxid.simulation.batch.CPU_COMPILER_OPTIONS`` (512-bit vectors, ~1.5x per trial where the processor has
    AVX-512) unless ``XLA_FLAGS`` sets the same option or an outer ``jit`` traces the call.

    Args:
        arms: an arm with a leading batch axis ``B`` on every field (e.g.
            ``jax.vmap(lambda m: point_mass(masses=m))(masses)``).
        excitation: the multisine shared by the batch (unbatched amplitudes and phases; its
            torque table is computed once for the whole batch).
        scales: optional ``(B,)`` per-trial excitation scales (default: ``excitation.scale``).
        q0: operating point shared by the batch.
        initial_states: ``(B, 4)`` or ``None`` (rest at ``q0``).
        discard_periods: transient periods thrown away: an int for every trial, a ``(B,)`` integer
            array (one count per trial), or ``None``: each trial's own count from its own
            parameters (``transient_periods_each``). Never derived from other trials, so a trial's
            record depends only on its own inputs (a traced input: any counts, one compile).
        shard: split the batch over ``jax.devices()`` (pad to a multiple of the device count) with
            ``shard_map``. On CPU, expose the cores as devices before importing jax:
            ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>``.
        chunk_size: trials integrated together on one device (static; memory and speed only).
        options: the static options of ``simulate`` (``model``, ``solver``, ``sample_step``,
            ``substeps``, ``measured_periods``, ``rtol``, ``atol``, ``max_steps``,
            ``steady_tolerance``).

    Returns a ``Record`` with a leading batch axis. A trial's record depends only on its own inputs
    (the device count and chunk width change it by rounding at most).
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
    require_float64("simulate_batch")
    opts = resolve_options(options)
    n_per = _check_options(
        opts["model"],
        opts["solver"],
        opts["sample_step"],
        opts["substeps"],
        None,
        opts["measured_periods"],
        excitation.period,
    )
    if discard_periods is None:
        discards = transient_periods_each(arms, excitation, q0)
    else:
        discards = np.asarray(discard_periods)
        if not (np.issubdtype(discards.dtype, np.integer) and discards.ndim <= 1 and np.all(discards >= 0)):
            raise ValueError(
                f"discard_periods must be a non-negative integer, a ({batch},) integer array or None, "
                f"got {discard_periods!r}."
            )
    discards = np.broadcast_to(discards, (batch,))
    if not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    ndev = len(jax.devices()) if shard else 1
    return run_batch(
        arms,
        scales,
        initial_states,
        discards,
        excitation,
        q0,
        ndev=ndev,
        chunk_size=chunk_size,
        options={**opts, "n_per": n_per},
    )


def linear_steady_state(
    arm: TwoLinkArm,
    excitation: Multisine,
    t: Float[ArrayLike, " M"],
    q0: ArrayLike = (0.0, 0.0),
) -> Float[Array, "M 2"]:
    """Exact steady state of the linearised arm: ``q0 + Re Σ_k H(jω_k) U_k e^{jω_k t}`` [rad]."""
    lin = linearise(arm, q0)
    omega = jnp.asarray(excitation.line_frequencies)
    qk = respond(lin.frequency_response(omega), excitation.phasors())
    return lin.q0 + synthesise(qk, omega, t)
