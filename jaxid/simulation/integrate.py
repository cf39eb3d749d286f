"""The one discretisation: a classic RK4 step, the torque on its stage grid, and fast trigonometry.

Every consumer that integrates the arm in fixed steps — ``simulate`` (its fast path and the
diffrax ``RK4`` path), the shooting period map of ``jaxid.simulation.steady_state`` and the EKF/UKF
transition — takes one step with ``rk4_step`` and its stage torques from ``torque_grid``, so
they integrate the *same* discrete dynamics.

- ``rk4_step(rates, y, stage_torques, h)``: one step of the classic fourth-order Runge–Kutta
  method for ``y' = f(y, tau(t))``; ``y`` is any pytree (the fast simulator carries a tuple of
  four scalars, which vectorises best under ``vmap``), the torque enters only at the stage times
  ``t, t + h/2, t + h``.
- ``torque_grid(excitation, h, steps)``: the unit-scale multisine at those stage times for each
  step of one period, computed once in float64 (``(steps, 3, 2)``); a trial's torque is
  ``offset + scale · grid``.
- ``sincos(x)``: ``(sin x, cos x)`` sharing one range reduction (within 1 ulp of libm for
  ``|x| < 1e6``); XLA's float64 sin/cos on CPU are slow. Its two halves, ``sincos_parts`` (the
  reduction and kernel polynomials) and ``sincos_quadrant`` (exact swaps and sign flips), let the
  fast simulator materialise only the expensive half.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..excitation.multisine import Multisine

__all__ = [
    "rk4_step",
    "torque_grid",
    "applied_offset",
    "sincos",
    "sincos_parts",
    "sincos_quadrant",
    "RK4",
    "RK4_TABLEAU",
]


def rk4_step(rates: Callable, y, stage_torques: Float[Array, "3 ..."], h: float):
    """One classic RK4 step of length ``h`` [s] for ``y' = rates(y, tau)``.

    Args:
        rates: ``f(y, tau) -> y'`` with the structure of ``y`` (a pytree of arrays).
        y: the state at ``t``.
        stage_torques: the rates' second argument at ``t``, ``t + h/2`` and ``t + h``: row ``i``
            goes to stage ``i`` (``(3, n)`` torques [N m], e.g. ``torque_grid`` rows offset and
            scaled, or ``(3,)`` stage times for a controller that computes its own torque).
        h: static step [s].

    Returns the state at ``t + h``: ``y + h/6 (k1 + 2 (k2 + k3) + k4)``. Pure;
    ``jit``/``vmap``/``grad``-compatible.
    """

    def shift(k, c):
        return jax.tree.map(lambda a, x: a + c * x, y, k)

    k1 = rates(y, stage_torques[0])
    k2 = rates(shift(k1, 0.5 * h), stage_torques[1])
    k3 = rates(shift(k2, 0.5 * h), stage_torques[1])
    k4 = rates(shift(k3, h), stage_torques[2])
    return jax.tree.map(lambda a, x1, x2, x3, x4: a + (h / 6) * (x1 + 2 * (x2 + x3) + x4), y, k1, k2, k3, k4)


def torque_grid(excitation: Multisine, h: float, steps: int) -> Float[Array, "steps 3 2"]:
    """Unit-scale torque ``u(t)/scale`` [N m] at the RK4 stage times of each step of one period.

    Row ``n`` holds ``u`` at ``n h``, ``(n + 1/2) h`` and ``(n + 1) h`` (the last row ends at
    ``steps · h``, normally the period ``T``, evaluated there rather than wrapped to 0). The grid
    does not depend on the excitation's ``scale`` (traced per trial): multiply by it.
    """
    u = excitation.replace(scale=1.0).torque(jnp.arange(2 * steps + 1) * (h / 2))
    return jnp.stack([u[0:-1:2], u[1::2], u[2::2]], axis=1)


#: The classic RK4 tableau (``rk4_step`` written as a diffrax Butcher tableau): stages at
#: ``t``, ``t + h/2``, ``t + h/2``, ``t + h`` — the rows of ``torque_grid``.
RK4_TABLEAU = diffrax.ButcherTableau(
    c=np.array([0.5, 0.5, 1.0]),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.array([0.0, 0.0, 0.0, 0.0]),
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
)


class RK4(diffrax.AbstractERK):
    """The classic fourth-order Runge–Kutta method as a diffrax solver (fixed steps only).

    The same method as ``rk4_step`` (diffrax combines the stages in its own order, so the two
    agree to rounding, not bit for bit); its stages sit on the ``torque_grid`` times.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = RK4_TABLEAU
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


