"""A chunk of benchmark trials through every estimator of its setting: ``run_chunk``, what the runner
(``jaxid.benchmark.runner``) calls per chunk of simulated trials.

The least-squares family (``BATCHED``: IDIM-LS, RLS, consistent LS, sign-bounded LS) runs as one compiled program
(``jaxid.benchmark.batched.batched_fits``). The Kalman filters (``FILTERS``: EKF, UKF) run over the chunk's trials
that are to run them as one ``kalman_filter_batch`` call each (a ``vmap`` of the filter over blocks of
``min(FILTER_BLOCK, plan.width, the estimator's trial limit)`` trials of one substep count, the last padded, so a
trial's numbers do not depend on its chunk; the count traced, so one program serves every count), with the
setting's options (``setting_estimator``). IDIM-IV runs batched as well (``jaxid.benchmark.batched_iv``: each
pass's segment simulations of all the trials' estimates as one ``vmap``, the algebra ``idim_iv``'s own, its
restarts and stiff estimates in blocks of their own; equal to it to round-off, a trial whose call would raise given
that error). DIDIM (``jaxid.benchmark.didim``) runs over the chunk's trials too, each pass one batched closed loop
and one batched fit, from the batched consistent LS. On an accelerator (``lockstep()``) output error (``LOCKSTEP``)
runs its chunk's fits in lockstep (``OutputError.fit_logs_batch``: each round's passes of all of them as one
program over their segments, in chunks of one shape, so a trial's numbers are its own). The others (output error on
a CPU, where that measured slower; consistent output error; sign-bounded LS with options of its own) run trial by
trial as in ``run_estimators``, the fits spread over the host's cores (``thread_map``). They start, on a
``FilteredLog`` built from the batched filtering, from the batched IDIM-LS estimate, and those that simulate their
model (IDIM-IV, the Kalman filters, output error) from the batched consistent LS where it converged
(``batched._start``: ``jaxid fit``'s rule). Statuses as ``run_estimators``'s; seconds per trial of a batched
estimator or filter are its call's time over its trials.
"""

from __future__ import annotations

import time

import numpy as np

from .._platform import thread_map
from ..estimate.kalman.logs import KINDS, kalman_filter_batch
from ..types import Status
from .batched import _log, _start, batched_estimators, batched_fits, simulates
from .batched_iv import batched_iv
from .didim import didim_chunk

__all__ = ["FILTERS", "FILTER_BLOCK", "LOCKSTEP", "lockstep", "run_chunk"]

#: The Kalman filters ``run_chunk`` runs over a chunk's trials as one ``kalman_filter_batch`` call each.
FILTERS = KINDS
#: The estimators ``run_chunk`` runs over a chunk's trials in lockstep where ``lockstep()`` says so (``fit_logs_batch``:
#: output error's fits, each round's passes as one program over all their segments).
LOCKSTEP = ("output_error",)


def lockstep() -> bool:
    """Whether ``run_chunk`` runs output error's fits in lockstep: on an accelerator (JAX's default backend not the
    CPU), where one program over many segments is what pays (not measured: no GPU lent). On a CPU the fits run
    trial by trial on the host's cores, which measured faster (``scripts/bench_output_error_lockstep.py``, 5 poorly
    exciting Panda trials, 2 cores, warm: 31.6 s against 150.8 s in lockstep, whose chunks of one shape put a
    round on one core; chunks sized to each round, an earlier form: 31 against 46 s, and 150 against 145 s on
    20 trials; docs/performance.md, "Output error's fits in lockstep")."""
    import jax

    return jax.default_backend() != "cpu"


#: Trials per ``vmap`` of a Kalman filter (``kalman_filter_batch``'s ``width``; at most the plan's width and the
#: estimator's trial limit): a filter's lane is heavy (the ``(2 n + p)²`` covariance, a ``2 n + p``-tangent
#: Jacobian per step), so narrow blocks lose nothing to overhead, waste little on padding when the trials'
#: substep counts split them into groups, and spread over the cores.
FILTER_BLOCK = 10


