"""Periodic steady state of the nonlinear arm by shooting, with its parameter sensitivities.

Under a multisine of period ``T`` the (damped) arm settles on a ``T``-periodic orbit. Instead of
integrating the transient away (``simulate``), this module solves for the orbit directly:

- **Period map.** ``Φ(x0; θ)`` integrates one period from the state ``x0 = (q, q')`` at ``t = 0``
  with the same fixed-step RK4 and the same torque grid as ``simulate(solver="rk4")`` (step
  ``Δ / substeps``, ``jaxid.simulation.integrate.rk4_step`` and ``torque_grid``), returning ``x(T)`` and the angle
  samples ``q(nΔ)``, ``n = 0 … N − 1``. On a periodic orbit these samples are exactly what
  ``simulate`` records once the transient has died out (up to rounding and the residual
  transient, ``~e^{−σ · discard · T}``).
- **Shooting.** The orbit is the root of ``Φ(x0; θ) − x0`` (4 unknowns), found by Newton's method
  (``optimistix.Newton``), started from the linearised arm's steady state pushed through
  ``relax_periods`` periods of the map. Its derivative in ``θ`` follows from the implicit function
  theorem (``optimistix.ImplicitAdjoint``), so ``jax.jacfwd`` of ``periodic_steady_state(...).q``
  is exact without differentiating through the Newton iterations.
- **One-pass sensitivities.** ``period_sensitivities`` integrates one period with forward-mode
  tangents for ``x0`` and the unknowns together (``4 + p`` tangent lanes in one ``lax.scan``) and
  returns what a Gauss-Newton step needs: the Newton correction of ``x0`` and the Jacobian of the
  sampled orbit in ``θ`` *along the periodic manifold*, ``J = Q_θ + Q_x (I − Φ_x)⁻¹ Φ_θ``. The
  nonlinear output-error estimator and its Cramér–Rao bound are built on it.
- **States with a lead-in.** ``period_states`` integrates from a state some samples *before*
  ``t = 0`` (the torque is periodic) and returns every state of the period: a start-state error
  decays during the lead-in. The simulator's fast rates kernel (``jaxid.simulation.rate_kernels.fast_rates``);
  the coarse route of ``nonlinear_oe`` runs it on a coarse and on the full grid.

The applied torque ``tau(t) = offset + u(t)`` is **known** (it is what the experimenter applied);
``offset`` is passed explicitly and is never differentiated with the parameters. At
``q0 = (0, 0)`` it is zero.

Everything here is pure and ``jit``/``vmap``-compatible; ``excitation.harmonics``, the sampling
step, ``substeps`` and the unknowns are static.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float, Int

from .. import linalg
from ..excitation.multisine import Multisine
from ..excitation.phasors import respond, synthesise
from ..model import TwoLinkArm, forward_dynamics, holding_torque, validate_unknowns
from ..types import steps_per_period
from .integrate import rk4_step, torque_grid
from .linearisation import linearise
from .rate_kernels import fast_rates

__all__ = [
    "PeriodicOrbit",
    "PeriodSensitivities",
    "torque_table",
    "period_map",
    "linear_initial_state",
    "periodic_steady_state",
    "period_sensitivities",
    "period_states",
    "rk4_table_step",
]


class TorqueTable(eqx.Module):
    """The applied torque at the RK4 stage times of every step of one period (periodic lookup).

    ``torque(n) = offset + scale · grid[n mod S]``, ``(3, 2)`` torques at ``n h``, ``(n + 1/2) h``
    and ``(n + 1) h``, with ``grid = jaxid.simulation.integrate.torque_grid`` (``S = N · substeps`` steps):
    the same grid ``simulate(solver="rk4")`` uses, so the two integrate the same discrete dynamics.
    """

    grid: Float[Array, "S 3 2"]
    offset: Float[Array, "2"]
    scale: Float[Array, ""]
    step: float = eqx.field(static=True)

    def __call__(self, n: Int[Array, ""]) -> Float[Array, "3 2"]:
        return self.offset + self.scale * self.grid[jnp.mod(n, self.grid.shape[0])]


def torque_table(
    excitation: Multisine,
    offset: Float[ArrayLike, "2"] = (0.0, 0.0),
    *,
    sample_step: float = 0.01,
    substeps: int = 1,
) -> TorqueTable:
    """Tabulate ``offset + u(t)`` at the RK4 stage times of one period (``torque_grid``).

    Raises ``ValueError`` if ``sample_step`` does not divide the period. ``offset`` [N m] is the
    applied holding torque of the *true* arm (known, applied), zero at ``q0 = (0, 0)``.
    """
    if not (isinstance(substeps, int) and substeps >= 1):
        raise ValueError(f"substeps must be a positive integer, got {substeps!r}.")
    n_per = steps_per_period(excitation.period, sample_step)
    h = sample_step / substeps
    grid = torque_grid(excitation, h, n_per * substeps)
    return TorqueTable(grid, jnp.asarray(offset, dtype=float), excitation.scale, h)


def rk4_table_step(arm: TwoLinkArm, torque: TorqueTable, y: Array, n: Array) -> Array:
    """One RK4 step of the ``(4,)`` state ``y = (q, q')`` over ``[n h, (n + 1) h]`` with the table's
    stage torques (``jaxid.simulation.integrate.rk4_step``, the simulator's step; ``n`` wraps per period)."""

    def f(y, tau):
        return jnp.concatenate([y[2:], forward_dynamics(arm, y[:2], y[2:], tau)])

    return rk4_step(f, y, torque(n), torque.step)


def period_map(
    arm: TwoLinkArm,
    torque: TorqueTable,
    initial_state: Float[ArrayLike, "4"],
    *,
    samples_per_period: int,
    substeps: int = 1,
) -> tuple[Float[Array, "4"], Float[Array, "N 2"]]:
    """Integrate one period from ``initial_state`` at ``t = 0``.

    Returns ``(x(T), q)`` with ``x(T)`` the state ``(q, q')`` after one period and ``q`` the
    ``(N, 2)`` angle samples at ``t = nΔ`` [rad]. Fixed-step RK4 with ``substeps`` steps per
    sample, in a ``lax.scan`` (memory independent of ``N`` apart from the output).
    """
    return _period_map(arm, torque, jnp.asarray(initial_state, dtype=float), samples_per_period, substeps)


# One module-level compiled program (arrays traced, the sizes static), not a closure per call: a
# caller's program calls ``period_map`` several times with the same shapes (the relaxation periods,
# Newton's function, the final period, the fits' starts), and a jitted function is traced and
# lowered once per shape and transformation there and its calls share that body (the arithmetic is
# the same: XLA inlines the calls). Issue 29.
@eqx.filter_jit
def _period_map(arm, torque, y0, samples_per_period, substeps):
    def sample(y, i):
        def step(y, n):
            return rk4_table_step(arm, torque, y, n), None

        y1, _ = jax.lax.scan(step, y, i * substeps + jnp.arange(substeps))
        return y1, y[:2]

    y_end, q = jax.lax.scan(sample, y0, jnp.arange(samples_per_period))
    return y_end, q


def linear_initial_state(
    arm: TwoLinkArm, excitation: Multisine, q0: Float[ArrayLike, "2"] = (0.0, 0.0)
) -> Float[Array, "4"]:
    """State ``(q, q')`` at ``t = 0`` of the linearised arm's exact steady state (a starting guess)."""
    lin = linearise(arm, q0)
    omega = jnp.asarray(excitation.line_frequencies)
    qk = respond(lin.frequency_response(omega), excitation.phasors())
    t0 = jnp.zeros(1)
    return jnp.concatenate([lin.q0 + synthesise(qk, omega, t0)[0], synthesise(qk, omega, t0, derivative=1)[0]])


class PeriodicOrbit(eqx.Module):
    """The periodic steady state over one period.

    Attributes:
        initial_state: ``(4,)`` state ``(q, q')`` at ``t = 0`` (and at every period boundary).
        q: ``(N, 2)`` angles at ``t = nΔ`` [rad].
        defect: ``max |Φ(x0) − x0|`` of the returned orbit [rad, rad/s].
        converged: whether Newton's method met its tolerance.
    """

    initial_state: Float[Array, "4"]
    q: Float[Array, "N 2"]
    defect: Float[Array, ""]
    converged: Array


def periodic_steady_state(
    arm: TwoLinkArm,
    excitation: Multisine,
    *,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    offset: Float[ArrayLike, "2"] | None = None,
    sample_step: float = 0.01,
    substeps: int = 1,
    initial_state: Float[ArrayLike, "4"] | None = None,
    relax_periods: int = 1,
    max_iterations: int = 20,
    tolerance: float = 1e-11,
) -> PeriodicOrbit:
    """The arm's ``T``-periodic orbit under ``G(q0) + u(t)``, by Newton shooting.

    Args:
        arm: the arm (its parameters may be traced; derivatives use the implicit function theorem).
        excitation: the multisine ``u(t)``.
        q0: operating point [rad] (the starting guess is the linearisation's steady state there).
        offset: applied holding torque [N m]; default ``G(q0)`` of ``arm`` (treated as data: it is
            wrapped in ``stop_gradient``).
        sample_step, substeps: sampling step ``Δ`` [s] and RK4 steps per sample, as ``simulate``.
        initial_state: starting guess for ``x0`` (default: linear steady state at ``t = 0``).
        relax_periods: periods of the map applied to the guess before Newton (each contracts the
            error by about ``e^{−σ T}``).
        max_iterations, tolerance: Newton settings (absolute and relative, max norm).

    Returns a ``PeriodicOrbit``; ``converged`` is ``False`` (never an exception) when Newton fails,
    so it is safe under ``vmap``.
    """
    return _periodic_steady_state(
        arm, excitation, q0, offset, sample_step, substeps, initial_state, relax_periods, max_iterations, tolerance
    )


# Compiled at module level for the reason ``_period_map`` is: IDIM-IV solves for the orbit once per
# iteration with the same shapes, and these calls then share one traced Newton solve.
@eqx.filter_jit
def _periodic_steady_state(
    arm, excitation, q0, offset, sample_step, substeps, initial_state, relax_periods, max_iterations, tolerance
):
    n_per = steps_per_period(excitation.period, sample_step)
    if offset is None:
        offset = holding_torque(arm, jnp.asarray(q0, dtype=float))
    offset = jax.lax.stop_gradient(jnp.asarray(offset, dtype=float))
    torque = torque_table(excitation, offset, sample_step=sample_step, substeps=substeps)
    if initial_state is None:
        initial_state = linear_initial_state(arm, excitation, q0)
    x = jax.lax.stop_gradient(jnp.asarray(initial_state, dtype=float))

    def phi(x, arm):
        return period_map(arm, torque, x, samples_per_period=n_per, substeps=substeps)[0]

    for _ in range(relax_periods):
        x = phi(x, jax.lax.stop_gradient(arm))
    sol = optx.root_find(
        lambda x, arm: phi(x, arm) - x,
        optx.Newton(rtol=tolerance, atol=tolerance, linear_solver=linalg.SmallSolver()),
        x,
        args=arm,
        max_steps=max_iterations,
        throw=False,
        adjoint=optx.ImplicitAdjoint(linear_solver=linalg.SmallSolver()),
    )
    x0 = sol.value
    x_end, q = period_map(arm, torque, x0, samples_per_period=n_per, substeps=substeps)
    defect = jax.lax.stop_gradient(jnp.max(jnp.abs(x_end - x0)))
    converged = (sol.result == optx.RESULTS.successful) & jnp.isfinite(defect)
    return PeriodicOrbit(x0, q, defect, converged)


class PeriodSensitivities(eqx.Module):
    """One period integrated with tangents, reduced to the periodic manifold.

    Attributes:
        q: ``(N, 2)`` angle samples from the current ``x0`` [rad].
        q_corrected: ``q + Q_x δx0``: the samples after the Newton correction of ``x0`` (first order).
        jacobian: ``(N, 2, p)`` ``d q / d θ`` along the periodic orbit, ``Q_θ + Q_x (I − Φ_x)⁻¹ Φ_θ``.
        next_state: ``x0 + δx0`` with ``δx0 = (I − Φ_x)⁻¹ (Φ(x0) − x0)`` (Newton's step for ``x0``).
        state_gain: ``(4, p)`` ``(I − Φ_x)⁻¹ Φ_θ``, the first-order move of ``x0`` per unit ``δθ``.
        defect: ``max |Φ(x0) − x0|``.
    """

    q: Float[Array, "N 2"]
    q_corrected: Float[Array, "N 2"]
    jacobian: Float[Array, "N 2 p"]
    next_state: Float[Array, "4"]
    state_gain: Float[Array, "4 p"]
    defect: Float[Array, ""]


def period_sensitivities(
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    theta: Float[ArrayLike, "p"],  # noqa: F821
    initial_state: Float[ArrayLike, "4"],
    torque: TorqueTable,
    *,
    samples_per_period: int,
    substeps: int = 1,
) -> PeriodSensitivities:
    """Integrate one period with ``4 + p`` forward-mode tangents and reduce (see module docstring).

    ``theta`` holds the values of ``unknowns`` (the rest of the arm comes from ``nominal``). Cost:
    one ``lax.scan`` over ``N · substeps`` RK4 steps carrying the primal and ``4 + p`` tangents.
    """
    unknowns = validate_unknowns(unknowns)
    theta = jnp.asarray(theta, dtype=float)
    x0 = jnp.asarray(initial_state, dtype=float)
    p = theta.shape[-1]
    z = jnp.concatenate([x0, theta])

    def f(z):
        arm = nominal.with_parameters(unknowns, z[4:])
        return period_map(arm, torque, z[:4], samples_per_period=samples_per_period, substeps=substeps)

    basis = jnp.eye(4 + p)
    (x_end, q), (dx_end, dq) = jax.vmap(lambda v: jax.jvp(f, (z,), (v,)), out_axes=(None, 0))(basis)
    phi_x, phi_t = dx_end[:4].T, dx_end[4:].T  # (4, 4), (4, p)
    q_x, q_t = jnp.moveaxis(dq[:4], 0, -1), jnp.moveaxis(dq[4:], 0, -1)  # (N, 2, 4), (N, 2, p)
    lhs = jnp.eye(4) - phi_x
    solved = linalg.solve(lhs, jnp.concatenate([(x_end - x0)[:, None], phi_t], axis=1))
    dx0, gain = solved[:, 0], solved[:, 1:]
    return PeriodSensitivities(
        q=q,
        q_corrected=q + q_x @ dx0,
        jacobian=q_t + q_x @ gain,
        next_state=x0 + dx0,
        state_gain=gain,
        defect=jnp.max(jnp.abs(x_end - x0)),
    )


def period_states(
    arm: TwoLinkArm,
    torque: TorqueTable,
    initial_state: Float[ArrayLike, "4"],
    *,
    samples_per_period: int,
    substeps: int = 1,
    lead_in: int = 0,
) -> tuple[Float[Array, "N 4"], Float[Array, "4"]]:
    """Integrate ``lead_in`` samples into the period and then one period; return every state.

    Starts from ``initial_state`` at sample ``N − lead_in`` (time ``−lead_in · Δ``, the torque being
    ``T``-periodic), integrates to ``t = 0`` and on over one period with the same RK4 steps as
    ``period_map``. Returns ``(x, x(T))``: ``x`` the ``(N, 4)`` states ``(q, q')`` at ``t = nΔ``
    and the state after the period. The lead-in lets a start-state error decay before the
    recorded window (by ``|Φ_x|`` over a period for this arm, ~1e-10 per 100 s), so
    ``x[N − lead_in]`` of one call is the warm start of the next. The rates are the simulator's
    fast kernel (``jaxid.simulation.rate_kernels.fast_rates``: the state as four scalars, equal to
    ``forward_dynamics`` to rounding); ``vmap`` it over trials and parameter lanes.
    """
    return _period_states(arm, torque, jnp.asarray(initial_state, dtype=float), samples_per_period, substeps, lead_in)


# Compiled at module level for the reason ``_period_map`` is (the coarse route integrates the same
# coarse period at its start and in every loop body).
@eqx.filter_jit
def _period_states(arm, torque, y0, samples_per_period, substeps, lead_in):
    n_steps = samples_per_period * substeps
    rates = fast_rates(arm)

    def step(y, n):
        return rk4_step(lambda y, tau: rates(y, tau, n >= 0), y, torque(n), torque.step)

    def lead(y, n):
        return step(y, n), None

    y = tuple(y0[k] for k in range(4))
    y, _ = jax.lax.scan(lead, y, n_steps - lead_in * substeps + jnp.arange(lead_in * substeps))

    def sample(y, i):
        y1 = y
        for k in range(substeps):
            y1 = step(y1, i * substeps + k)
        return y1, jnp.stack(y)

    y_end, states = jax.lax.scan(sample, y, jnp.arange(samples_per_period))
    return states, jnp.stack(y_end)
