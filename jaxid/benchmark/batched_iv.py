"""IDIM-IV over the trials of a benchmark chunk, its simulations batched over the trials.

``batched_iv(plan, logs, starts)`` gives for each trial's filtered log and IDIM-LS start what the
trial-by-trial call ``make_estimator("idim_iv")([log], plan.model, start=start)`` gives
(``jaxid.estimate.logs.iv.idim_iv`` with the estimator's default options: its passes, ``segment_s``,
the default decimation), with the work that dominates it done for all trials at once:

1. **Measured side** (once): the parallel-filtered regressor and torque at the rows the segments can
   give: ``measured``, the batched IDIM-LS program's rows ``F Y`` (``run_chunk`` passes them; equal to
   ``idim_iv``'s to round-off), or else ``idim_iv``'s own expressions (``rowwise`` of the regressor at
   every sample, ``FilteredLog.band``), the trials spread over the host's cores (``thread_map``).
2. **Per pass**: each trial's RK4 substeps, ``stable_substeps`` of its own estimate on its own log
   (as ``idim_iv``: more substeps are another discretisation, so trials are never run at another
   trial's count); the trials grouped by that count, each group in blocks of ``block`` lanes (the
   last block padded with copies of its last trial, so a trial's numbers do not depend on the chunk
   it ran in) through one compiled program per count: a ``vmap`` over the trials of
   ``stepping.simulate_segments`` from the filtered measured state every ``segment_s`` (all trials
   of a setting have the same segments: same length, step and trim), the ``NEAR_RAD`` rule per
   segment, the accelerations at the simulated states; the blocks spread over the host's cores
   (``thread_map``). Then the instrument rows (``rowwise`` of the regressor at the kept simulated
   states, all trials in one call) and the per-trial ``p × p`` algebra on host, ``iv.py``'s own
   (``_iv_weights``, ``_iv_solve``, ``_iv_identification``: column scaling, condition check, solve,
   Newey-West sandwich, smallest canonical correlation).

A trial whose batched path would take a branch it does not implement is left to the caller's
trial-by-trial call (``None`` in its place), so its status and message are ``idim_iv``'s: fewer than
``MIN_NEAR`` of its rows near the measured trajectory at the default ``segment_s`` (``idim_iv`` then
restarts more often, or raises), more than ``IV_MAX_SUBSTEPS`` RK4 substeps, a singular instrument
matrix, a linear-algebra error, a non-finite estimate. Each of these is decided on the trial's own
data, so whether a trial runs batched does not depend on its chunk either. Equal to the trial-by-trial call to round-off (the segments in another ``vmap``): on 100
trials of ``benchmark_panda``'s ``consistency_rich`` the estimates to 2.5e-11 of a trial's norm, the
stds to 9e-12; on 20 of ``consistency_poor`` to 1.8e-8 and 9e-9 (its IV passes amplify the simulations'
round-off: 2e-9 to 5e-9 with ``idim_iv``'s own measured rows); every status the same
(``tests/test_benchmark_batched_iv.py`` checks it on two joints).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._platform import thread_map
from ..estimate import make_estimator
from ..estimate.logs import FilteredLog
from ..estimate.logs.data import accelerations, rowwise
from ..estimate.logs.idim import Identification, _known_torque, correlation_lags, default_decimation, segment_starts
from ..estimate.logs.iv import MIN_NEAR, NEAR_RAD, _iv_identification, _iv_solve, _iv_weights
from ..estimate.logs.stepping import simulate_segments, stable_substeps, stage_torques

__all__ = ["batched_iv", "IV_BLOCK", "IV_MAX_SUBSTEPS"]

#: Trials per compiled simulation (``batched_iv``'s ``block``; at most the plan's width): wide enough that a
#: step's work is not dominated by the loop's overhead, small enough that the trials of a chunk fill a block
#: per core and that a trial at another substep count costs one block, not a chunk.
IV_BLOCK = 25
#: The most RK4 substeps a trial's simulations may take in the batched path; a trial whose own count
#: (``stable_substeps``, per pass) is larger runs trial by trial. Counts above it are rare (a stiff
#: estimate: 5 of 20 trials of ``benchmark_panda``'s poorly exciting setting, in its first pass) and
#: each is a group of its own, padded to a whole block: 16 substeps for one trial cost a block of them.
IV_MAX_SUBSTEPS = 3


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _signals(regressor, known, sample_step: float, substeps: int, theta, x0, torques, q_measured, tau, keep):
    """Per trial (leading axis ``B``) of the block: ``(near rows, states (K, 2 n), q'' (K, n), near (K,))``
    of ``iv.simulated_signals`` for one log, at the ``K`` rows ``keep`` of its segments' samples.

    ``theta`` ``(B, p)``; ``x0`` ``(B, S, 2 n)`` the segments' initial states; ``torques`` ``(B, S, L, 3, n)``
    their stage torques; ``q_measured`` ``(B, S, L, n)`` the filtered angles over the segments; ``tau``
    ``(B, S L, n)`` the torque at those samples. Not-near segments' states are their initial state."""

    def one(theta, x0, torques, q_measured, tau):
        n = q_measured.shape[-1]
        states = simulate_segments(regressor, theta, x0, torques, sample_step, known, substeps)[:, :-1]
        deviation = jnp.abs(states[..., :n] - q_measured)
        deviation = jnp.where(jnp.isnan(deviation), jnp.inf, deviation)
        near_segment = jnp.all(jnp.isfinite(states), axis=(1, 2)) & (deviation.max(axis=(1, 2)) <= NEAR_RAD)
        states = jnp.where(near_segment[:, None, None], states, x0[:, None, :]).reshape(-1, 2 * n)
        qdd = jax.vmap(lambda q, qd, t: accelerations(regressor, theta, q, qd, t, known))(
            states[:, :n], states[:, n:], tau
        )
        near = jnp.repeat(near_segment, torques.shape[1]) & jnp.all(jnp.isfinite(qdd), axis=1)
        return jnp.sum(near), states[keep], qdd[keep], near[keep]

    return jax.vmap(one)(theta, x0, torques, q_measured, tau)