def applied_offset(record, excitation: Multisine) -> Float[Array, "2"]:
    """The constant torque ``tau0`` [N m] applied with the multisine, read from a record:
    ``mean(tau − u(t))`` over its samples (exact when ``tau = tau0 + u(t)``).

    The one place estimators read the holding torque of the *true* arm off the data (the model's
    ``holding_torque(arm, q0)`` is what ``simulate`` applies; an estimator cannot evaluate it
    without knowing the arm). Batched records give ``(..., 2)``.

    A ``Record`` holds whole periods of its own period. When that is the excitation's and no
    excited harmonic is a multiple of the samples per period, each line's samples over a period
    are a full turn of a root of unity and sum to zero, so the mean of ``u`` over the record is
    exactly zero and the offset is ``mean(tau)``: no multisine evaluated at every sample (3.9 ms
    a trial for 10 000 samples and 20 lines, 17 ms for 4 periods, against 0.03 ms; it was the
    largest fixed cost of ``nonlinear_oe``'s default route). Otherwise the sample-wise formula.
    """
    n_per = record.samples_per_period
    if abs(record.period - excitation.period) <= 1e-9 * excitation.period and all(
        k % n_per for row in excitation.harmonics for k in row
    ):
        return jnp.mean(record.tau, axis=-2)
    return jnp.mean(record.tau - excitation.torque(record.t), axis=-2)


# -- fast trigonometry -------------------------------------------------------------------------

# fdlibm's Cody–Waite split of π/2 (33 leading bits, so k · _PIO2_HI is exact for |k| < 2**20)
# and its kernel polynomials for sin and cos on [-π/4, π/4].
_PIO2_HI = 1.57079632673412561417e00
_PIO2_LO = 6.07710050650619224932e-11
_TWO_OVER_PI = 6.36619772367581382433e-01
_SIN_COEFFS = (
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
)
_COS_COEFFS = (
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
)


def _horner(z: Array, coeffs: tuple[float, ...]) -> Array:
    out = jnp.full_like(z, coeffs[-1])
    for c in coeffs[-2::-1]:
        out = c + z * out
    return out


@jax.custom_jvp
def sincos_parts(x: Float[ArrayLike, "*s"]) -> tuple[Float[Array, "*s"], Float[Array, "*s"], Float[Array, "*s"]]:
    """The two halves of ``sincos`` apart: ``(s, c, k)`` with ``r = x − k π/2 ∈ [-π/4, π/4]``,
    ``s ≈ sin r``, ``c ≈ cos r`` (the kernel polynomials) and ``k`` the quadrant count (float).

    ``sincos_quadrant(s, c, k)`` turns them into ``(sin x, cos x)`` (swaps and sign flips only,
    exact). The fast simulator materialises the three parts once per RK4 stage (behind a
    ``lax.cond``) and leaves the cheap quadrant step to XLA's fusion. Differentiable
    (``ds = c dx``, ``dc = −s dx``, ``dk = 0``).
    """
    x = jnp.asarray(x)
    k = jnp.round(x * _TWO_OVER_PI)
    r = (x - k * _PIO2_HI) - k * _PIO2_LO
    z = r * r
    s = r + r * z * _horner(z, _SIN_COEFFS)
    hz = 0.5 * z
    w = 1.0 - hz
    c = w + (((1.0 - w) - hz) + z * z * _horner(z, _COS_COEFFS))
    return s, c, k


@sincos_parts.defjvp
def _sincos_parts_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    s, c, k = sincos_parts(x)
    return (s, c, k), (c * dx, -s * dx, jnp.zeros_like(k))


def sincos_quadrant(s: Array, c: Array, k: Array) -> tuple[Array, Array]:
    """``(sin x, cos x)`` from ``sincos_parts(x)``: the quadrant ``k mod 4`` swaps and negates."""
    quadrant = k.astype(jnp.int32)  # two's complement: ``& 3`` is ``k mod 4`` for negative k too
    odd = (quadrant & 1) == 1
    sin, cos = jnp.where(odd, c, s), jnp.where(odd, s, c)
    return jnp.where((quadrant & 2) != 0, -sin, sin), jnp.where(((quadrant + 1) & 2) != 0, -cos, cos)


@jax.custom_jvp
def sincos(x: Float[ArrayLike, "*s"]) -> tuple[Float[Array, "*s"], Float[Array, "*s"]]:
    """``(sin x, cos x)`` sharing one range reduction; within 1 ulp of libm for ``|x| < 1e6``.

    Cody–Waite reduction to ``r ∈ [-π/4, π/4]`` and fdlibm's kernel polynomials, in float64 (the
    split of π/2 assumes float64; in float32 the reduction loses accuracy — the simulator refuses
    float32). Accuracy degrades for ``|x| ≳ 1.6e6`` (states that large are flagged ``DIVERGED``
    anyway); non-finite ``x`` gives NaN. Plain elementwise arithmetic, so XLA vectorises it.
    Differentiable (custom JVP ``d sin = cos dx``). ``sincos_quadrant(*sincos_parts(x))``.
    """
    return sincos_quadrant(*sincos_parts(x))


@sincos.defjvp
def _sincos_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    s, c = sincos(x)
    return (s, c), (c * dx, -s * dx)
