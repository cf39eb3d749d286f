"""Logs made ready for identification: filtered angles, derivatives, torque; simulation helpers.

``filter_log`` applies the zero-phase low-pass of ``jaxid.filters`` to a ``MeasuredLog``: angles →
smoothed angles, velocities and accelerations; the torque through the same low-pass. The model's
side gets the same low-pass too (``FilteredLog.band``, applied to the regressor columns or the
predicted torque: *parallel filtering*), so that both sides of ``τ = Y θ`` are compared in one
band — without it the smooth-sign Coulomb column keeps its step at each velocity reversal while
the torque loses it, a bias of 10-40 % on the friction estimates of a simulated log. ``trim`` samples at both ends are marked unusable (filter and one-sided differences
are least accurate there) and every estimator and metric skips them.

The simulation helpers integrate a *linear-in-parameters* model given only its regressor
``Y(q, q', q'')`` (shape ``(..., 2, p)``) and parameters ``θ``: the torque ``Y θ`` is affine in
``q''``, so ``D(q) = ∂(Y θ)/∂q''`` and ``q'' = D⁻¹ (τ − Y(q, q', 0) θ)`` exactly. This is how the
base parameters (which no longer map to one physical arm) are simulated. One RK4 step
(``jaxid.integrate.rk4_step``) per log sample, with the torque at the stages ``t, t + Δ/2,
t + Δ`` interpolated linearly between samples.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..filters import differentiate, lowpass, min_samples
from ..integrate import rk4_step
from ..linalg import solve_2x2
from ..logs import MeasuredLog
from ..types import check_samples

__all__ = [
    "FilteredLog",
    "filter_log",
    "stage_torques",
    "accelerations",
    "model_torque",
    "simulate_segments",
    "Regressor",
    "Known",
]

#: ``Y(q, q', q'')``: ``(..., 2), (..., 2), (..., 2) -> (..., 2, p)`` (pure JAX).
Regressor = Callable[[Array, Array, Array], Array]
#: The torque of the fixed (known) parameters, ``(..., 2), (..., 2), (..., 2) -> (..., 2)``; every
#: estimator takes it as ``known=`` (default none: all parameters unknown).
Known = Callable[[Array, Array, Array], Array]


class FilteredLog(eqx.Module):
    """A measured log after zero-phase filtering and differentiation (SI units, uniform grid).

    Attributes:
        t: ``(N,)`` times [s]. q_raw: ``(N, 2)`` resampled measured angles [rad].
        q, qd, qdd: ``(N, 2)`` filtered angles and their derivatives [rad, rad/s, rad/s²].
        tau: ``(N, 2)`` low-passed torque [N m]; tau_raw: the resampled torque before filtering.
        name, sample_step, cutoff_hz, method, trim: static description.
    """

    t: Float[Array, " N"]
    q_raw: Float[Array, "N 2"]
    q: Float[Array, "N 2"]
    qd: Float[Array, "N 2"]
    qdd: Float[Array, "N 2"]
    tau: Float[Array, "N 2"]
    tau_raw: Float[Array, "N 2"]
    name: str = eqx.field(static=True)
    sample_step: float = eqx.field(static=True)
    cutoff_hz: float = eqx.field(static=True)
    method: str = eqx.field(static=True)
    trim: int = eqx.field(static=True)
    lowpass_order: int = eqx.field(static=True, default=4)

    def __check_init__(self) -> None:
        arrays = {k: getattr(self, k) for k in ("q_raw", "q", "qd", "qdd", "tau", "tau_raw")}
        check_samples("FilteredLog", self.t, self.sample_step, **arrays)
        if not (0 <= self.trim and 2 * self.trim < self.t.shape[0]):
            raise ValueError(f"FilteredLog.trim = {self.trim} leaves no usable samples of {self.t.shape[0]}.")

    def band(self, x) -> np.ndarray:
        """The torque-side low-pass (zero-phase Butterworth, the log's cut-off) along axis 0."""
        return lowpass(np.asarray(x), self.sample_step, self.cutoff_hz, order=self.lowpass_order)

    @property
    def usable(self) -> slice:
        """The samples estimators and metrics use (``trim`` dropped at each end)."""
        return slice(self.trim, self.t.shape[0] - self.trim)


def filter_log(
    log: MeasuredLog,
    cutoff_hz: float,
    *,
    method: str = "butterworth",
    order: int | None = None,
    trim_s: float = 0.1,
) -> FilteredLog:
    """Filter and differentiate a measured log (see the module docstring).

    ``trim_s`` [s] at each end are excluded from estimation and metrics (default 0.1 s).
    Raises ``ValueError`` (one line) for a bad method or cut-off (from ``jaxid.filters``), and,
    before any filtering, for a log too short for the filter (Butterworth: its edge padding;
    Savitzky–Golay: its window) or for ``trim_s`` at both ends: the message names the log, its
    duration and the shortest duration that works at this step and cut-off.
    """
    h = log.sample_step
    q_raw = np.asarray(log.q)
    lp_order = 4 if (order is None or method != "butterworth") else order
    _check_length(log, cutoff_hz, method, order, lp_order, trim_s)
    qf, qd, qdd = differentiate(q_raw, h, cutoff_hz, method=method, order=order)
    tau_raw = np.asarray(log.tau)
    tau = lowpass(tau_raw, h, cutoff_hz, order=lp_order)
    trim = int(round(trim_s / h))
    a = jnp.asarray
    return FilteredLog(
        a(log.t),
        a(q_raw),
        a(qf),
        a(qd),
        a(qdd),
        a(tau),
        a(tau_raw),
        log.name,
        h,
        float(cutoff_hz),
        method,
        trim,
        lp_order,
    )


def _check_length(log: MeasuredLog, cutoff_hz, method, order, lp_order, trim_s) -> None:
    """Raise, before filtering, if ``log`` has fewer samples than the filters and the trim need."""
    h = log.sample_step
    angles = min_samples(h, cutoff_hz, method=method, order=order)  # also checks the cut-off and method
    torque = min_samples(h, cutoff_hz, order=lp_order)  # the torque's Butterworth low-pass
    trimmed = 2 * int(round(trim_s / h)) + 10  # at least 10 usable samples between the trims
    need = max(angles, torque, trimmed)
    if log.samples >= need:
        return
    if method == "savgol":
        what = f"a Savitzky–Golay filter of polynomial order {3 if order is None else order}"
        shorter = "a lower polynomial order or a higher cut-off"  # the window is ∝ (order + 1) / cut-off
    else:
        what = f"an order-{lp_order} Butterworth filter"
        shorter = "a smaller filter order"
    fixes = ["use a longer log (or a wider window)"]
    if angles > log.samples or (method != "savgol" and torque > log.samples):
        fixes.append(shorter)
    if trimmed > log.samples:
        fixes.append("a smaller trim_s")
    raise ValueError(
        f"{log.name}: the log lasts {log.duration:.4g} s ({log.samples} samples of {h:.4g} s), too short to "
        f"filter at {cutoff_hz:.4g} Hz with {what} and trim {trim_s:.4g} s at each end, which needs at least "
        f"{(need - 1) * h:.4g} s ({need} samples) at this step and cut-off; {', or '.join(fixes)}."
    )


def stage_torques(tau: Float[Array, "N 2"]) -> Float[Array, "N-1 3 2"]:
    """The torques at the RK4 stages ``t_k, t_k + Δ/2, t_k + Δ`` (linear interpolation)."""
    tau = jnp.asarray(tau)
    return jnp.stack([tau[:-1], 0.5 * (tau[:-1] + tau[1:]), tau[1:]], axis=1)


def model_torque(regressor: Regressor, theta, q, qd, qdd, known: Known | None = None):
    """``Y(q, q', q'') θ`` plus the torque ``known(q, q', q'')`` of fixed parameters (if any)."""
    tau = regressor(q, qd, qdd) @ theta
    return tau if known is None else tau + known(q, qd, qdd)


def accelerations(
    regressor: Regressor, theta: Array, q: Array, qd: Array, tau: Array, known: Known | None = None
) -> Array:
    """``q''`` of the model ``Y(q, q', q'') θ (+ known) = τ`` for one state (shapes ``(2,)``)."""

    def torque(qdd):
        return model_torque(regressor, theta, q, qd, qdd, known)

    zero = jnp.zeros_like(q)
    bias = torque(zero)
    mass = jax.jacfwd(torque)(zero)
    return solve_2x2(mass, tau - bias)


def _rates(regressor: Regressor, theta: Array, known: Known | None = None):
    def rates(y, tau):
        return jnp.concatenate([y[2:], accelerations(regressor, theta, y[:2], y[2:], tau, known)])

    return rates


def simulate_segments(
    regressor: Regressor,
    theta: Float[Array, " p"],
    initial_states: Float[Array, "S 4"],
    torques: Float[Array, "S L 3 2"],
    sample_step: float,
    known: Known | None = None,
) -> Float[Array, "S L+1 4"]:
    """Simulate ``S`` segments of ``L`` steps each from their own initial states ``(q, q')``.

    ``torques[s, k]`` are the stage torques of step ``k`` of segment ``s`` (``stage_torques``).
    Returns the states at the ``L + 1`` grid points of each segment (the initial state first).
    Pure JAX (``lax.scan`` over steps, ``vmap`` over segments); ``jit``/``jacfwd``-compatible.
    """
    rates = _rates(regressor, theta, known)

    def one(y0, stages):
        def step(y, u):
            y_next = rk4_step(rates, y, u, sample_step)
            return y_next, y_next

        _, ys = jax.lax.scan(step, y0, stages)
        return jnp.concatenate([y0[None], ys], axis=0)

    return jax.vmap(one)(initial_states, torques)
