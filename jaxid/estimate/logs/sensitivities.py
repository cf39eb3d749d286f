"""A segment simulated with its sensitivities: the states ``y`` and ``S = ∂y/∂(θ, y₀)`` carried together
through ``jaxid.estimate.logs.stepping``'s RK4 steps (forward sensitivities of the discrete map, exact
to round-off: the same numbers as ``jax.jacfwd`` of ``stepping.simulate_segments``, tested).

Why not ``jacfwd``: its ``p + 2 n`` tangents each pass through ``accelerations``' custom JVP, where the
``θ`` tangents are the unit vectors and the product ``S_acc (δθ, δq, δq')`` costs ``n (p + 2 n)`` per
tangent; here the ``θ`` columns of a stage's rates are ``−D⁻¹ J_θ`` itself and only the ``2 n`` state
rows of ``S`` are multiplied: ``K = (S_{q'}, −D⁻¹ (J_q S_q + J_{q'} S_{q'}) − [D⁻¹ J_θ, 0])`` at each stage
(``acceleration_sensitivities``). On a six-joint arm (58 base parameters) a shooting pass took
0.6× the time of the ``jacfwd`` one (``scripts/bench_fit_cost.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .data import Known, Regressor, acceleration_sensitivities
from .stepping import integrate_sample

__all__ = ["segment_sensitivities"]


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

    return rates


def segment_sensitivities(
    regressor: Regressor,
    theta: Float[Array, " p"],
    y0: Float[Array, " m"],
    torques: Float[Array, "L 3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int = 1,
) -> tuple[Float[Array, "L+1 m"], Float[Array, "L+1 n p+m"], Float[Array, "m p+m"]]:
    """One segment of ``L`` samples from ``y₀ = (q, q')`` (``stepping.simulate_segments``' arguments, one
    segment): ``(states (L + 1, m), ∂q/∂(θ, y₀) (L + 1, n, p + m), ∂y_L/∂(θ, y₀) (m, p + m))``, the initial
    state first; the angle rows of the sensitivities at every grid point and all rows at the end."""
    m, p = y0.shape[-1], theta.shape[-1]
    n = m // 2
    rates = _rates_and_sensitivities(regressor, theta, known)
    sens0 = jnp.concatenate([jnp.zeros((m, p), y0.dtype), jnp.eye(m, dtype=y0.dtype)], axis=1)

    def step(state, stages):
        state = integrate_sample(rates, state, stages, sample_step, substeps)
        return state, (state[0], state[1][:n])

    (_, sens_end), (ys, qs) = jax.lax.scan(step, (y0, sens0), torques)
    states = jnp.concatenate([y0[None], ys])
    return states, jnp.concatenate([sens0[None, :n], qs]), sens_end
