"""A segment simulated with its sensitivities: the states ``y`` and ``S = ∂y/∂(θ, y₀)`` carried together
through ``jaxid.estimate.logs.stepping``'s RK4 steps (forward sensitivities of the discrete map, exact
to round-off: the same numbers as ``jax.jacfwd`` of ``stepping.simulate_segments``, tested).

Why not ``jacfwd``: its ``p + 2 n`` tangents each pass through ``accelerations``' custom JVP, where the
``θ`` tangents are the unit vectors and the product ``S_acc (δθ, δq, δq')`` costs ``n (p + 2 n)`` per
tangent; here the ``θ`` columns of a stage's rates are ``−D⁻¹ J_θ`` itself and only the ``2 n`` state
rows of ``S`` are multiplied: ``K = (S_{q'}, −D⁻¹ (J_q S_q + J_{q'} S_{q'}) − [D⁻¹ J_θ, 0])`` at each stage
(``acceleration_sensitivities``). On a six-joint arm (58 base parameters) a shooting pass took
0.6× the time of the ``jacfwd`` one (``scripts/bench_fit_cost.py``).

Where the segments are simulated by the arm's unrolled dynamics (``stepping.unrolled_standard``: a
``SerialArm``'s ``BaseColumns``), the stage's ``D``, ``q''`` and ``J`` come from the same unrolled scalar code
(``_unrolled_rates_and_sensitivities``): the same numbers to round-off, tested against ``jacfwd`` of the
unrolled simulation. Panda, 8 segments of 250 samples, warm: 0.49 → 0.22 s a pass (states and
sensitivities equal to 3.5e-15 of their largest); compiling it takes longer, 3.2 → 14.6 s (tracing 6.1 s, XLA
8.5 s; ``docs/performance.md``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...model import unrolled
from ...model.scalar_algebra import ldl_solve
from ...simulation.closed_loop_kernel import unrolled_dynamics
from .data import Known, Regressor, acceleration_sensitivities
from .stepping import integrate_sample, model_step, unrolled_standard

__all__ = ["model_step_jacobian", "segment_sensitivities"]


def _rates_and_sensitivities(regressor: Regressor, theta: Array, known: Known | None):
    """``((y, S), τ) -> (y', S')``: the rates of the state and of its sensitivities ``S`` ``(2 n, p + 2 n)``
    (columns: ``θ``, then ``y₀``)."""
    p = theta.shape[-1]

    def rates(state, tau):
        y, sens = state
        n = y.shape[0] // 2
        qdd, _, acc = acceleration_sensitivities(regressor, known, theta, y[:n], y[n:], tau)
        d_qdd = -(acc[:, p:] @ sens) - jnp.pad(acc[:, :p], ((0, 0), (0, sens.shape[1] - p)))
        return jnp.concatenate([y[n:], qdd]), jnp.concatenate([sens[n:], d_qdd])

    return lambda state, tau, pred: rates(state, tau)


def _unrolled_rates_and_sensitivities(regressor: Regressor, theta: Array, known: Known | None):
    """``_rates_and_sensitivities`` on the arm's unrolled dynamics (``jaxid.model.unrolled``), where its
    segments are simulated that way (``stepping.unrolled_standard``), else ``None``.

    At each stage, on scalars behind the ``lax.cond`` barrier of ``jaxid.simulation.closed_loop_kernel``
    (``pred``): the mass matrix ``D`` and ``q''`` (``unrolled.mass_system``, ``LDLᵀ`` as the simulation's),
    then the rows of ``J_y = ∂τ/∂(q, q')`` of the unrolled inverse dynamics at that ``q''`` by reverse mode
    (``n`` cotangents, ``vmap``), ``J_θ = Y_B(q, q', q'')`` the regressor itself (the torque is linear in
    ``θ``), and ``q''``'s sensitivities ``−D⁻¹ (J_y S_y + [J_θ, 0])`` by the same ``LDLᵀ``. The generic path
    builds ``J_y`` by reverse mode through the arm's ``6 × 6`` spatial algebra; under ``vmap`` every small
    product there is a batched ``dot`` of its own. ``J_θ`` by reverse mode through the scalar code too (with
    ``φ`` as scalars: as a ``(14 n,)`` array its gradient was a chain of scatters, 2× the time of the rest)
    ran no faster and doubled the compile (16 s against 7.6 s)."""
    phi = unrolled_standard(regressor, theta, known)
    if phi is None:
        return None
    dynamics = unrolled_dynamics(regressor.arm, phi)  # the residual pass's: its geometry, parameters and trig
    geometry, params, slope = dynamics.geometry, dynamics.params, dynamics.slope
    n, p = dynamics.n, theta.shape[-1]

    def kernel(q, qd, tau, sens):
        h, rhs = unrolled.mass_system(geometry, params, slope, q, qd, tau, *dynamics.trig(q))
        qdd = tuple(ldl_solve(h, rhs))

        def torque(q, qd):
            return jnp.stack(unrolled.inverse_dynamics(geometry, params, slope, q, qd, qdd, *dynamics.trig(q)))

        _, pullback = jax.vjp(torque, q, qd)
        j_q, j_qd = jax.vmap(pullback)(jnp.eye(n, dtype=sens.dtype))  # rows of J_y: n-tuples of (n,)
        right = jnp.concatenate([jnp.stack(j_q, 1), jnp.stack(j_qd, 1)], 1) @ sens
        right = right.at[:, :p].add(regressor(jnp.stack(q), jnp.stack(qd), jnp.stack(qdd)))  # J_θ = Y_B
        return jnp.stack(qdd), -jnp.stack(ldl_solve(h, list(right)))

    def unreachable(q, qd, tau, sens):  # the false branch: NaN, without tracing ``kernel`` again
        return jnp.full((n,), jnp.nan, sens.dtype), jnp.full(sens[n:].shape, jnp.nan, sens.dtype)

    def rates(state, tau, pred):
        y, sens = state
        qdd, d_qdd = jax.lax.cond(pred, kernel, unreachable, tuple(y[:n]), tuple(y[n:]), tuple(tau), sens)
        return jnp.concatenate([y[n:], qdd]), jnp.concatenate([sens[n:], d_qdd])

    return rates


def segment_sensitivities(
    regressor: Regressor,
    theta: Float[Array, " p"],
    y0: Float[Array, " m"],
    torques: Float[Array, "L 3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int = 1,
    unrolled_path: bool = True,
) -> tuple[Float[Array, "L+1 m"], Float[Array, "L+1 n p+m"], Float[Array, "m p+m"]]:
    """One segment of ``L`` samples from ``y₀ = (q, q')`` (``stepping.simulate_segments``' arguments, one
    segment): ``(states (L + 1, m), ∂q/∂(θ, y₀) (L + 1, n, p + m), ∂y_L/∂(θ, y₀) (m, p + m))``, the initial
    state first; the angle rows of the sensitivities at every grid point and all rows at the end.
    ``unrolled_path=False``: the generic path even where the unrolled one applies (a program run once per fit,
    whose compile the faster pass would not repay: ``shooting_inputs``)."""
    m, p = y0.shape[-1], theta.shape[-1]
    n = m // 2
    fast = _unrolled_rates_and_sensitivities(regressor, theta, known) if unrolled_path else None
    rates = fast or _rates_and_sensitivities(regressor, theta, known)
    sens0 = jnp.concatenate([jnp.zeros((m, p), y0.dtype), jnp.eye(m, dtype=y0.dtype)], axis=1)

    def step(state, u):
        stages, k = u
        pred = k >= 0  # always true, unbatched: the unrolled path's materialisation barrier
        state = integrate_sample(lambda s, tau: rates(s, tau, pred), state, stages, sample_step, substeps)
        return state, (state[0], state[1][:n])

    (_, sens_end), (ys, qs) = jax.lax.scan(step, (y0, sens0), (torques, jnp.arange(torques.shape[0])))
    states = jnp.concatenate([y0[None], ys])
    return states, jnp.concatenate([sens0[None, :n], qs]), sens_end


def model_step_jacobian(
    regressor: Regressor,
    theta: Float[Array, " p"],
    y: Float[Array, " m"],
    stage_torques: Float[Array, "3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int | Array = 1,
    pred: Array | None = None,
) -> tuple[Float[Array, " m"], Float[Array, "m m+p"]]:
    """``(model_step(...), ∂ model_step / ∂(y, θ))``: one sample and its Jacobian, columns ``y`` then ``θ`` (the
    EKF's transition, ``jaxid.estimate.kalman.logs``). Where the model is simulated on the arm's unrolled
    dynamics (``_unrolled_rates_and_sensitivities``) it is one sample of ``segment_sensitivities`` from
    ``S = [0, I]``, ``pred`` the ``lax.cond`` barrier's predicate (a traced scalar that is always true and not
    batched, e.g. ``k >= 0`` of a scan's step index ``k``); elsewhere (``pred`` unused) ``jax.jacfwd`` of
    ``model_step``. The same numbers to round-off (tested). Panda, 10 trials × 500 samples under ``vmap``, the
    CLI's XLA flags: 216 → 90 µs a sample (compile 4.4 → 10.9 s)."""
    m, p = y.shape[-1], theta.shape[-1]
    fast = None if pred is None else _unrolled_rates_and_sensitivities(regressor, theta, known)
    if fast is None:

        def twice(z):
            value = model_step(regressor, z[m:], z[:m], stage_torques, sample_step, known, substeps)
            return value, value

        jac, value = jax.jacfwd(twice, has_aux=True)(jnp.concatenate([y, theta]))
        return value, jac
    sens0 = jnp.concatenate([jnp.zeros((m, p), y.dtype), jnp.eye(m, dtype=y.dtype)], axis=1)
    value, sens = integrate_sample(lambda s, tau: fast(s, tau, pred), (y, sens0), stage_torques, sample_step, substeps)
    return value, jnp.concatenate([sens[:, p:], sens[:, :p]], axis=1)
