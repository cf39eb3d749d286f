"""The regressor model integrated over logs: RK4 steps per log sample, the substep rule, segment simulations.

One RK4 step (``model_step``: ``jaxid.simulation.integrate.rk4_step``'s, its stages in a scan) per log
sample, with the torque at the stages ``t, t + Δ/2, t + Δ`` interpolated linearly between samples
(``stage_torques``). The state is ``y = (q, q')``, shape ``(2 n,)``; its rates are ``(q', q'')`` with
``q''`` by ``jaxid.estimate.logs.data.accelerations`` (the model's exact solve). A stiff model (a light
joint with viscous and smoothed-Coulomb friction: ``h λ_max`` beyond RK4's stability limit of about 2.8
at the log's step ``h``) takes several RK4 substeps per sample (``substeps``: static, or traced where
trials of different counts share one program), chosen by ``stable_substeps`` from the model's state
Jacobian on the logs. ``simulate_segments`` runs segments of
a log from their own initial states (``lax.scan`` over steps, ``vmap`` over segments).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ...simulation.closed_loop_kernel import fast_path, unrolled_dynamics
from .data import FilteredLog, Known, Regressor, accelerations

__all__ = [
    "stage_torques",
    "simulate_segments",
    "simulate_segments_jit",
    "model_step",
    "integrate_sample",
    "stable_substeps",
    "stable_substeps_many",
    "unrolled_standard",
]


def stage_torques(tau: Float[Array, "N n"]) -> Float[Array, "N-1 3 n"]:
    """The torques at the RK4 stages ``t_k, t_k + Δ/2, t_k + Δ`` (linear interpolation)."""
    tau = jnp.asarray(tau)
    return jnp.stack([tau[:-1], 0.5 * (tau[:-1] + tau[1:]), tau[1:]], axis=1)


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
    substeps: int | Array = 1,
) -> Float[Array, " state"]:
    """One log sample of the model from the state ``y = (q, q')``: ``substeps`` RK4 steps of
    ``sample_step / substeps`` (``substeps`` static, or traced: ``integrate_sample``; ``stable_substeps``
    chooses it), the torque interpolated linearly through the stage torques ``t, t + Δ/2, t + Δ`` within the sample.

    With ``substeps = 1`` (the default) it is ``jaxid.simulation.integrate.rk4_step``'s step, bit for bit
    (``tests/test_identification_speed.py``), with its four stages in a ``lax.scan``. The stages
    are sequential, so ``rk4_step`` writes the model out four times, and XLA compiles each copy (with
    its derivatives, under ``jacfwd``): for a six-joint ``SerialArm`` that was most of output error's
    and the EKF's compile time. In a scan the model is compiled once; the stage ``i`` evaluates the
    rates at ``y + c_i k_{i−1}`` (``c = 0, Δ/2, Δ/2, Δ``; ``k_0 = 0``, so the first stage sees ``y``
    exactly) and the step combines ``y + Δ/6 (k1 + 2 (k2 + k3) + k4)`` as ``rk4_step`` does. More
    substeps are a ``lax.scan`` over that same step (one more copy of the model, not ``substeps``)."""
    return integrate_sample(_rates(regressor, theta, known), y, stage_torques, sample_step, substeps)


def integrate_sample(rates, y, stage_torques, sample_step: float, substeps: int | Array = 1):
    """``model_step`` for any ``rates(y, τ)`` of a state ``y`` that may be a pytree (the state with its
    sensitivities, ``jaxid.estimate.logs.sensitivities``): ``substeps`` RK4 steps through one sample,
    the torque interpolated through the stage torques (``model_step``'s docstring).

    ``substeps`` is a Python integer (static: a ``lax.scan`` of that many steps, one program per count)
    or a traced integer scalar (a ``lax.fori_loop``: one program for every count, e.g. for trials whose
    counts differ; under ``vmap`` a block of lanes takes its largest count's time). Both compute each
    substep's fraction of the sample and its length the same way (``(i + c) / k``, ``Δ / k``); at one
    substep the static path takes the stage torques themselves, the traced one interpolates them (equal
    to round-off: ``tests/test_substeps.py``)."""
    if isinstance(substeps, jax.Array):
        return _traced_substeps(rates, y, stage_torques, sample_step, substeps)
    if substeps == 1:
        return _rk4(rates, y, stage_torques, sample_step)
    k = int(substeps)
    if k < 1:
        raise ValueError(f"model_step: substeps must be a positive integer, got {substeps}.")
    fractions = (np.arange(k)[:, None] + np.array([0.0, 0.5, 1.0])) / k  # (k, 3) of the sample
    torques = _stage_fractions_torques(stage_torques, jnp.asarray(fractions, dtype=stage_torques.dtype)[..., None])

    def sub(y, tau3):
        return _rk4(rates, y, tau3, sample_step / k), None

    return jax.lax.scan(sub, y, torques)[0]


def _stage_fractions_torques(stage_torques, s):
    """The torques at the fractions ``s`` (``(..., 1)``) of the sample, linear through its three stage torques."""
    tau0, tau_mid, tau1 = stage_torques[0], stage_torques[1], stage_torques[2]
    return jnp.where(s <= 0.5, tau0 + 2 * s * (tau_mid - tau0), tau_mid + (2 * s - 1) * (tau1 - tau_mid))


def _traced_substeps(rates, y, stage_torques, sample_step: float, substeps: Array):
    """``integrate_sample`` with a traced count ``substeps`` (``≥ 1``): the substeps in a ``lax.fori_loop``."""
    dtype = stage_torques.dtype
    k = jnp.asarray(substeps).astype(dtype)
    h = jnp.asarray(sample_step, dtype) / k

    def sub(i, y):
        s = ((i.astype(dtype) + jnp.asarray([0.0, 0.5, 1.0], dtype)) / k)[:, None]
        return _rk4(rates, y, _stage_fractions_torques(stage_torques, s), h)

    return jax.lax.fori_loop(0, jnp.asarray(substeps, jnp.int32), sub, y)


def _rk4(rates, y, stage_torques, h):
    """One RK4 step of ``h`` (``model_step``'s docstring), its four stages in a ``lax.scan``; ``y`` and
    ``rates(y, τ)`` pytrees of one structure."""
    dtype = jax.tree.leaves(y)[0].dtype
    shifts = jnp.asarray([0.0, 0.5 * h, 0.5 * h, h], dtype=dtype)
    torques = stage_torques[jnp.asarray([0, 1, 1, 2])]

    def stage(k, data):
        c, tau = data
        k = rates(jax.tree.map(lambda a, b: a + c * b, y, k), tau)
        return k, k

    _, k = jax.lax.scan(stage, jax.tree.map(jnp.zeros_like, y), (shifts, torques))
    return jax.tree.map(lambda a, b: a + (h / 6) * (b[0] + 2 * (b[1] + b[2]) + b[3]), y, k)


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
    Host-side; the Jacobians in one program compiled per model (``regressor``, ``known``: static):
    ``stable_substeps_many`` of the one model.
    """
    return stable_substeps_many(regressor, [theta], [logs], known, width=1, safe=safe, cap=cap)[0]


def stable_substeps_many(
    regressor: Regressor,
    thetas: Sequence[Float[ArrayLike, " p"]],
    runs: Sequence[Sequence[FilteredLog]],
    known: Known | None = None,
    *,
    width: int = 10,
    safe: float = STABLE_STEP,
    cap: int = MAX_SUBSTEPS,
) -> list[tuple[int, float]]:
    """``stable_substeps(regressor, thetas[i], runs[i], known)`` for every ``i`` (each model on its own logs), the
    Jacobians of ``width`` models per call of one compiled program (a ``vmap`` over them; the last call padded by
    repeating its last model), their eigenvalues in one stacked call: what IDIM-IV's batched passes ask of every
    trial's estimate (``jaxid.benchmark.batched_iv``) at a fifth of the per-call cost. A model's answer is its own:
    its lane sees only its own parameters and states, whatever the others."""
    if len(thetas) != len(runs):
        raise ValueError(f"stable_substeps_many: {len(thetas)} models for {len(runs)} sets of logs.")
    if not runs:
        return []
    width = max(1, int(width))  # one compiled shape whatever the count: the last block padded
    points = [_stiffness_points(logs) for logs in runs]
    lanes = list(range(len(runs))) + [len(runs) - 1] * (-len(runs) % width)
    jacs = []
    for i in range(0, len(lanes), width):
        block = lanes[i : i + width]
        theta = jnp.asarray(np.stack([np.asarray(thetas[k], dtype=float) for k in block]))
        y = jnp.asarray(np.stack([points[k][0] for k in block]))
        tau = jnp.asarray(np.stack([points[k][1] for k in block]))
        jacs.append(np.asarray(_state_jacobians(regressor, known, theta, y, tau)))
    jac = np.concatenate(jacs)[: len(runs)]  # (models, STIFFNESS_POINTS, 2 n, 2 n)
    finite = np.all(np.isfinite(jac), axis=(1, 2, 3))
    radius = np.full(len(runs), np.nan)
    if finite.any():
        radius[finite] = np.abs(np.linalg.eigvals(jac[finite])).max(axis=(1, 2))
    out = []
    for k, logs in enumerate(runs):
        if not finite[k]:
            out.append((1, float("nan")))
            continue
        stiffness = float(logs[0].sample_step * radius[k])
        out.append((int(min(max(1, math.ceil(stiffness / safe)), cap)), stiffness))
    return out


def _stiffness_points(logs: Sequence[FilteredLog]) -> tuple[np.ndarray, np.ndarray]:
    """``stable_substeps``' states ``(STIFFNESS_POINTS, 2 n)`` and torques ``(STIFFNESS_POINTS, n)``: the filtered
    angles, velocities and torque at evenly spaced usable samples of the logs."""
    ys, taus = [], []
    for d in logs:
        u = d.usable
        ys.append(np.concatenate([np.asarray(d.q)[u], np.asarray(d.qd)[u]], axis=1))
        taus.append(np.asarray(d.tau)[u])
    y, tau = np.concatenate(ys), np.concatenate(taus)
    pick = np.linspace(0, y.shape[0] - 1, STIFFNESS_POINTS).round().astype(int)
    return y[pick], tau[pick]


@functools.partial(jax.jit, static_argnums=(0, 1))
def _state_jacobians(regressor, known, theta, y, tau):
    """``∂(q', q'')/∂(q, q')`` at each state ``y`` (``(B, K, 2 n)``) under torque ``tau`` (``(B, K, n)``) of the
    model ``theta`` (``(B, p)``) of its lane."""

    def one(theta, y, tau):
        return jax.vmap(jax.jacfwd(_rates(regressor, theta, known)))(y, tau)

    return jax.vmap(one)(theta, y, tau)


def simulate_segments(
    regressor: Regressor,
    theta: Float[Array, " p"],
    initial_states: Float[Array, "S state"],
    torques: Float[Array, "S L 3 n"],
    sample_step: float,
    known: Known | None = None,
    substeps: int | Array = 1,
) -> Float[Array, "S L+1 state"]:
    """Simulate ``S`` segments of ``L`` steps each from their own initial states ``(q, q')`` (``2 n``).

    ``torques[s, k]`` are the stage torques of step ``k`` of segment ``s`` (``stage_torques``).
    Returns the states at the ``L + 1`` grid points of each segment (the initial state first).
    ``substeps``: RK4 steps per sample (``model_step``: a Python integer, static, or a traced integer scalar,
    ``integrate_sample``). Pure JAX (``lax.scan`` over steps, ``vmap``
    over segments); ``jit``/``jacfwd``-compatible.

    A regressor that gives its standard vector (``regressor.standard(θ)``: ``jaxid.fit.model.BaseColumns`` of
    a ``SerialArm``), with no ``known`` torque or one that gives its own (``jaxid.fit.model.HeldTorque``: a fit's
    held parameters; the two standard vectors add), is simulated by the closed loop's unrolled dynamics
    (``jaxid.simulation.closed_loop_kernel.unrolled_dynamics``: recursive Newton–Euler, composite rigid
    body and an unrolled solve on scalars, behind its ``lax.cond`` materialisation barrier) instead
    of ``accelerations``' mass matrix by forward mode and elimination: the same model, equal to round-off
    (``tests/test_unrolled.py``), ~6x faster per acceleration on the Panda (0.94 µs against 6.0 µs, 10
    trials × 10 segments of 250 samples; ``docs/performance.md``). Its solve is ``LDLᵀ`` without pivoting,
    so a mass matrix that is not positive definite (an identified model need not be physical) is simulated
    as the generic path's elimination simulates it, not turned into ``nan``.
    """
    rates = _segment_rates(regressor, theta, known)

    def one(y0, stages):
        def step(y, u):
            stage, k = u
            pred = k >= 0  # always true, unbatched: the unrolled path's materialisation barrier
            y_next = integrate_sample(lambda y, tau: rates(y, tau, pred), y, stage, sample_step, substeps)
            return y_next, y_next

        _, ys = jax.lax.scan(step, y0, (stages, jnp.arange(stages.shape[0])))
        return jnp.concatenate([y0[None], ys], axis=0)

    return jax.vmap(one)(initial_states, torques)


def unrolled_standard(regressor: Regressor, theta, known: Known | None) -> Array | None:
    """The standard vector ``(14 n,)`` of the model ``Y θ (+ known)`` where the arm's unrolled dynamics can
    simulate it: the regressor gives its standard vector (``regressor.standard(θ)``: ``jaxid.fit.model.BaseColumns``
    of a ``SerialArm``), with no known torque or one that gives its own on the same arm
    (``jaxid.fit.model.HeldTorque``: a fit's held parameters; the dynamics are linear in the standard vector, so
    the two add). ``None`` otherwise (the generic path: ``accelerations``)."""
    standard = getattr(regressor, "standard", None)
    arm = getattr(regressor, "arm", None)
    held = None if known is None else getattr(known, "standard", None)
    if (
        standard is None
        or not fast_path(arm)
        or (known is not None and (held is None or getattr(known, "arm", None) is not arm))
    ):
        return None
    return standard(theta) if held is None else standard(theta) + held()


def _segment_rates(regressor: Regressor, theta, known: Known | None):
    """``rates(y, τ, pred)`` of ``simulate_segments``: the unrolled dynamics where the regressor gives its
    standard vector and the known torque, if any, gives its own on the same arm (``jaxid.fit.model.HeldTorque``:
    the dynamics are linear in the standard vector, so the two add; ``pred``: the unbatched always-true
    barrier), else ``_rates``."""
    standard = unrolled_standard(regressor, theta, known)
    if standard is None:
        generic = _rates(regressor, theta, known)
        return lambda y, tau, pred: generic(y, tau)
    arm = regressor.arm
    dynamics = unrolled_dynamics(arm, standard)
    n = arm.dof

    def rates(y, tau, pred):
        state = (tuple(y[i] for i in range(n)), tuple(y[n + i] for i in range(n)))
        _, acc = dynamics.rates(state, tau, pred)
        return jnp.concatenate([y[n:], jnp.stack(acc)])

    return rates


#: ``simulate_segments`` compiled (``regressor``, ``sample_step``, ``known`` and ``substeps`` static): one program per
#: model and shapes, shared by every caller (IDIM-IV's instruments, the validation's free simulations).
simulate_segments_jit = jax.jit(simulate_segments, static_argnums=(0, 4, 5, 6))
