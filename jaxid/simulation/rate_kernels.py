"""The two-link arm's rates laid out for fast fixed-step loops: ``fast_rates`` (nonlinear) and
``_linear_rates`` (the linearised arm), ``f(y, tau, pred) -> y'`` on the state as four scalars.

``fast_rates`` is the one fast-rates kernel over the model's ``forward_dynamics`` (no second copy
of the physics), used by the simulator's RK4 path (``jaxid.simulation.paths``) and by
``jaxid.simulation.steady_state.period_states``. ``_unreachable`` builds the false branch of the
``lax.cond`` materialisation barrier these kernels use (NaN of the right shapes, not a second copy
of the kernel); the closed loop's unrolled path (``jaxid.simulation.closed_loop_kernel``) uses it too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..linalg import inverse_2x2
from ..model import TwoLinkArm, forward_dynamics
from .integrate import sincos_parts, sincos_quadrant
from .linearisation import LinearArm

__all__ = ["fast_rates"]


def _trig_parts(q1: Array, q2: Array) -> tuple[Array, ...]:
    # Both angles' range reduction and kernel polynomials (the quadrant step is left to the caller).
    return sincos_parts(q1) + sincos_parts(q2)


def _unreachable(fn):
    """The false branch of ``lax.cond(pred, fn, _unreachable(fn), ...)`` with an always-true ``pred``:
    ``fn``'s output structure filled with NaN (so a false ``pred`` could never pass unnoticed),
    without a second copy of ``fn`` for XLA to compile."""

    def branch(*args):
        return jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), jax.eval_shape(fn, *args))

    return branch


# The false branch of ``fast_rates``' sine/cosine ``lax.cond``, built once: ``lax.cond`` caches a
# branch's trace by the function object, so a new branch per call (per RK4 stage) was traced again
# every time (issue 29).
_TRIG_UNREACHABLE = _unreachable(_trig_parts)


def fast_rates(arm: TwoLinkArm):
    """The nonlinear arm's rates laid out for a fast fixed-step loop: ``f(y, tau, pred) -> y'``.

    The one fast-rates kernel (the simulator's RK4 path and ``steady_state.period_states`` use it)
    over the model's ``forward_dynamics``: no second copy of the physics. Use it as
    ``rk4_step(lambda y, tau: f(y, tau, n >= 0), y, stage_torques, h)`` inside a ``lax.scan`` over
    the step index ``n``.

    Args of ``f``:
        y: the state as a tuple of four arrays ``(q1, q2, q1', q2')`` [rad, rad/s] (under ``vmap``
            four contiguous ``(B,)`` vectors, which XLA vectorises better than a strided ``(B, 4)``).
        tau: ``(2,)`` applied torque [N m] at the stage time.
        pred: an **unbatched** boolean scalar that is always true but unknown to the compiler,
            e.g. ``n >= 0`` for the scan's step index ``n``.

    Returns ``(q1', q2', q1'', q2'')``, equal to ``forward_dynamics`` to rounding (the sines and
    cosines by ``jaxid.simulation.integrate.sincos``, within 1 ulp of ``jnp.sin``/``jnp.cos``).

    Why ``pred``: two ``lax.cond(pred, …)`` make XLA materialise what it would otherwise recompute
    in every consumer (XLA:CPU's fusion duplicates elementwise producers into each fused consumer):
    the sine/cosine kernel polynomials of the stage (``sincos_parts``; only the cheap quadrant step
    is fused into the dynamics), and the two accelerations (otherwise the whole dynamics is
    re-evaluated inside each RK4 stage update and again in the final combination). Measured:
    ~1.5-2.5x faster per step than one ``lax.cond`` around ``sincos`` alone.
    The false branches are ``_unreachable``: NaN of the right shapes, not a second copy of the
    kernel (identical branches doubled the compiled program at each of the two levels: a step's
    StableHLO 2.5x larger, ~1/3 more compile time for ``simulate_batch`` and ``nonlinear_oe``).
    """

    def trig(q, pred):
        s1, c1, k1, s2, c2, k2 = jax.lax.cond(pred, _trig_parts, _TRIG_UNREACHABLE, q[..., 0], q[..., 1])
        (s1, c1), (s2, c2) = sincos_quadrant(s1, c1, k1), sincos_quadrant(s2, c2, k2)
        return jnp.stack([s1, s2], -1), jnp.stack([c1, c2], -1)

    def accelerations(y, tau, pred):
        q1, q2, v1, v2 = y
        q, qd = jnp.stack([q1, q2], -1), jnp.stack([v1, v2], -1)
        return forward_dynamics(arm, q, qd, tau, sincos=lambda q: trig(q, pred))

    unreachable = _unreachable(accelerations)  # one per kernel: the four RK4 stages share its trace

    def rates(y, tau, pred):
        # The cond returns forward_dynamics' stacked (…, 2) result: XLA then emits the two
        # accelerations as one fusion (split into two outputs it made three; ~6 % per step).
        acc = jax.lax.cond(pred, accelerations, unreachable, y, tau, pred)
        return y[2], y[3], acc[..., 0], acc[..., 1]

    return rates


def _linear_rates(lin: LinearArm):
    """``f(y, tau, pred)`` for ``D0 δq'' + Fv δq' + K0 δq = tau − tau0`` (``pred`` unused)."""
    dinv = inverse_2x2(lin.mass)
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
