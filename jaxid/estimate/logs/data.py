"""Logs made ready for identification: filtered angles, derivatives, torque; the regressor model's torque
and accelerations.

``filter_log`` applies the zero-phase low-pass of ``jaxid.measure.filters`` to a ``MeasuredLog``: angles →
smoothed angles, velocities and accelerations; the torque through the same low-pass. The model's
side gets the same low-pass too (``FilteredLog.band``, applied to the regressor columns or the
predicted torque: *parallel filtering*), so that both sides of ``τ = Y θ`` are compared in one
band — without it the smooth-sign Coulomb column keeps its step at each velocity reversal while
the torque loses it, a bias of 10-40 % on the friction estimates of a simulated log. ``trim`` samples at both ends are marked unusable (filter and one-sided differences
are least accurate there) and every estimator and metric skips them.

The model is *linear in its parameters*: ``n`` joints given only its regressor ``Y(q, q', q'')``
(shape ``(..., n, p)``, ``Regressor``) and parameters ``θ`` (``model_torque``). The torque ``Y θ`` is
affine in ``q''``, so ``D(q) = ∂(Y θ)/∂q''`` and ``q'' = D⁻¹ (τ − Y(q, q', 0) θ)`` exactly
(``accelerations``). This is how the base parameters (which no longer map to one physical arm) are
simulated. The ``n × n`` solve is ``jaxid.linalg``'s (no LAPACK call): Cramer's rule ``solve_2x2`` for
two joints (the fast path, and the results of the two-link fits), Gaussian elimination with partial
pivoting ``solve`` otherwise (a fitted ``D`` need not be positive definite, so no Cholesky). The RK4
steps per log sample, their substep rule and the segment simulations are ``jaxid.estimate.logs.stepping``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._platform import thread_map
from ...linalg import solve, solve_2x2
from ...measure.filters import differentiate, lowpass, min_samples, residual_fraction
from ...measure.logs import MeasuredLog, check_joint_samples

__all__ = [
    "FilteredLog",
    "angle_noise_std",
    "torque_noise_std",
    "filter_log",
    "filter_signals",
    "model_torque",
    "rowwise",
    "accelerations",
    "Regressor",
    "Known",
]

#: ``Y(q, q', q'')``: ``(..., n), (..., n), (..., n) -> (..., n, p)`` (pure JAX). A regressor may also
#: have a method ``torque(θ, q, q', q'') -> (..., n)`` equal to ``Y(q, q', q'') @ θ`` but computed without
#: forming ``Y`` (e.g. one Newton–Euler pass of the arm); the simulations (``model_torque``) then use it.
Regressor = Callable[[Array, Array, Array], Array]
#: The torque of the fixed (known) parameters, ``(..., n), (..., n), (..., n) -> (..., n)``; every
#: estimator takes it as ``known=`` (default none: all parameters unknown).
Known = Callable[[Array, Array, Array], Array]


class FilteredLog(eqx.Module):
    """A measured log after zero-phase filtering and differentiation (SI units, uniform grid).

    Attributes:
        t: ``(N,)`` times [s]. q_raw: ``(N, n)`` resampled measured angles [rad] (``n`` joints).
        q, qd, qdd: ``(N, n)`` filtered angles and their derivatives [rad, rad/s, rad/s²].
        tau: ``(N, n)`` low-passed torque [N m]; tau_raw: the resampled torque before filtering.
        name, sample_step, cutoff_hz, method, trim: static description.
    """

    t: Float[Array, " N"]
    q_raw: Float[Array, "N n"]
    q: Float[Array, "N n"]
    qd: Float[Array, "N n"]
    qdd: Float[Array, "N n"]
    tau: Float[Array, "N n"]
    tau_raw: Float[Array, "N n"]
    name: str = eqx.field(static=True)
    sample_step: float = eqx.field(static=True)
    cutoff_hz: float = eqx.field(static=True)
    method: str = eqx.field(static=True)
    trim: int = eqx.field(static=True)
    lowpass_order: int = eqx.field(static=True, default=4)

    def __check_init__(self) -> None:
        arrays = {k: getattr(self, k) for k in ("q_raw", "q", "qd", "qdd", "tau", "tau_raw")}
        check_joint_samples("FilteredLog", self.t, self.sample_step, **arrays)
        if not (0 <= self.trim and 2 * self.trim < self.t.shape[0]):
            raise ValueError(f"FilteredLog.trim = {self.trim} leaves no usable samples of {self.t.shape[0]}.")

    def band(self, x) -> np.ndarray:
        """The torque-side low-pass (zero-phase Butterworth, the log's cut-off) along axis 0."""
        return lowpass(np.asarray(x), self.sample_step, self.cutoff_hz, order=self.lowpass_order)

    @property
    def joints(self) -> int:
        """The number of joints ``n``."""
        return int(self.q.shape[1])

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
    velocities: str = "differentiate",
) -> FilteredLog:
    """Filter and differentiate a measured log (see the module docstring).

    ``trim_s`` [s] at each end are excluded from estimation and metrics (default 0.1 s).
    ``velocities``: ``"differentiate"`` (default) differentiates the filtered angles twice;
    ``"measured"`` takes the log's measured velocities ``log.qd`` instead, through the same zero-phase
    filter (``method``, ``order``, cut-off), and differentiates them once for the accelerations (the
    angles are filtered as with ``"differentiate"``).
    Raises ``ValueError`` (one line) for a bad method or cut-off (from ``jaxid.measure.filters``), for an
    unknown ``velocities`` or ``"measured"`` on a log without velocities, and, before any filtering,
    for a log too short for the filter (Butterworth: its edge padding; Savitzky–Golay: its window) or
    for ``trim_s`` at both ends: the message names the log, its duration and the shortest duration
    that works at this step and cut-off.
    """
    h = log.sample_step
    q_raw = np.asarray(log.q)
    lp_order = 4 if (order is None or method != "butterworth") else order
    if velocities not in ("differentiate", "measured"):
        raise ValueError(f'velocities must be "differentiate" or "measured", got {velocities!r}.')
    if velocities == "measured" and log.qd is None:
        raise ValueError(
            f'{log.name}: velocities = "measured" needs the log\'s velocity columns; read them with '
            "load_log(velocities=...) ([log] velocities in a fit config)."
        )
    _check_length(log, cutoff_hz, method, order, lp_order, trim_s)
    tau_raw = np.asarray(log.tau)
    qf, qd, qdd, tau = filter_signals(q_raw, tau_raw, h, cutoff_hz, method=method, order=order)
    if velocities == "measured":
        # The same kernel on the measured velocity: its filtered values and first derivative.
        qd, qdd, _ = differentiate(np.asarray(log.qd), h, cutoff_hz, method=method, order=order)
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


