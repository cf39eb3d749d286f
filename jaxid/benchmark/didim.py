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
covariance is that fit's own at the last pass. Measured on 20 trials of ``benchmark_panda``'s
``consistency_poor``: plain least-squares passes from IDIM-LS diverged in 12, from consistent LS in 10;
consistent passes: 11 ``ok``, 3 ``max_iterations``, 6 ``diverged`` (a consistent model whose inertia is too
small for the controller's gains at the 500-Hz hold), held-out torque 0.0155 N m against consistent LS's
0.019 and IDIM-LS's 0.029; on ``consistency_rich`` 20 of 20 ``ok``, 0.024 against 0.055 and 0.062.

Each pass is one ``simulate_closed_loop_batch`` call of all the chunk's trials' models
(``jaxid.fit.model.BaseColumns.standard``: each ``θ`` as a standard vector, its dependent entries 0, the same
dynamics) and one call of the batched program. A trial stops (``"ok"``) once a pass moves none of its
parameters by more than ``TOLERANCE`` of that parameter's reported std (or than round-off), and is frozen
there; ``"max_iterations"`` after ``ITERATIONS`` passes; ``"diverged"`` when its model's closed loop does not
stay finite. A trial's passes depend on its own log only: its numbers do not depend on its chunk.
(Tried and not kept: halving the step from the last model that could be simulated, up to 3 times, where a
pass's closed loop diverges: on 100 poor Panda trials 63 ``ok`` as without, 20 ``diverged`` and 17
``max_iterations`` instead of 27 and 10. There the iteration itself does not settle: the regressor at the
simulated states is not the simulated torque's Jacobian in directions the data barely determine.)
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..simulation.closed_loop_batch import simulate_closed_loop_batch
from ..types import Status
from .batched import _band_matrix, _program

__all__ = ["ITERATIONS", "TOLERANCE", "didim_chunk"]

#: Passes at most (each a closed-loop simulation of every trial's model and a least-squares fit).
ITERATIONS = 20
#: A trial stops once a pass moves none of its parameters by more than this many of its reported stds
#: (or by more than ``ROUND_OFF`` of its largest parameter: noise-free data, whose stds vanish).
TOLERANCE = 1e-3
ROUND_OFF = 1e-12


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


def _pass(plan, thetas: np.ndarray, y: np.ndarray, band_t, ndev: int):
    """One DIDIM pass for a padded chunk: ``(θ (width, p), cov (width, p, p), finite (width,))``."""
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
    program = _program(plan, True, False, ndev)
    cmap = plan.model.consistent
    prior = jnp.asarray(cmap.arm.standard_parameters() if cmap.prior is None else cmap.prior)
    out = program(band_t, *states, jnp.asarray(y), prior, jnp.asarray(True))
    theta, cov = np.asarray(out["consistent_theta"]), np.asarray(out["consistent_cov"])
    finite &= np.all(np.isfinite(theta), axis=1) & np.all(np.isfinite(cov), axis=(1, 2))
    return theta, cov, finite


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
    width = -(-max(plan.width, count) // ndev) * ndev
    pad = np.concatenate([members, np.full(width - count, members[-1])]).astype(int)
    rows = tuple(int(r) for r in fits["rows"])
    band = _band_matrix(int(fits["qf"].shape[1]), s["sample_step"], s["cutoff_hz"], rows)
    band_t = jnp.asarray(np.ascontiguousarray(band.T))
    tau = np.asarray(run["tau"], dtype=float)[pad]  # (width, N, n)
    y = np.einsum("rs,tsn->trn", band, tau)
    theta, cov = _start(fits)
    theta, cov = theta[pad].copy(), cov[pad].copy()
    active = np.ones(width, bool)
    status = np.full(width, "max_iterations", dtype=object)
    for _ in range(ITERATIONS):
        new, new_cov, finite = _pass(plan, theta, y, band_t, ndev)
        diverged = active & ~finite
        status[diverged] = "diverged"
        active &= finite
        std = np.sqrt(np.abs(np.diagonal(new_cov, axis1=1, axis2=2)))
        # Still within TOLERANCE of a std, or within round-off of the estimate (noise-free data: std ~ 0).
        floor = ROUND_OFF * np.max(np.abs(new), axis=1, keepdims=True)
        settled = np.all(np.abs(new - theta) <= np.maximum(TOLERANCE * std, floor), axis=1)
        theta[active], cov[active] = new[active], new_cov[active]
        done = active & settled
        status[done] = "ok"
        active &= ~done
        if not active.any():
            break
    seconds = ((time.perf_counter() - t0) / count, (time.process_time() - c0) / count)
    out = {}
    for i, k in enumerate(members):
        if status[i] == "diverged":
            out[k] = (None, None, "diverged", *seconds)
        else:
            out[k] = (theta[i], cov[i], status[i], *seconds)
    return out