def _one_call(plan, run: dict, fits: dict | None, e: str, members: list[int]) -> dict:
    """Estimator ``e`` on the chunk's trials ``members`` (indices into ``run``) in one call: a Kalman filter
    (``FILTERS``) by ``kalman_filter_batch`` with the options ``setting_estimator(plan, e)`` (the setting's) passes to
    ``kalman_filter_fit`` (its ``_fit_logs``; the model's known torque), IDIM-IV by ``batched_iv``, output error
    (``LOCKSTEP``, where ``lockstep()``) by its ``fit_logs_batch``.
    ``{k: (value, cov, status, seconds, cpu_seconds)}`` for every trial (a trial whose fit fails has its
    error as its status), the call's time shared evenly; empty if the call raised: those run trial by trial."""
    from .trial import _failure, setting_estimator

    if not members:
        return {}
    s, model = plan.setting, plan.model
    t0, c0 = time.perf_counter(), time.process_time()
    logs, starts = [_log(plan, run, fits, k) for k in members], [_start(plan, fits, k, e) for k in members]
    options = {k: float(v) for k, v in setting_estimator(plan, e)._applicable("log").items()} if e in FILTERS else {}
    width = min(FILTER_BLOCK, plan.width, s["estimator_trials"].get(e, s.trials))
    try:
        if e == "idim_iv":
            measured = (fits["ls_rows"][members], fits["y"][members], fits["rows"])
            results = batched_iv(plan, logs, starts, measured=measured)
        elif e in LOCKSTEP:
            results = setting_estimator(plan, e).fit_logs_batch([[d] for d in logs], model, starts)
        else:
            results = kalman_filter_batch(
                logs, model.regressor, model.names, starts=starts, kind=e, known=model.known, width=width, **options
            )
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return {}
    seconds = ((time.perf_counter() - t0) / len(members), (time.process_time() - c0) / len(members))
    return {
        k: (None, None, _failure(r), *seconds)
        if isinstance(r, Exception)
        else (r.value, r.covariance, r.status, *seconds)
        for k, r in zip(members, results, strict=True)
    }


