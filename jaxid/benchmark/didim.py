"""DIDIM, the closed-loop output error of Gautier, Janot and Vandanjon (IEEE TCST 21(2), 2013), over a
benchmark chunk: the estimator that needs what only a benchmark knows, the controller and its reference.

Output error driven by the *measured* torque (``jaxid.estimate.logs.output_error``) treats the torque
reading's noise as an input of the simulation; on closed-loop logs it drifts, and on poorly exciting
data its cost leads away from the truth (``results/README.md``). DIDIM simulates the **closed loop**
instead: the model at the current estimate ``θ_k`` driven by the same controller towards the same
reference, noise-free, as the robot was. Its states ``(q_s, q'_s, q''_s)`` carry no measurement noise,
and the update is a least-squares fit of the measured torque on the regressor at those states,

    θ_{k+1} = argmin_θ  Σ_j |F τ_j − F Y_j(q_s(θ_k), q'_s(θ_k), q''_s(θ_k)) θ|² / σ_j²,

``F`` the low-pass and decimation of IDIM-LS's rows on both sides, ``σ_j`` per-joint weights: Gauss–Newton
on ``|τ − τ_s(θ)|²`` with the inverse-dynamics regressor at the simulated states as the Jacobian of the
simulated torque ``τ_s``, which a tracking controller makes nearly exact. At the true parameters of a
noise-free run the simulated loop reproduces the logged one, so the truth is a fixed point (tested).

Every iterate must be a model that can be simulated, so each fit is the **physically consistent** least
squares (``idim_ls_consistent``'s, over the standard parameters, every link's pseudo-inertia positive
definite and friction non-negative: the batched program of ``jaxid.benchmark.batched`` on these rows), and
the start is the chunk's batched consistent LS (IDIM-LS where that fit did not converge); the reported
covariance is that fit's own at the last step.

**A line search on DIDIM's own criterion.** That Jacobian is only nearly exact: in directions the data
barely determine the fixed-point iteration can be unstable. Measured on 20 trials of ``benchmark_panda``'s
``consistency_poor`` with plain passes: 11 ``ok``, 3 ``max_iterations``, 6 ``diverged``; on each of the
9 that failed a wrist joint's effective inertia fell pass after pass (to 1-13 % of the truth's) until the
controller's gains at the 500-Hz hold made the model's closed loop unstable, and the criterion
``J(θ) = Σ_r Σ_j (F τ − F τ_s(θ))²_rj / σ_j²`` (``τ_s`` the model's own torque in its closed loop, ``σ_j`` the
start's first-stage residual std) **rose at every pass of that drift** (trial 16, unweighted, as a share
of its value at the truth: 0.946, 0.915, 0.928, 0.957, 1.058, 1.258, then diverged), while on the trials
that converged it fell or stayed. So, as any Gauss–Newton method with a line search: a step
``θ + α (θ_{k+1} − θ)`` is taken only where it lowers ``J`` (a closed loop that diverges has ``J = ∞``); where
it does not, ``α`` is cut by ``SHRINK`` and the same step tried again; after a step is taken ``α = 1``. A
trial stops (``"ok"``) once its next move, full or cut, would change no parameter by more than
``TOLERANCE`` of its reported std (or than round-off): a fixed point of the iteration, or a point from
which its step does not lower ``J`` (the step's direction no longer a descent direction there: the
Jacobian's error; another path can stop at another such point, ``tests/test_didim.py``). Measured on the
same 20 poor trials: 20 ``ok``, held-out torque 0.0164 N m against consistent LS's 0.019, 92 % of the
95 % intervals covering; on ``consistency_rich`` 20 ``ok``, 0.024 against 0.055; 12-19 passes (a pass:
one simulation and one fit of every trial) against the plain iteration's 5-20. (Tried before and not
kept: halving the step only where a closed loop diverged, up to 3 times: on 100 poor trials 63 ``ok`` as
without, the iteration itself not settling.)

Each pass simulates and fits only the trials still iterating, packed into blocks of ``block_width`` lanes (on a
CPU ``LANES`` a device, at most the plan's width and DIDIM's trial limit; the last block padded with copies of its
last trial): per block one ``simulate_closed_loop_batch`` call of its models (``jaxid.fit.model.BaseColumns.standard``:
each ``θ`` as a standard vector, its dependent entries 0, the same dynamics) and one call of the batched program. A
chunk needs as many passes as its slowest trial, but most trials stop after a few (100 poorly exciting Panda trials:
47, 19, 12 and 4 still iterating after 3, 5, 9 and 11 passes, one to the limit), so the chunk is not simulated
whole at every pass (docs/performance.md, "DIDIM's passes over the trials still iterating"). A block has one width
in every run, and a lane's numbers do not depend on the others in its block or on its place there (``LANES``; the
fit a ``lax.map`` per trial): a trial's numbers do not depend on its chunk or on when its neighbours stop (tested).
``"max_iterations"`` after ``ITERATIONS`` passes; ``"diverged"`` when the start's closed loop does not stay finite.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..estimate.logs.shooting_passes import padded_rows
from ..simulation.closed_loop_batch import simulate_closed_loop_batch
from ..types import Status
from .batched import _band_matrix, _prior, _program

__all__ = ["ITERATIONS", "LANES", "SHRINK", "TOLERANCE", "block_width", "didim_chunk"]

#: Passes at most after the start's (each a closed-loop simulation of every trial's model and a
#: least-squares fit).
ITERATIONS = 30
#: A trial stops once its next move would change none of its parameters by more than this many of its
#: reported stds (or by more than ``ROUND_OFF`` of its largest parameter: noise-free data, whose stds vanish).
TOLERANCE = 1e-2
ROUND_OFF = 1e-12
#: A step that does not lower the cost is cut to this fraction and tried again.
SHRINK = 0.1
#: Lanes per device of a pass's block on a CPU: the closed loop's 256-bit vectors hold 4 doubles, and a lane in the
#: vector loop's tail (a device's fifth of five) gets other bits than the first four (measured on the Panda, blocks
#: of 10 on 2 devices); with 4 a device every lane runs the same code. A lane of the closed loop costs about the same
#: at any width, so narrow blocks lose little to overhead and leave little padding once most trials have stopped.
LANES = 4


def block_width(plan, ndev: int) -> int:
    """Lanes per block of a DIDIM pass, one width for every chunk of a run: the plan's width (at most DIDIM's trial
    limit), on a CPU at most ``LANES`` a device, rounded up to a multiple of ``ndev`` (the devices the closed loop is
    sharded over)."""
    s = plan.setting
    width = min(plan.width, s["estimator_trials"].get("didim", s.trials))
    if jax.default_backend() == "cpu":
        width = min(width, LANES * ndev)
    return -(-width // ndev) * ndev


@eqx.filter_jit
def _models(nominal, standards):
    """The chunk's models as one ``SerialArm`` with batched leaves (traced: an identified standard vector,
    e.g. a zero mass of a dependent column, is taken as it is)."""
    return nominal.with_standard_parameters(standards)


@eqx.filter_jit
def _accelerations(nominal, standards, q, qd, tau):
    """``q''`` of each trial's model (``nominal`` at its standard vector) at its simulated states under its
    applied torque."""

    def one(standard, a, b, c):
        return jax.vmap(nominal.with_standard_parameters(standard).forward_dynamics)(a, b, c)

    return jax.vmap(one)(standards, q, qd, tau)


def _block(plan, thetas: np.ndarray, y: np.ndarray, band: np.ndarray, band_t, prior, ndev: int):
    """One DIDIM pass for a block of trials: the fit at each model's simulated closed loop ``(θ (width, p),
    cov (width, p, p))``, whether the model's loop and fit are finite ``(width,)``, the model's own filtered
    torque ``F τ_s`` ``(width, rows, n)`` (the controller's output in its closed loop) and the fit's first-stage
    per-joint residual std ``(width, n)``."""
    s = plan.setting
    standards = jax.vmap(plan.regressor.standard)(jnp.asarray(thetas))
    arms = _models(plan.nominal, standards)
    record = simulate_closed_loop_batch(
        arms,
        plan.reference,
        plan.controller,
        duration=plan.duration,
        sample_step=s["sample_step"],
        substeps=s["substeps"],
    )
    qdd = _accelerations(plan.nominal, standards, record.q, record.qd, record.tau_command)
    states = [jnp.swapaxes(x, 1, 2) for x in (record.q, record.qd, qdd)]  # (width, n, N)
    finite = np.asarray(record.status) == Status.SUCCESS
    finite &= np.asarray(jnp.all(jnp.isfinite(qdd), axis=(1, 2)))
    states = [jnp.where(jnp.asarray(finite)[:, None, None], x, 0.0) for x in states]
    out = _program(plan, True, False, ndev)(band_t, *states, jnp.asarray(y), prior, jnp.asarray(True))
    theta, cov = np.asarray(out["consistent_theta"]), np.asarray(out["consistent_cov"])
    finite &= np.all(np.isfinite(theta), axis=1) & np.all(np.isfinite(cov), axis=(1, 2))
    simulated = np.einsum("rs,tsn->trn", band, np.asarray(record.tau_command))
    finite &= np.all(np.isfinite(simulated), axis=(1, 2))
    return theta, cov, finite, simulated, np.asarray(out["ls_residual_std"])


def _pass(plan, thetas: np.ndarray, y: np.ndarray, trials: np.ndarray, block: int, *args) -> list[np.ndarray]:
    """``_block``'s outputs for the trials ``trials`` (indices into ``thetas`` and ``y``, in that order), packed into
    blocks of ``block`` lanes, the last padded with copies of its last trial."""
    lanes = np.asarray(trials)[padded_rows(len(trials), block)]
    outs = [_block(plan, thetas[part], y[part], *args) for part in lanes.reshape(-1, block)]
    return [np.concatenate(parts)[: len(trials)] for parts in zip(*outs, strict=True)]


def _cost(y: np.ndarray, simulated: np.ndarray, weight: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """DIDIM's criterion per trial, ``Σ_r Σ_j (F τ − F τ_s)²_rj w_j²`` (``∞`` where the loop is not finite)."""
    residual = np.where(finite[:, None, None], y - simulated, 0.0) * weight[:, None, :]
    return np.where(finite, np.sum(residual**2, axis=(1, 2)), np.inf)


def _start(fits: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each trial's start: the physically consistent least squares where it converged (its model can be
    simulated: a positive-definite mass matrix), else IDIM-LS."""
    if "consistent_theta" not in fits:
        return fits["ls_theta"], fits["ls_cov"]
    ok = np.asarray(fits["consistent_status"]) == Status.SUCCESS
    return (
        np.where(ok[:, None], fits["consistent_theta"], fits["ls_theta"]),
        np.where(ok[:, None, None], fits["consistent_cov"], fits["ls_cov"]),
    )


def didim_chunk(plan, run: dict, fits: dict, members: list[int]) -> dict:
    """DIDIM on the chunk's trials ``members`` (indices into ``run``, ``simulate_trials``' output, and into
    ``fits``, ``batched_fits``' output on it: IDIM-LS and its rows): ``{k: (value, cov, status, seconds,
    cpu_seconds)}``, the call's time shared evenly; a diverged trial's value and covariance are ``None``.

    Both sides get the same filter: the torque side is ``F τ`` of the logged torque (one low-pass, at the
    rows), as the regressor side is ``F Y`` at the exact simulated states (IDIM-LS's torque side is
    low-passed twice, once with the angles and once at the rows: its angles are)."""
    if not members:
        return {}
    t0, c0 = time.perf_counter(), time.process_time()
    s = plan.setting
    ndev = len(jax.devices())
    count = len(members)
    block = block_width(plan, ndev)
    rows = tuple(int(r) for r in fits["rows"])
    band = _band_matrix(int(fits["qf"].shape[1]), s["sample_step"], s["cutoff_hz"], rows)
    band_t = jnp.asarray(np.ascontiguousarray(band.T))
    tau = np.asarray(run["tau"], dtype=float)[members]  # (count, N, n)
    y = np.einsum("rs,tsn->trn", band, tau)
    fixed = (block, band, band_t, _prior(plan), ndev)
    theta, cov = _start(fits)
    theta, cov = theta[members].copy(), cov[members].copy()
    status = np.full(count, "max_iterations", dtype=object)
    # The start's own pass: its cost, the weights that cost keeps (1 / its first-stage residual std per
    # joint, fixed for the trial) and the first step's target.
    target, target_cov, finite, simulated, sigma = _pass(plan, theta, y, np.arange(count), *fixed)
    status[~finite] = "diverged"
    active = finite.copy()
    weight = 1.0 / np.maximum(sigma, 1e-12)
    cost = _cost(y, simulated, weight, finite)
    step = np.ones(count)
    for _ in range(ITERATIONS):
        move = step[:, None] * (target - theta)
        std = np.sqrt(np.abs(np.diagonal(target_cov, axis1=1, axis2=2)))
        # Within TOLERANCE of a std, or within round-off of the estimate (noise-free data: std ~ 0).
        floor = ROUND_OFF * np.max(np.abs(target), axis=1, keepdims=True)
        done = active & np.all(np.abs(move) <= np.maximum(TOLERANCE * std, floor), axis=1)
        theta[done] += move[done]
        cov[done] = target_cov[done]
        status[done] = "ok"
        active &= ~done
        if not active.any():
            break
        # Only the trials still iterating are simulated (their candidates) and fitted.
        moving = np.flatnonzero(active)
        new, new_cov, finite, simulated, _ = _pass(plan, theta + move, y, moving, *fixed)
        new_cost = _cost(y[moving], simulated, weight[moving], finite)
        # A step is taken only where it lowers the cost (a closed loop that diverges does not); elsewhere
        # the trial tries SHRINK of it from where it is.
        better = new_cost < cost[moving]
        taken, cut = moving[better], moving[~better]
        theta[taken], cov[taken], cost[taken] = theta[taken] + move[taken], target_cov[taken], new_cost[better]
        target[taken], target_cov[taken], step[taken] = new[better], new_cov[better], 1.0
        step[cut] *= SHRINK
    seconds = ((time.perf_counter() - t0) / count, (time.process_time() - c0) / count)
    out = {}
    for i, k in enumerate(members):
        if status[i] == "diverged":
            out[k] = (None, None, "diverged", *seconds)
        else:
            out[k] = (theta[i], cov[i], status[i], *seconds)
    return out
