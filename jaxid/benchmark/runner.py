"""The benchmark runner: settings → chunks of trials → rows on disk, resumable.

The run directory is the study runner's (``jaxid.study.files``): ``config.json``, ``manifest.json``
(``complete`` once every chunk is on disk; per setting the wall and CPU seconds spent in the plan,
which holds most compiles, simulating, and per estimator), ``chunks/<setting>/extras.json`` (the Cramér–Rao bound,
the held-out truth, the trajectory's limit ratios and condition number) and
``chunks/<setting>/<index>.parquet`` (each finished chunk, written atomically). A killed run given
the same command again skips the chunks on disk; a finished run, or a run of another
configuration, is refused without ``overwrite``.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from .._platform import release_if_crowded
from ..config.benchmark import Benchmark
from ..study.files import config_digest, new_manifest, prepare_run_dir, write_parquet, write_text
from ..types import require_float64
from .chunk import run_chunk
from .trial import make_plan, simulate_trials

__all__ = ["run_benchmark"]


def run_benchmark(exp: Benchmark, out: str | Path, *, overwrite: bool = False, progress: bool = True) -> Path:
    """Run (or resume) a benchmark's trials into ``out``; return the run directory.

    ``exp`` is checked when loaded (``jaxid.benchmark.load_benchmark``: keys, values, the URDF), so
    nothing here writes before a bad config is refused. Raises ``RunExists`` if ``out`` holds a
    finished run, or a run of another config, unless ``overwrite``; ``ValueError`` unless JAX runs in
    float64. ``jaxid.run_experiment`` runs this and then writes the tables and figures.
    """
    require_float64("run_benchmark")
    if not isinstance(exp, Benchmark):
        raise ValueError(f"run_benchmark takes a Benchmark (jaxid.benchmark.load_benchmark), got {type(exp).__name__}.")
    out = Path(out)
    digest = config_digest(exp)
    manifest_path = out / "manifest.json"
    prepare_run_dir(out, digest, overwrite)
    created = not out.exists()
    try:
        return _run(exp, out, digest, manifest_path, progress)
    except ValueError:
        if created and out.exists() and not any((out / "chunks").rglob("*.parquet")):
            shutil.rmtree(out)
        raise


def _run(exp: Benchmark, out: Path, digest: str, manifest_path: Path, progress: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    write_text(json.dumps(exp.resolved(), indent=2, default=str), out / "config.json")
    manifest = new_manifest(exp, digest, manifest_path)
    write_text(json.dumps(manifest, indent=2), manifest_path)
    counts = {s.name: math.ceil(s.trials / exp.chunk) for s in exp.settings}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(counts.values()), desc=exp.name, unit="chunk", file=sys.stderr)
    t_start = time.perf_counter()
    for s in exp.settings:
        chunk_dir = out / "chunks" / s.name
        info = manifest["settings"].setdefault(
            s.name, {"digest": s.digest(), "plan_seconds": 0.0, "simulate_seconds": 0.0, "estimator_seconds": {}}
        )
        pending = [i for i in range(counts[s.name]) if not (chunk_dir / f"{i:05d}.parquet").exists()]
        if bar:
            bar.update(counts[s.name] - len(pending))
        if not pending and (chunk_dir / "extras.json").exists():
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        plan = make_plan(exp, s)
        info["plan_seconds"] += time.perf_counter() - t0
        info["plan_cpu_seconds"] = info.get("plan_cpu_seconds", 0.0) + time.process_time() - c0
        info.update(trials=s.trials, chunks=counts[s.name], parameters=len(plan.names))
        extras = {
            "crlb": dict(zip(plan.names, np.sqrt(np.diag(plan.crlb)).tolist(), strict=True)),
            "heldout_truth_rmse": plan.heldout_truth,
            **plan.info,
        }
        # The bound is that of the arm's own (nonlinear) model: both columns of the summary hold it.
        extras["crlb_nonlinear"] = extras["crlb"]
        write_text(json.dumps(extras, indent=2), chunk_dir / "extras.json")
        for index in pending:
            release_if_crowded()  # a long benchmark's compiled programs within the memory-map limit
            start = index * exp.chunk
            trials = np.arange(start, min(start + exp.chunk, s.trials))
            t0, c0 = time.perf_counter(), time.process_time()
            run = simulate_trials(plan, trials)
            info["simulate_seconds"] += time.perf_counter() - t0
            info["simulate_cpu_seconds"] = info.get("simulate_cpu_seconds", 0.0) + time.process_time() - c0
            df = pd.DataFrame(run_chunk(plan, run, trials))
            for name, g in df.groupby("estimator"):
                for column, key in (("seconds", "estimator_seconds"), ("cpu_seconds", "estimator_cpu_seconds")):
                    totals = info.setdefault(key, {})
                    totals[name] = totals.get(name, 0.0) + float(g.groupby("trial")[column].first().sum())
            write_parquet(df, chunk_dir / f"{index:05d}.parquet")
            write_text(json.dumps(manifest, indent=2), manifest_path)
            if bar:
                bar.update(1)
    if bar:
        bar.close()
    manifest["complete"] = True
    manifest["wall_seconds"] = time.perf_counter() - t_start
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_text(json.dumps(manifest, indent=2), manifest_path)
    return out