def run_chunk(plan, run: dict, trials) -> list[dict]:
    """The rows of ``run_estimators`` for every trial of a simulated chunk (``run``, ``trials`` its indices): the
    ``BATCHED`` estimators in one program, the ``FILTERS`` in one ``kalman_filter_batch`` call each, IDIM-IV
    by ``batched_iv``, output error in lockstep on an accelerator, DIDIM by ``didim_chunk`` (from the batched
    consistent LS), the others trial by trial (over the host's cores), from the batched IDIM-LS (``_start``:
    those that simulate from the batched consistent LS)."""
    from .trial import _failure, estimate_rows, setting_estimator

    s = plan.setting
    limits = s["estimator_trials"]
    trials = [int(t) for t in trials]
    count = len(trials)
    ok = np.asarray(run["status"]) == Status.SUCCESS
    batched = batched_estimators(s)
    iv = [e for e in s["estimators"] if e == "idim_iv"]
    t0, c0 = time.perf_counter(), time.process_time()
    error = None
    if ok.any() and not ok.all():  # a diverged log (not finite) is not fitted: a good trial's stands in
        good = int(np.flatnonzero(ok)[0])
        run = {f: np.where(ok.reshape((-1,) + (1,) * (v.ndim - 1)), v, v[good]) for f, v in run.items()}
    try:
        # The estimators that simulate (DIDIM, IDIM-IV, the Kalman filters, output error) start from consistent LS
        # (``batched._start``, ``jaxid.benchmark.didim``): the batched program computes it as well.
        start = ("idim_ls_consistent",) if any(map(simulates, s["estimators"])) and plan.model.consistent else ()
        fits = batched_fits(plan, run, (*batched, "idim_ls", *iv, *start)) if ok.any() else None
    except ValueError as err:  # a log too short for the filter: every trial's IDIM-LS fails
        fits, error = None, _failure(err)
    per_trial = ((time.perf_counter() - t0) / count, (time.process_time() - c0) / count)
    started = [k for k in range(count) if ok[k] and fits is not None and fits["ls_first_rank"][k] >= len(plan.names)]
    filtered = {
        e: _one_call(plan, run, fits, e, [k for k in started if trials[k] < limits.get(e, s.trials)])
        for e in s["estimators"]
        if e in (*FILTERS, "idim_iv", *(LOCKSTEP if lockstep() else ()))
    }
    if "didim" in s["estimators"]:
        members = [k for k in started if trials[k] < limits.get("didim", s.trials)]
        filtered["didim"] = didim_chunk(plan, run, fits, members)
    # The estimators that run trial by trial (output error, bounded LS): each fit on its own data, the fits
    # spread over the host's cores (``thread_map``: their passes are compiled programs, which release the GIL;
    # a fit's result does not depend on its neighbours). Seconds per fit are its own wall time.
    single = [
        (k, e)
        for k in started
        for e in s["estimators"]
        if trials[k] < limits.get(e, s.trials) and e not in batched and k not in filtered.get(e, {})
    ]

    def fit(job):
        k, e = job
        t1 = time.perf_counter()
        try:
            est = setting_estimator(plan, e)([_log(plan, run, fits, k)], plan.model, start=_start(plan, fits, k, e))
            value, cov, label = est.value, est.covariance, est.status
        except (ValueError, np.linalg.LinAlgError, FloatingPointError) as err:
            value, cov, label = None, None, _failure(err)
        return value, cov, label, time.perf_counter() - t1

    c1 = time.process_time()
    done = thread_map(fit, single)
    # CPU seconds: the process's over all these fits, shared in proportion to their wall times (a thread's own
    # CPU clock misses the compiled work, which XLA runs on its own threads).
    cpu, walls = time.process_time() - c1, sum(r[3] for r in done)
    alone = {job: (*r, cpu * r[3] / walls if walls > 0 else 0.0) for job, r in zip(single, done, strict=True)}
    rows = []
    for k, trial in enumerate(trials):
        names = [e for e in s["estimators"] if trial < limits.get(e, s.trials)]
        out = {}
        if not ok[k]:
            out = {e: (None, None, "sim_diverged", 0.0, 0.0) for e in names}
        elif fits is None or fits["ls_first_rank"][k] < len(plan.names):
            label = error or "rank_deficient"
            out = {e: (None, None, label if e == "idim_ls" else "start_" + label, 0.0, 0.0) for e in names}
        else:
            for e in names:
                if e == "idim_ls":
                    out[e] = (fits["ls_theta"][k], fits["ls_cov"][k], "ok", *per_trial)
                elif e == "rls":
                    out[e] = (fits["rls_theta"][k], fits["rls_cov"][k], "ok", *per_trial)
                elif e == "idim_ls_consistent":
                    code = int(fits["consistent_status"][k])
                    label = {int(Status.SUCCESS): "ok", int(Status.MAX_ITERATIONS): "max_iterations"}.get(
                        code, "failed"
                    )
                    out[e] = (fits["consistent_theta"][k], fits["consistent_cov"][k], label, *per_trial)
                elif e == "idim_ls_bounded" and e in batched:
                    label = "ok" if fits["bounded_converged"][k] else "max_iterations"
                    out[e] = (fits["bounded_theta"][k], fits["bounded_cov"][k], label, *per_trial)
                elif k in filtered.get(e, {}):
                    out[e] = filtered[e][k]
                else:
                    out[e] = alone[(k, e)]
        rows.extend(estimate_rows(plan, trial, names, out))
    return rows
