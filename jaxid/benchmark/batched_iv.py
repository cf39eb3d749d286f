"""IDIM-IV over the trials of a benchmark chunk, its simulations batched over the trials.

``batched_iv(plan, logs, starts)`` gives for each trial's filtered log and start (``run_chunk``'s: the consistent
LS where it converged, else IDIM-LS) what the
trial-by-trial call ``make_estimator("idim_iv")([log], plan.model, start=start)`` gives
(``jaxid.estimate.logs.iv.idim_iv`` with the setting's options, ``estimator_options.idim_iv`` over the class's defaults: its passes, ``segment_s``,
the default decimation), with the work that dominates it done for all trials at once:

1. **Measured side** (once): the parallel-filtered regressor and torque at the rows the segments can
   give: ``measured``, the batched IDIM-LS program's rows ``F Y`` (``run_chunk`` passes them; equal to
   ``idim_iv``'s to round-off), or else ``idim_iv``'s own expressions (``rowwise`` of the regressor at
   every sample, ``FilteredLog.band``), once per trial that needs them.
2. **Per pass**: each trial's RK4 substeps, ``stable_substeps`` of its own estimate on its own log
   (as ``idim_iv``: more substeps are another discretisation, so trials are never run at another
   trial's count; all trials' in ``stable_substeps_many``, ``block`` per call), and ``idim_iv``'s restarts
   (``iv._near_signals``): the simulations restart from
   the filtered measured state every ``segment_s`` (all trials of a setting have the same segments:
   same length, step and trim), and a trial with fewer than ``MIN_NEAR`` of its rows near the measured
   trajectory (``NEAR_RAD``) is simulated again at half the interval, down to ``MIN_SEGMENT_STEPS``
   samples (then the error ``idim_iv`` raises). Every lane's substep count is traced
   (``stepping.integrate_sample``), so one program per interval and block width serves every count
   (traced counts cost what static ones do: 0.46 s / 0.93 s / 1.37 s against 0.46 / 0.92 / 1.43 s for
   10 Panda trials' pass at 1 / 2 / 3 substeps on the generic path; a static count was one more program, 4-5 s
   of compile each). The simulations take ``simulate_segments``' unrolled dynamics (a ``SerialArm``'s
   base-parameter model: ~6x faster per acceleration; one call on 100 poorly exciting Panda trials 8.9 s
   against 40.6 s, the same statuses). At the first interval the trials with at most ``IV_MAX_SUBSTEPS`` substeps run grouped by
   that count (a block takes its largest count's time), each group in blocks of ``block`` lanes (the
   last block padded with copies of its last trial); a trial at more substeps or at a shorter interval
   runs in a block of its own. Which block a trial
   runs in is decided on its own data and a block's width never depends on the chunk, so a trial's
   numbers do not depend on the chunk it ran in. A block is a ``vmap`` over its trials of
   ``stepping.simulate_segments``, the ``NEAR_RAD`` rule per segment and the accelerations at the
   simulated states; the blocks spread over the host's cores (``thread_map``). Then the instrument rows
   (``rowwise`` of the regressor at the kept simulated states, all trials in one call) and the
   per-trial ``p × p`` algebra on host, ``iv.py``'s own (``_iv_weights``, ``_iv_solve``,
   ``_iv_identification``: column scaling, condition check, solve, Newey-West sandwich, smallest
   canonical correlation).

Every branch of ``idim_iv`` runs here: a trial whose call would raise (no interval keeps its
simulations near, a singular instrument matrix, a linear-algebra error) gets that exception in its
place, its message the same, for the caller to record as the trial's status. Equal to the trial-by-trial call to round-off (the segments in another ``vmap``): on 100
trials of ``benchmark_panda``'s ``consistency_rich`` the estimates to 2.5e-11 of a trial's norm, the
stds to 9e-12; on 20 of ``consistency_poor`` to 1.8e-8 and 9e-9 (its IV passes amplify the simulations'
round-off: 2e-9 to 5e-9 with ``idim_iv``'s own measured rows); every status the same
(``tests/test_benchmark_batched_iv.py`` checks it on two joints, restarts and traced counts included). On
200 trials of ``consistency_poor`` (2026-12-05) the 31 trials that restart or need more than
``IV_MAX_SUBSTEPS`` substeps in some pass (formerly run trial by trial) have the same statuses; the 14 of
them ``ok`` agree with the trial-by-trial call to 2.7e-7 of their norm, the 17 ``weak_instruments`` ones
(smallest canonical correlation below 0.05: an estimate not determined in some direction) to anywhere
between 8e-9 and 10: there the trial-by-trial call itself moves as much when its start changes by 1e-13
of itself (trial 37: 7.8; trial 170, ``ok``: 2.1e-7 against 2.7e-7 between the two paths).
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
from ..estimate.logs.iv import (
    MIN_NEAR,
    MIN_SEGMENT_STEPS,
    NEAR_RAD,
    _iv_identification,
    _iv_solve,
    _iv_weights,
    not_near_error,
)
from ..estimate.logs.stepping import simulate_segments, stable_substeps_many, stage_torques

__all__ = ["batched_iv", "IV_BLOCK", "IV_MAX_SUBSTEPS"]

#: Trials per wide compiled simulation (``batched_iv``'s ``block``; at most the plan's width). A lane costs about
#: the same at widths 1-25 (a Panda trial's pass: 60-90 ms), so a narrow block wastes less on padding: on 100
#: trials of ``benchmark_panda``'s ``consistency_poor`` (whose substep counts split them into groups of ~55,
#: 30, 15) one call took 43.8 s at 25, 37.9 s at 10 and 39.4 s with every trial alone (2026-12-05).
#: (Measured on the generic simulations, before the unrolled ones.)
IV_BLOCK = 10
#: The most RK4 substeps a trial may take in a wide block (``batched_iv``); a trial whose own count
#: (``stable_substeps``, per pass) is larger runs in a block of its own. Counts above it are rare (a stiff
#: estimate: 5 of 20 trials of ``benchmark_panda``'s poorly exciting setting, in its first pass); in a
#: wide block one such trial would cost a block of lanes at its count.
IV_MAX_SUBSTEPS = 3


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 8))
def _signals(regressor, known, sample_step: float, theta, x0, torques, q_measured, tau, keep, counts):
    """Per trial (leading axis ``B``) of the block: ``(near rows, states (K, 2 n), q'' (K, n), near (K,))``
    of ``iv.simulated_signals`` for one log, at the ``K`` rows ``range(*keep)`` of its segments' samples
    (``keep`` static).

    ``theta`` ``(B, p)``; ``x0`` ``(B, S, 2 n)`` the segments' initial states; ``torques`` ``(B, S, L, 3, n)``
    their stage torques; ``q_measured`` ``(B, S, L, n)`` the filtered angles over the segments; ``tau``
    ``(B, S L, n)`` the torque at those samples. Not-near segments' states are their initial state.
    ``counts`` ``(B,)``: each lane's RK4 substeps (traced: ``stepping.integrate_sample``; one program for
    every count).

    ``simulated_signals`` keeps a row where its segment is near and the accelerations there are finite. In a
    near segment (every state finite) that holds at every sample but the last: the step from sample ``k``
    starts by evaluating the accelerations at its state and torque (the first RK4 stage), so a non-finite
    one would make state ``k + 1`` non-finite. So the accelerations are computed only at the kept rows and
    at each segment's last sample (a fifth of the work of computing them at every sample, at one RK4 step
    per sample)."""

    rows = np.arange(*keep)

    def one(theta, x0, torques, q_measured, tau, count):
        segments, length, n = q_measured.shape
        states = simulate_segments(regressor, theta, x0, torques, sample_step, known, count)[:, :-1]
        deviation = jnp.abs(states[..., :n] - q_measured)
        deviation = jnp.where(jnp.isnan(deviation), jnp.inf, deviation)
        near_segment = jnp.all(jnp.isfinite(states), axis=(1, 2)) & (deviation.max(axis=(1, 2)) <= NEAR_RAD)
        states = jnp.where(near_segment[:, None, None], states, x0[:, None, :]).reshape(-1, 2 * n)
        last = np.arange(segments) * length + length - 1  # each segment's last sample
        at = np.concatenate([rows, last])
        qdd = jax.vmap(lambda q, qd, t: accelerations(regressor, theta, q, qd, t, known))(
            states[at, :n], states[at, n:], tau[at]
        )
        finite = jnp.all(jnp.isfinite(qdd), axis=1)
        last_finite = jnp.ones(segments * length, bool).at[last].set(finite[len(rows) :])
        near = jnp.repeat(near_segment, length) & last_finite
        return jnp.sum(near), states[rows], qdd[: len(rows)], near[rows]

    return jax.vmap(one)(theta, x0, torques, q_measured, tau, counts)


def _options(plan) -> dict:
    """The setting's IDIM-IV options on logs (``iterations``, ``segment_s``, maybe ``decimate``): its
    ``estimator_options.idim_iv`` over the class's defaults."""
    return dict(make_estimator("idim_iv", plan.setting["estimator_options"].get("idim_iv"))._applicable("log"))


