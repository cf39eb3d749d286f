"""Output error over a benchmark chunk's trials: in lockstep (``OutputError.fit_logs_batch``: each round's passes of
all the trials as one compiled program over their segments, what ``jaxid.benchmark.chunk`` runs) against trial by
trial (each fit on its own, the fits spread over the host's cores by ``thread_map``: what the chunk ran before),
measured in the same run on the same trials, logs and starts.

The trials are the benchmark's: ``--trials`` trials of the setting ``--setting`` of ``--config`` (default the
poorly exciting Panda, ``consistency_poor`` of ``experiments/benchmark_panda.toml``), simulated and filtered by the
batched program, output error with the setting's options from the benchmark's start (``batched._start``: the
converged consistent LS). Every path runs once to compile (its time reported apart: it holds the compilation of
the shapes it meets), then ``--repeats`` times warm, the two paths one after the other in each repeat so that a
change of the shared machine's load hits both; the figures are medians and the ratio the median of the
per-repeat ratios. Accuracy beside: per trial the status of both paths and the largest difference of their
estimates relative to the largest entry. Memory: the process's peak resident set (``ru_maxrss``) after each
path's first call (trial by trial runs first, so the lockstep figure is the larger of the two).

    python scripts/bench_output_error_lockstep.py                       # 5 poor Panda trials, 2 repeats
    python scripts/bench_output_error_lockstep.py --trials 4 --repeats 1 --out ''

Writes ``results/bench_output_error_lockstep/summary.json`` (``--out``; empty: print only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "experiments" / "benchmark_panda.toml"))
    p.add_argument("--setting", default="consistency_poor")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_output_error_lockstep"))
    return p.parse_args(argv)


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxid._platform import thread_map
    from jaxid.benchmark import load_benchmark, make_plan
    from jaxid.benchmark.batched import _log, _start, batched_fits
    from jaxid.benchmark.trial import setting_estimator, simulate_trials

    exp = load_benchmark(args.config).select([args.setting])
    plan = make_plan(exp, exp.settings[0])
    plan.width = args.trials
    run = simulate_trials(plan, np.arange(args.trials))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    logs = [_log(plan, run, fits, k) for k in range(args.trials)]
    starts = [_start(plan, fits, k, "output_error") for k in range(args.trials)]
    estimator = setting_estimator(plan, "output_error")

    def one(k):
        try:
            return estimator([logs[k]], plan.model, start=starts[k])
        except (ValueError, np.linalg.LinAlgError, FloatingPointError) as err:
            return err

    paths = {
        "trial_by_trial": lambda: thread_map(one, range(args.trials)),
        "lockstep": lambda: estimator.fit_logs_batch([[d] for d in logs], plan.model, starts),
    }
    first, warm, cpu, results, peak = {}, {p: [] for p in paths}, {p: [] for p in paths}, {}, {}
    for name, call in paths.items():
        t0 = time.perf_counter()
        results[name] = call()
        first[name] = time.perf_counter() - t0
        peak[name] = _peak_gb()
    for _ in range(args.repeats):
        for name, call in paths.items():
            t0, c0 = time.perf_counter(), time.process_time()
            call()
            warm[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    ratios = [a / b for a, b in zip(warm["trial_by_trial"], warm["lockstep"], strict=True)]
    accuracy = []
    for k, (a, b) in enumerate(zip(results["trial_by_trial"], results["lockstep"], strict=True)):
        row = {"trial": k, "trial_by_trial": getattr(a, "status", repr(a)), "lockstep": getattr(b, "status", repr(b))}
        if hasattr(a, "value") and hasattr(b, "value"):
            row["relative_difference"] = float(np.max(np.abs(a.value - b.value)) / np.max(np.abs(a.value)))
            row["passes"] = [int(a.iterations), int(b.iterations)]
        accuracy.append(row)
    summary = {
        "config": os.path.relpath(args.config, ROOT),
        "setting": args.setting,
        "trials": args.trials,
        "repeats": args.repeats,
        "options": {k: str(v) for k, v in estimator._applicable("log").items()},
        "first_call_seconds": first,
        "warm_seconds_median": {p: float(np.median(v)) for p, v in warm.items()},
        "warm_cpu_seconds_median": {p: float(np.median(v)) for p, v in cpu.items()},
        "seconds_per_trial_warm": {p: float(np.median(v)) / args.trials for p, v in warm.items()},
        "speedup_lockstep_vs_trial_by_trial": float(np.median(ratios)),
        "peak_rss_gb_after_first_call": peak,
        "accuracy": accuracy,
        "largest_relative_difference": max((r.get("relative_difference", 0.0) for r in accuracy), default=0.0),
        "same_status": all(r["trial_by_trial"] == r["lockstep"] for r in accuracy),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": os.getloadavg()},
        "jax": jax.__version__,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "accuracy"}, indent=1))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