def angle_noise_std(logs: Sequence[FilteredLog], floor: float = 1e-5) -> np.ndarray:
    """Per-joint std [rad] of the measured angle about its filtered value (usable samples)."""
    diffs = [np.asarray(d.q_raw - d.q)[d.usable] for d in logs]
    return np.maximum(np.std(np.concatenate(diffs), axis=0), floor)


def torque_noise_std(logs: Sequence[FilteredLog], floor: float = 1e-6) -> np.ndarray:
    """Per-joint std [N m] of the torque reading's noise, taken as white: the raw torque's part above the log's
    cut-off (``tau_raw − tau``, usable samples) divided by the share of a white noise's variance found there
    (``jaxid.measure.filters.residual_fraction``). In closed loop the part above the cut-off also holds the
    controller's reaction to the angle noise (``K_p`` times it): this overstates the reading's noise there."""
    d0 = logs[0]
    fraction = residual_fraction(d0.sample_step, d0.cutoff_hz, order=d0.lowpass_order)
    diffs = np.concatenate([np.asarray(d.tau_raw - d.tau)[d.usable] for d in logs])
    return np.maximum(np.sqrt(np.mean(diffs**2, axis=0) / fraction), floor)


def filter_signals(q, tau, sample_step: float, cutoff_hz: float, *, method: str = "butterworth", order=None):
    """``filter_log``'s kernel on raw angles and torques along axis 0 (any trailing shape, e.g. a
    ``(N, trials, n)`` batch: each column is filtered on its own, as one log's): ``(q, q', q'', τ)``
    filtered, the torque through the order-4 (or ``order``) Butterworth low-pass."""
    lp_order = 4 if (order is None or method != "butterworth") else order
    qf, qd, qdd = differentiate(np.asarray(q), sample_step, cutoff_hz, method=method, order=order)
    return qf, qd, qdd, lowpass(np.asarray(tau), sample_step, cutoff_hz, order=lp_order)


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


def model_torque(regressor: Regressor, theta, q, qd, qdd, known: Known | None = None):
    """``Y(q, q', q'') θ`` (by ``regressor.torque`` where it has one: see ``Regressor``) plus the torque
    ``known(q, q', q'')`` of fixed parameters (if any)."""
    torque = getattr(regressor, "torque", None)
    tau = regressor(q, qd, qdd) @ theta if torque is None else torque(theta, q, qd, qdd)
    return tau if known is None else tau + known(q, qd, qdd)


#: Rows per block of ``rowwise``: one compiled program serves logs of every length.
ROW_BLOCK = 1024


@functools.partial(jax.jit, static_argnums=(0, 1))
def _rows_block(fn, static, args, rows):
    return fn(*static, *args, *rows)