class _Segments:
    """The chunk's simulation inputs at one restart interval (``iv.simulated_signals``'s segments, the same
    for every trial of a setting): ``length`` samples per segment, their sample indices ``idx``, the
    candidate rows ``keep`` (every ``decimate``-th of ``idx``) and, per trial, the segments' initial
    states, stage torques, filtered angles and the torque at ``idx``."""

    def __init__(self, logs, stages, segment_s: float, decimate: int):
        d0 = logs[0]
        n = d0.joints
        self.length = max(1, int(round(segment_s / d0.sample_step)))
        seg = segment_starts(d0, self.length)
        self.idx = (seg[:, None] + np.arange(self.length)).reshape(-1)
        self.keep = np.arange(0, self.idx.size, decimate)
        self.keep_key = (0, self.idx.size, decimate)  # ``_signals``' static rows: ``range(*keep_key)``
        q = np.stack([np.asarray(d.q) for d in logs])
        qd = np.stack([np.asarray(d.qd) for d in logs])
        self.x0 = np.concatenate([q[:, seg], qd[:, seg]], axis=2)
        self.torques = stages[:, seg[:, None] + np.arange(self.length)]
        self.q_measured = q[:, self.idx].reshape(len(logs), len(seg), self.length, n)
        self.tau = np.stack([np.asarray(d.tau) for d in logs])[:, self.idx]


