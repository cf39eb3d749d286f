"""Logs made ready for identification: filtered angles, derivatives, torque; simulation helpers.

``filter_log`` applies the zero-phase low-pass of ``jaxid.measure.filters`` to a ``MeasuredLog``: angles →
smoothed angles, velocities and accelerations; the torque through the same low-pass. The model's
side gets the same low-pass too (``FilteredLog.band``, applied to the regressor columns or the
predicted torque: *parallel filtering*), so that both sides of ``τ = Y θ`` are compared in one
band — without it the smooth-sign Coulomb column keeps its step at each velocity reversal while
the torque loses it, a bias of 10-40 % on the friction estimates of a simulated log. ``trim`` samples at both ends are marked unusable (filter and one-sided differences
are least accurate there) and every estimator and metric skips them.

The simulation helpers integrate a *linear-in-parameters* model of ``n`` joints given only its
regressor ``Y(q, q', q'')`` (shape ``(..., n, p)``) and parameters ``θ``: the torque ``Y θ`` is affine
in ``q''``, so ``D(q) = ∂(Y θ)/∂q''`` and ``q'' = D⁻¹ (τ − Y(q, q', 0) θ)`` exactly. This is how the
base parameters (which no longer map to one physical arm) are simulated. The ``n × n`` solve is
``jaxid.linalg``'s (no LAPACK call): Cramer's rule ``solve_2x2`` for two joints (the fast path, and
the results of the two-link fits), Gaussian elimination with partial pivoting ``solve`` otherwise
(a fitted ``D`` need not be positive definite, so no Cholesky). One RK4 step
(``model_step``: ``jaxid.simulation.integrate.rk4_step``'s, its stages in a scan) per log sample, with the torque at the stages ``t, t + Δ/2,
t + Δ`` interpolated linearly between samples. The state is ``y = (q, q')``, shape ``(2 n,)``.
A stiff model (a light joint with viscous and smoothed-Coulomb friction: ``h λ_max`` beyond RK4's
stability limit of about 2.8 at the log's step ``h``) takes several RK4 substeps per sample
(``substeps``, static), chosen by ``stable_substeps`` from the model's state Jacobian on the logs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ...linalg import solve, solve_2x2
from ...measure.filters import differentiate, lowpass, min_samples
from ...measure.logs import MeasuredLog, check_joint_samples

__all__ = [
    "FilteredLog",
    "filter_log",
    "filter_signals",
    "stage_torques",
    "accelerations",
    "model_torque",
    "simulate_segments",
    "simulate_segments_jit",
    "model_step",
    "stable_substeps",
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


def stage_torques(tau: Float[Array, "N n"]) -> Float[Array, "N-1 3 n"]:
    """The torques at the RK4 stages ``t_k, t_k + Δ/2, t_k + Δ`` (linear interpolation)."""
    tau = jnp.asarray(tau)
    return jnp.stack([tau[:-1], 0.5 * (tau[:-1] + tau[1:]), tau[1:]], axis=1)


def model_torque(regressor: Regressor, theta, q, qd, qdd, known: Known | None = None):
    """``Y(q, q', q'') θ`` (by ``regressor.torque`` where it has one: see ``Regressor``) plus the torque
    ``known(q, q', q'')`` of fixed parameters (if any)."""
    torque = getattr(regressor, "torque", None)
    tau = regressor(q, qd, qdd) @ theta if torque is None else torque(theta, q, qd, qdd)
    return tau if known is None else tau + known(q, qd, qdd)


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
    mass, qdd = _mass_and_accelerations(regressor, known, theta, q, qd, tau)
    n = q.shape[-1]
    _, pullback = jax.vjp(lambda th, a, b: model_torque(regressor, th, a, b, qdd, known), theta, q, qd)
    j_theta, j_q, j_qd = jax.vmap(pullback)(jnp.eye(n, dtype=qdd.dtype))  # rows of ∂τ/∂(θ, q, q')
    # D⁻¹ [J_θ, J_q, J_q', 1] once (unbatched under jacfwd); each tangent is then two matrix products.
    sens = _solve(mass, jnp.concatenate([j_theta, j_q, j_qd, jnp.eye(n, dtype=qdd.dtype)], axis=1))
    p = theta.shape[-1]
    d_qdd = sens[:, p + 2 * n :] @ d_tau - (
        sens[:, :p] @ d_theta + sens[:, p : p + n] @ d_q + sens[:, p + n : p + 2 * n] @ d_qd
    )
    return qdd, d_qdd


def _rates(regressor: Regressor, theta: Array, known: Known | None = None):
    def rates(y, tau):
        n = y.shape[0] // 2
        return jnp.concatenate([y[n:], accelerations(regressor, theta, y[:n], y[n:], tau, known)])

    return rates


def model_step(
    regressor: Regressor,
    theta: Float[Array, " p"],
    y: Float[Array, " state"],
    stage_torques: Float[Array, "3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int = 1,
) -> Float[Array, " state"]:
    """One log sample of the model from the state ``y = (q, q')``: ``substeps`` RK4 steps of
    ``sample_step / substeps`` (``substeps`` static; ``stable_substeps`` chooses it), the torque
    interpolated linearly through the stage torques ``t, t + Δ/2, t + Δ`` within the sample.

    With ``substeps = 1`` (the default) it is ``jaxid.simulation.integrate.rk4_step``'s step, bit for bit
    (``tests/test_identification_speed.py``), with its four stages in a ``lax.scan``. The stages
    are sequential, so ``rk4_step`` writes the model out four times, and XLA compiles each copy (with
    its derivatives, under ``jacfwd``): for a six-joint ``SerialArm`` that was most of output error's
    and the EKF's compile time. In a scan the model is compiled once; the stage ``i`` evaluates the
    rates at ``y + c_i k_{i−1}`` (``c = 0, Δ/2, Δ/2, Δ``; ``k_0 = 0``, so the first stage sees ``y``
    exactly) and the step combines ``y + Δ/6 (k1 + 2 (k2 + k3) + k4)`` as ``rk4_step`` does. More
    substeps are a ``lax.scan`` over that same step (one more copy of the model, not ``substeps``)."""
    rates = _rates(regressor, theta, known)
    if substeps == 1:
        return _rk4(rates, y, stage_torques, sample_step)
    k = int(substeps)
    if k < 1:
        raise ValueError(f"model_step: substeps must be a positive integer, got {substeps}.")
    fractions = (np.arange(k)[:, None] + np.array([0.0, 0.5, 1.0])) / k  # (k, 3) of the sample
    tau0, tau_mid, tau1 = stage_torques[0], stage_torques[1], stage_torques[2]
    s = jnp.asarray(fractions, dtype=y.dtype)[..., None]
    torques = jnp.where(s <= 0.5, tau0 + 2 * s * (tau_mid - tau0), tau_mid + (2 * s - 1) * (tau1 - tau_mid))

    def sub(y, tau3):
        return _rk4(rates, y, tau3, sample_step / k), None

    return jax.lax.scan(sub, y, torques)[0]


def _rk4(rates, y, stage_torques, h):
    """One RK4 step of ``h`` (``model_step``'s docstring), its four stages in a ``lax.scan``."""
    shifts = jnp.asarray([0.0, 0.5 * h, 0.5 * h, h], dtype=y.dtype)
    torques = stage_torques[jnp.asarray([0, 1, 1, 2])]

    def stage(k, data):
        c, tau = data
        k = rates(y + c * k, tau)
        return k, k

    _, k = jax.lax.scan(stage, jnp.zeros_like(y), (shifts, torques))
    return y + (h / 6) * (k[0] + 2 * (k[1] + k[2]) + k[3])


#: ``stable_substeps`` keeps ``|h λ|`` of every RK4 substep at most this: RK4 is stable up to about 2.8
#: along the negative real axis and 2.8 along the imaginary one, and well within between them at 2.5.
STABLE_STEP = 2.5
#: The most substeps ``stable_substeps`` gives (a model that needs more is not simulated faithfully).
MAX_SUBSTEPS = 16
#: How many log states ``stable_substeps`` looks at (one compiled shape for every log).
STIFFNESS_POINTS = 64


def stable_substeps(
    regressor: Regressor,
    theta: Float[ArrayLike, " p"],
    logs: Sequence[FilteredLog],
    known: Known | None = None,
    *,
    safe: float = STABLE_STEP,
    cap: int = MAX_SUBSTEPS,
) -> tuple[int, float]:
    """``(substeps, h λ_max)``: RK4 steps per log sample (``model_step``) that keep the model stable.

    ``λ_max`` is the largest eigenvalue modulus of the model's state Jacobian
    ``∂(q', q'')/∂(q, q')`` (``q''`` by ``accelerations``) at ``STIFFNESS_POINTS`` states of the logs
    (filtered angles, velocities and torque at evenly spaced usable samples): light joints with
    viscous and smoothed-Coulomb friction make it ``M⁻¹ ∂τ_friction/∂q'``, large. The rule:
    ``substeps = ⌈h λ_max / safe⌉``, at least 1 and at most ``cap``, ``h`` the logs' sample step.
    A Jacobian that is not finite there gives 1 (the simulation then reports what fails).
    Host-side; the Jacobians in one program compiled per model (``regressor``, ``known``: static).
    """
    h = logs[0].sample_step
    ys, taus = [], []
    for d in logs:
        u = d.usable
        ys.append(np.concatenate([np.asarray(d.q)[u], np.asarray(d.qd)[u]], axis=1))
        taus.append(np.asarray(d.tau)[u])
    y, tau = np.concatenate(ys), np.concatenate(taus)
    pick = np.linspace(0, y.shape[0] - 1, STIFFNESS_POINTS).round().astype(int)
    jac = np.asarray(
        _state_jacobians(regressor, known, jnp.asarray(theta), jnp.asarray(y[pick]), jnp.asarray(tau[pick]))
    )
    if not np.all(np.isfinite(jac)):
        return 1, float("nan")
    stiffness = float(h * np.abs(np.linalg.eigvals(jac)).max())
    return int(min(max(1, math.ceil(stiffness / safe)), cap)), stiffness


@functools.partial(jax.jit, static_argnums=(0, 1))
def _state_jacobians(regressor, known, theta, y, tau):
    """``∂(q', q'')/∂(q, q')`` at each state ``y`` (``(K, 2 n)``) under torque ``tau`` (``(K, n)``)."""
    rates = _rates(regressor, theta, known)
    return jax.vmap(jax.jacfwd(rates))(y, tau)


def simulate_segments(
    regressor: Regressor,
    theta: Float[Array, " p"],
    initial_states: Float[Array, "S state"],
    torques: Float[Array, "S L 3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int = 1,
) -> Float[Array, "S L+1 state"]:
    """Simulate ``S`` segments of ``L`` steps each from their own initial states ``(q, q')`` (``2 n``).

    ``torques[s, k]`` are the stage torques of step ``k`` of segment ``s`` (``stage_torques``).
    Returns the states at the ``L + 1`` grid points of each segment (the initial state first).
    ``substeps``: RK4 steps per sample (``model_step``; static). Pure JAX (``lax.scan`` over steps, ``vmap``
    over segments); ``jit``/``jacfwd``-compatible.
    """

    def one(y0, stages):
        def step(y, u):
            y_next = model_step(regressor, theta, y, u, sample_step, known, substeps)
            return y_next, y_next

        _, ys = jax.lax.scan(step, y0, stages)
        return jnp.concatenate([y0[None], ys], axis=0)

    return jax.vmap(one)(initial_states, torques)


#: ``simulate_segments`` compiled (``regressor``, ``sample_step``, ``known`` and ``substeps`` static): one program per
#: model and shapes, shared by every caller (IDIM-IV's instruments, the validation's free simulations).
simulate_segments_jit = jax.jit(simulate_segments, static_argnums=(0, 4, 5, 6))