def rowwise(fn, *rows, static: tuple = (), args: tuple = (), block: int = ROW_BLOCK) -> np.ndarray:
    """``fn(*static, *args, *rows)`` for a function that acts on each row (leading axis ``N``) of ``rows``
    on its own (a regressor, a model torque), evaluated in blocks of ``block`` rows, the last padded by
    repeating its final row and the padding dropped: one compiled program per ``fn``, ``static`` (hashable:
    a regressor) and the rows' trailing shapes, whatever the logs' lengths. A real campaign's runs each
    have their own length (and the cut-off's and the default estimate's folds halve them); compiling a
    six-joint arm's regressor for each took 3-7 s. ``args``: traced arguments shared by every row (``θ``)."""
    rows = [np.asarray(r) for r in rows]
    n = rows[0].shape[0]
    args = tuple(jnp.asarray(a) for a in args)

    def one(start):
        chunk = [r[start : start + block] for r in rows]
        m = chunk[0].shape[0]
        if 0 < m < block:
            chunk = [np.concatenate([c, np.repeat(c[-1:], block - m, axis=0)]) for c in chunk]
        if m == 0:
            chunk = [np.zeros((block,) + r.shape[1:], r.dtype) for r in rows]
        return np.asarray(_rows_block(fn, tuple(static), args, tuple(chunk)))[:m]

    # The blocks are independent programs: one thread per core (``thread_map``), the same numbers.
    return np.concatenate(thread_map(one, range(0, max(n, 1), block)))


def accelerations(
    regressor: Regressor, theta: Array, q: Array, qd: Array, tau: Array, known: Known | None = None
) -> Array:
    """``q''`` of the model ``Y(q, q', q'') θ (+ known) = τ`` for one state (``q, q', τ``: shapes
    ``(n,)``; module docstring: ``solve_2x2`` for ``n = 2``, else ``jaxid.linalg.solve``).

    Its derivatives (``jax.jvp``/``jacfwd``, hence the sensitivities of output error and the EKF's
    transition Jacobian) come from a custom JVP: differentiating ``τ(q, q', q'', θ) = τ_applied``
    at the solution gives ``D δq'' = δτ_applied − J (δθ, δq, δq')`` with ``J`` the Jacobian of the
    model torque at the solved ``q''``, computed once by reverse mode (``n`` cotangents), so a tangent
    costs two small matrix products instead of a differentiated inverse-dynamics pass and mass matrix.
    Equal to differentiating the solve itself to round-off."""
    return _accelerations(regressor, known, theta, q, qd, tau)


def _mass_and_accelerations(regressor, known, theta, q, qd, tau):
    def torque(qdd):
        return model_torque(regressor, theta, q, qd, qdd, known)

    zero = jnp.zeros_like(q)
    bias = torque(zero)
    mass = jax.jacfwd(torque)(zero)
    return mass, _solve(mass, tau - bias)


def _solve(mass, rhs):
    """``D⁻¹ rhs`` (``rhs`` ``(n,)`` or ``(n, k)``): Cramer's rule for two joints, else elimination."""
    if mass.shape[-1] != 2:
        return solve(mass, rhs)
    return solve_2x2(mass, rhs) if rhs.ndim == 1 else jax.vmap(solve_2x2, (None, 1), 1)(mass, rhs)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _accelerations(regressor, known, theta, q, qd, tau):
    return _mass_and_accelerations(regressor, known, theta, q, qd, tau)[1]


@_accelerations.defjvp
def _accelerations_jvp(regressor, known, primals, tangents):
    theta, q, qd, tau = primals
    d_theta, d_q, d_qd, d_tau = tangents
    qdd, inverse, sens = acceleration_sensitivities(regressor, known, theta, q, qd, tau)
    p, n = theta.shape[-1], q.shape[-1]
    d_qdd = inverse @ d_tau - (sens[:, :p] @ d_theta + sens[:, p : p + n] @ d_q + sens[:, p + n :] @ d_qd)
    return qdd, d_qdd


def acceleration_sensitivities(regressor: Regressor, known: Known | None, theta, q, qd, tau):
    """``(q'', D⁻¹, S)`` at one state: the model's accelerations (``accelerations``), the inverse of its mass
    matrix ``D`` and ``S = D⁻¹ [J_θ, J_q, J_q'] = −∂q''/∂(θ, q, q')`` ``(n, p + 2 n)``, ``J`` the Jacobian of
    the model torque at the solved ``q''`` (its rows by reverse mode: ``n`` cotangents). Differentiating
    ``τ(q, q', q'', θ) = τ_applied`` at the solution gives ``δq'' = D⁻¹ δτ_applied − S (δθ, δq, δq')``: the
    custom JVP of ``accelerations`` and the sensitivities of ``jaxid.estimate.logs.sensitivities``.

    ``D⁻¹`` is one ``jaxid.linalg`` solve with ``n`` right-hand sides; ``S`` a matrix product. Solving for
    the ``p + 3 n`` columns instead took 2.5× the time of the whole derivative's other linear algebra on
    a six-joint arm (11 µs against 3 µs a state)."""
    mass, qdd = _mass_and_accelerations(regressor, known, theta, q, qd, tau)
    n = q.shape[-1]
    _, pullback = jax.vjp(lambda th, a, b: model_torque(regressor, th, a, b, qdd, known), theta, q, qd)
    j_theta, j_q, j_qd = jax.vmap(pullback)(jnp.eye(n, dtype=qdd.dtype))  # rows of ∂τ/∂(θ, q, q')
    inverse = _solve(mass, jnp.eye(n, dtype=qdd.dtype))
    return qdd, inverse, inverse @ jnp.concatenate([j_theta, j_q, j_qd], axis=1)