def batched_iv(
    plan,
    logs: Sequence[FilteredLog],
    starts: Sequence[Identification],
    *,
    measured: tuple | None = None,
    block: int | None = None,
) -> list[Identification | Exception]:
    """IDIM-IV on each log from its start (module docstring): per trial the ``Identification`` the
    trial-by-trial call gives (to round-off) or the exception it raises (its message the same). ``logs``: the chunk's trials, one
    setting (same length, step, cut-off, trim); ``block``: trials per wide compiled simulation (default
    ``IV_BLOCK``, at most ``plan.width``). ``measured``: ``(W (trials, R, n, p), y (trials, R, n), rows (R,))``,
    the parallel-filtered regressor and torque at the sample indices ``rows`` (``batched_fits``'s
    ``ls_rows``, ``y``, ``rows``: equal to ``idim_iv``'s to round-off) instead of computing them here."""
    if not logs:
        return []
    model = plan.model
    regressor, known, names = model.regressor, model.known, tuple(model.names)
    options = _options(plan)
    iterations, segment_s = int(options["iterations"]), float(options["segment_s"])
    d0 = logs[0]
    h = d0.sample_step
    decimate = options.get("decimate") or default_decimation(h, d0.cutoff_hz)
    block = max(1, min(IV_BLOCK if block is None else block, plan.width))
    count, n = len(logs), d0.joints
    stages = np.stack([np.asarray(stage_torques(d.tau)) for d in logs])
    levels: dict[float, _Segments] = {}  # restart interval → its segments, built when a trial first needs them

    def segments(level: float) -> _Segments:
        if level not in levels:
            levels[level] = _Segments(logs, stages, level, decimate)
        return levels[level]

    # The measured side (``idim_iv``'s expressions) at any level's candidate rows: from the batched IDIM-LS
    # rows where they hold them, else each trial's whole banded regressor and torque, computed once.
    whole: dict[int, tuple] = {}

    def measured_rows(k: int, candidates: np.ndarray):
        if measured is not None:
            at = np.searchsorted(measured[2], candidates)
            if np.all(at < len(measured[2])) and np.array_equal(measured[2][at], candidates):
                return measured[0][k][at], measured[1][k][at]
        if k not in whole:
            d = logs[k]
            whole[k] = (
                d.band(rowwise(regressor, d.q, d.qd, d.qdd)),
                d.band(np.asarray(d.tau) - _known_torque(d, known)),
            )
        return whole[k][0][candidates], whole[k][1][candidates]

    def simulate(job, level: float):
        """One block of trials at ``level``: ``(members, [near count, states, q'', near])``."""
        members, width = job
        g = segments(level)
        lanes = np.asarray(members + [members[-1]] * (width - len(members)))
        counts = jnp.asarray([substeps[k] for k in lanes], jnp.int32)
        th = jnp.asarray(np.stack([theta[k] for k in lanes]))
        out = _signals(regressor, known, h, th, jnp.asarray(g.x0[lanes]), jnp.asarray(g.torques[lanes]),
                       jnp.asarray(g.q_measured[lanes]), jnp.asarray(g.tau[lanes]), g.keep_key, counts)  # fmt: skip
        return members, [np.asarray(x)[: len(members)] for x in out]

    shortest = MIN_SEGMENT_STEPS * h
    theta = [np.asarray(s.value) for s in starts]
    alive = list(range(count))
    sigma: list = [None] * count
    notes = [""] * count
    last: dict = {}
    out: list = [None] * count  # every trial ends with an ``Identification`` or an exception
    for _ in range(iterations):
        counts = stable_substeps_many(
            regressor, [theta[k] for k in alive], [[logs[k]] for k in alive], known, width=block
        )
        substeps = {k: c for k, (c, _) in zip(alive, counts, strict=True)}
        # ``_near_signals`` per trial: restart every ``segment_s``, halved until ``MIN_NEAR`` of the rows stay
        # near. Wide blocks of ``block`` lanes, one substep count each, up to ``IV_MAX_SUBSTEPS`` at the
        # first interval; a trial at more substeps or a shorter interval in a block of its own. Each lane
        # runs at its own count (traced).
        signals, pending, level = {}, list(alive), segment_s
        while pending:
            jobs = []
            if level == segment_s:
                for sub in sorted({substeps[k] for k in pending if substeps[k] <= IV_MAX_SUBSTEPS}):
                    group = [k for k in pending if substeps[k] == sub]
                    jobs += [(group[i : i + block], block) for i in range(0, len(group), block)]
            jobs += [([k], 1) for k in pending if level != segment_s or substeps[k] > IV_MAX_SUBSTEPS]
            g = segments(level)
            retry = []
            for members, (near_count, states, qdd, near) in thread_map(functools.partial(simulate, level=level), jobs):
                for i, k in enumerate(members):
                    share = int(near_count[i]) / g.idx.size
                    if share >= MIN_NEAR:
                        signals[k] = (level, states[i], qdd[i], near[i])
                    elif level / 2 < shortest:
                        out[k] = not_near_error(share, level)
                    else:
                        retry.append(k)
            pending, level = sorted(retry), level / 2
        alive = [k for k in alive if k in signals]
        # Instruments: the regressor at the near kept states, all trials in one ``rowwise``.
        kept = {k: signals[k][3] for k in alive}
        stacked = [np.concatenate([signals[k][j][kept[k]] for k in alive]) for j in (1, 2)] if alive else None
        z_all = rowwise(regressor, stacked[0][:, :n], stacked[0][:, n:], stacked[1]) if alive else None
        offset = 0
        survivors = []
        for k in alive:
            used = signals[k][0]
            if used != segment_s:
                notes[k] = (
                    f"simulations restarted every {used:.3g} s (not {segment_s:g} s) to stay near the measured trajectory"
                )
            z = z_all[offset : offset + int(kept[k].sum())]
            offset += z.shape[0]
            w, y = measured_rows(k, segments(used).idx[segments(used).keep][kept[k]])
            try:
                if sigma[k] is None:
                    sigma[k] = _iv_weights(w, y, theta[k])
                theta[k], solved = _iv_solve(w, z, y, sigma[k])
            except (ValueError, np.linalg.LinAlgError) as err:
                out[k] = err
                continue
            last[k] = (w, y, solved)
            survivors.append(k)
        alive = survivors
    lags = correlation_lags(h, d0.cutoff_hz, decimate)
    for k in alive:
        w, y, solved = last[k]
        try:
            out[k] = _iv_identification(names, theta[k], w, y, sigma[k], solved, lags, iterations, notes[k])
        except (ValueError, np.linalg.LinAlgError) as err:
            out[k] = err
    return out