def _options() -> dict:
    """``make_estimator("idim_iv")``'s options on logs (``iterations``, ``segment_s``, maybe ``decimate``)."""
    return dict(make_estimator("idim_iv")._applicable("log"))


def batched_iv(
    plan,
    logs: Sequence[FilteredLog],
    starts: Sequence[Identification],
    *,
    measured: tuple | None = None,
    block: int | None = None,
) -> list[Identification | None]:
    """IDIM-IV on each log from its start (module docstring): one ``Identification`` per trial, equal to
    the trial-by-trial call's to round-off, or ``None`` where that call is to run instead (a branch the
    batched path leaves to it). ``logs``: the chunk's trials, one setting (same length, step, cut-off,
    trim); ``block``: trials per compiled simulation (default ``IV_BLOCK``, at most ``plan.width``).
    ``measured``: ``(W (trials, R, n, p), y (trials, R, n), rows (R,))``, the parallel-filtered regressor and
    torque at the sample indices ``rows`` (``batched_fits``'s ``ls_rows``, ``y``, ``rows``: equal to
    ``idim_iv``'s to round-off) instead of computing them here."""
    if not logs:
        return []
    model = plan.model
    regressor, known, names = model.regressor, model.known, tuple(model.names)
    options = _options()
    iterations, segment_s = int(options["iterations"]), float(options["segment_s"])
    d0 = logs[0]
    h = d0.sample_step
    decimate = options.get("decimate") or default_decimation(h, d0.cutoff_hz)
    block = max(1, min(IV_BLOCK if block is None else block, plan.width))
    count, n = len(logs), d0.joints
    # The segments (``simulated_signals``): the same for every trial of the setting.
    length = max(1, int(round(segment_s / h)))
    seg = segment_starts(d0, length)
    idx = (seg[:, None] + np.arange(length)).reshape(-1)
    keep_all = np.arange(0, idx.size, decimate)
    # Measured side (``idim_iv``'s expressions, trial by trial over the host's cores): at the candidate rows.
    candidates = idx[keep_all]

    def host_rows(d):
        w = d.band(rowwise(regressor, d.q, d.qd, d.qdd))[candidates]
        return w, d.band(np.asarray(d.tau) - _known_torque(d, known))[candidates]

    at = np.searchsorted(measured[2], candidates) if measured is not None else None
    if at is not None and np.all(at < len(measured[2])) and np.array_equal(measured[2][at], candidates):
        measured_rows = [(w[at], y[at]) for w, y in zip(measured[0], measured[1], strict=True)]
    else:
        measured_rows = thread_map(host_rows, logs)
    # Per-trial simulation inputs (``free_simulation``'s), gathered once.
    q = np.stack([np.asarray(d.q) for d in logs])
    qd = np.stack([np.asarray(d.qd) for d in logs])
    tau = np.stack([np.asarray(d.tau) for d in logs])
    x0 = np.concatenate([q[:, seg], qd[:, seg]], axis=2)
    stages = np.stack([np.asarray(stage_torques(d.tau)) for d in logs])
    torques = stages[:, seg[:, None] + np.arange(length)]
    q_measured = q[:, idx].reshape(count, len(seg), length, n)
    tau_idx = tau[:, idx]
    keep_j = jnp.asarray(keep_all)

    theta = [np.asarray(s.value) for s in starts]
    alive = list(range(count))
    sigma: list = [None] * count
    last: dict = {}
    for _ in range(iterations):
        substeps = {k: stable_substeps(regressor, theta[k], [logs[k]], known)[0] for k in alive}
        alive = [k for k in alive if substeps[k] <= IV_MAX_SUBSTEPS]
        jobs = []
        for sub in sorted(set(substeps.values())):
            group = [k for k in alive if substeps[k] == sub]
            jobs += [(sub, group[i : i + block]) for i in range(0, len(group), block)]

        def simulate(job, block=block):
            sub, members = job
            lanes = np.asarray(members + [members[-1]] * (block - len(members)))
            th = jnp.asarray(np.stack([theta[k] for k in lanes]))
            out = _signals(regressor, known, h, int(sub), th, jnp.asarray(x0[lanes]), jnp.asarray(torques[lanes]),
                           jnp.asarray(q_measured[lanes]), jnp.asarray(tau_idx[lanes]), keep_j)  # fmt: skip
            return members, [np.asarray(x)[: len(members)] for x in out]

        signals = {}
        for members, (near_count, states, qdd, near) in thread_map(simulate, jobs):
            for i, k in enumerate(members):
                signals[k] = (int(near_count[i]), states[i], qdd[i], near[i])
        alive = [k for k in alive if signals[k][0] / idx.size >= MIN_NEAR]
        # Instruments: the regressor at the near kept states, all trials in one ``rowwise``.
        kept = {k: signals[k][3] for k in alive}
        stacked = [np.concatenate([signals[k][j][kept[k]] for k in alive]) for j in (1, 2)] if alive else None
        z_all = rowwise(regressor, stacked[0][:, :n], stacked[0][:, n:], stacked[1]) if alive else None
        offset = 0
        survivors = []
        for k in alive:
            z = z_all[offset : offset + int(kept[k].sum())]
            offset += z.shape[0]
            w, y = (x[kept[k]] for x in measured_rows[k])
            try:
                if sigma[k] is None:
                    sigma[k] = _iv_weights(w, y, theta[k])
                theta[k], solved = _iv_solve(w, z, y, sigma[k])
            except (ValueError, np.linalg.LinAlgError):
                continue
            if np.all(np.isfinite(theta[k])):
                last[k] = (w, y, solved)
                survivors.append(k)
        alive = survivors
    lags = correlation_lags(h, d0.cutoff_hz, decimate)
    out: list[Identification | None] = [None] * count
    for k in alive:
        w, y, solved = last[k]
        try:
            out[k] = _iv_identification(names, theta[k], w, y, sigma[k], solved, lags, iterations, "")
        except (ValueError, np.linalg.LinAlgError):
            out[k] = None
    return out
