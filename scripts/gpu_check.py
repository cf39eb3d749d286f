"""Driver of ``scripts/gpu_check.sh``: device check, simulation throughput and a study, one JSON out.

Stages, each in its own process with its own time limit (a stage that fails or runs out of time
is recorded and the next one still runs; the JSON is rewritten after every stage):

1. ``device``: versions and devices; a few 400-s trajectories simulated on the default device
   (the GPU) against the same computation on the CPU (``jax.devices("cpu")``, float64, same
   process) and against adaptive Tsit5 (rtol 1e-10) on the CPU; ``equation_error`` and ``ml``
   on a few noisy records on both devices.
2. ``simulate``: ``scripts/bench_simulate.py`` from 10^4 to 10^6 trajectories (calls of at most
   ``max_call`` trajectories), skipping sizes predicted not to fit the stage's time.
3. ``study``: a Gaussian-noise study (``equation_error`` + ``ml``) through ``run_experiment``;
   a run cut short by the time limit reports the chunks it finished.

    python scripts/gpu_check.py --out gpu_check.json [--cpu] [--budget 360]

``--cpu`` forces the CPU platform with small sizes (what the test runs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Sizes: GPU (the real check) and CPU (the test: well under a minute on two busy cores).
SIZES = {
    "gpu": dict(
        ref_trials=4,
        step=0.01,
        discard=3,
        est_trials=64,
        batches="10000,100000,1000000",
        max_call=50_000,
        study_trials=100_000,
        study_levels=(0.003, 0.03),
        study_chunk=25_000,
        caps=dict(device=70, simulate=140, study=140),
    ),
    "cpu": dict(
        ref_trials=2,
        step=0.05,
        discard=1,
        est_trials=4,
        batches="8,16",
        max_call=8,
        study_trials=200,
        study_levels=(0.01,),
        study_chunk=100,
        study_simulator="linear",
        caps=dict(device=60, simulate=60, study=60),
    ),
}


def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for name in (
        "jax",
        "jaxlib",
        "jax-cuda12-plugin",
        "jax-cuda13-plugin",
        "numpy",
        "scipy",
        "equinox",
        "diffrax",
        "optimistix",
        "lineax",
        "jaxtyping",
        "pandas",
        "pyarrow",
        "numba",
    ):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


# -- stage 1: device against CPU --------------------------------------------------------------


def stage_device(size: dict, save) -> dict:
    jax = _enable_x64()
    import jax.numpy as jnp
    import numpy as np

    import jaxid

    out: dict = {"versions": _versions(), "backend": jax.default_backend()}
    out["devices"] = [str(d) for d in jax.devices()]
    out["device_kind"] = jax.devices()[0].device_kind
    cpu = jax.devices("cpu")[0]
    try:
        stats = jax.devices()[0].memory_stats() or {}
        out["memory_bytes_limit"] = stats.get("bytes_limit")
    except Exception:
        pass

    ex = jaxid.table2("same", scale=1.0)
    rng = np.random.default_rng(0)
    masses = np.array([5.0, 1.5]) * rng.uniform(0.9, 1.1, (size["ref_trials"], 2))
    sim = dict(discard_periods=size["discard"], measured_periods=1, sample_step=size["step"])

    def simulate(**kw):
        arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.asarray(masses))
        rec = jaxid.simulate_batch(arms, ex, **sim, **kw)
        return jax.block_until_ready(rec)

    on_cpu = jax.devices()[0].platform == "cpu"  # --cpu: the device is the reference's own
    t0 = time.perf_counter()
    dev = simulate()
    out["device_simulate_s"] = time.perf_counter() - t0
    save(out)
    with jax.default_device(cpu):
        t0 = time.perf_counter()
        host = dev if on_cpu else simulate()
        out["cpu_simulate_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = simulate(solver="adaptive", rtol=1e-10, atol=1e-12)
        out["cpu_reference_s"] = time.perf_counter() - t0
    qd, qh, qr = (np.asarray(r.q) for r in (dev, host, ref))
    out["trajectories"] = int(qd.shape[0])
    out["record_device"] = str(list(dev.q.devices())[0])
    out["max_diff_device_vs_cpu_rad"] = float(np.max(np.abs(qd - qh)))
    out["max_error_device_vs_tsit5_rad"] = float(np.max(np.abs(qd - qr)))
    out["max_error_cpu_vs_tsit5_rad"] = float(np.max(np.abs(qh - qr)))
    out["status_device"] = np.asarray(dev.status).tolist()
    save(out)

    # Estimators on a few noisy records: device against CPU (nothing to compare under --cpu).
    if on_cpu:
        out["ok"] = bool(out["max_error_device_vs_tsit5_rad"] < 1e-4)
        return out
    from jaxid.estimators import equation_error, ml

    arm = jaxid.point_mass()
    exs = jaxid.table2("split", scale=0.25)
    unknowns = ("m1", "m2", "fv1", "fv2")

    def estimates():
        rec = jaxid.simulate(arm, exs, **sim)
        keys = jax.random.split(jax.random.key(1), size["est_trials"])

        @jax.jit
        def run(keys):
            def one(k):
                r = jaxid.add_noise(rec, key=k, kind="gaussian", level=0.01)
                e = equation_error(r, exs, arm, unknowns=unknowns, noise_std=0.01)
                m = ml(r, exs, arm, unknowns=unknowns, noise_std=0.01)
                return e.value, m.value, m.status

            return jax.vmap(one)(keys)

        return jax.tree.map(np.asarray, jax.block_until_ready(run(keys)))

    t0 = time.perf_counter()
    ed, md_, sd = estimates()
    out["device_estimators_s"] = time.perf_counter() - t0
    with jax.default_device(cpu):
        eh, mh, sh = estimates()
    out["estimator_trials"] = size["est_trials"]
    out["max_rel_diff_equation_error"] = float(np.max(np.abs(ed - eh) / np.abs(eh)))
    out["max_rel_diff_ml"] = float(np.max(np.abs(md_ - mh) / np.abs(mh)))
    out["ml_status_device"] = np.bincount(sd.ravel(), minlength=1).tolist()
    # RK4 at Δ = 0.01 s is within ~2e-8 rad of the reference.
    out["ok"] = bool(
        out["max_error_device_vs_tsit5_rad"] < 1e-6
        and out["max_diff_device_vs_cpu_rad"] < 1e-9
        and out["max_rel_diff_ml"] < 1e-6
    )
    return out


# -- stage 2: bench_simulate -------------------------------------------------------------------


def stage_simulate(size: dict, budget: float, part: Path, platform: str) -> dict:
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_simulate

    threads = os.cpu_count() if platform == "gpu" else 2
    argv = [
        "--batches", size["batches"], "--max-call", str(size["max_call"]), "--repeats", "1",
        "--scipy-runs", "1", "--reference-trials", "0", "--skip-memory-check",
        "--numba-threads", str(threads), "--numba-max", str(10_000 if platform == "gpu" else 32),
        "--sample-step", str(size["step"]), "--discard-periods", str(size["discard"]),
        "--budget", str(max(budget - 10, 10)), "--json", str(part),
    ]  # fmt: skip
    return bench_simulate.main(argv)


# -- stage 3: a study through run_experiment ---------------------------------------------------


def study_config(size: dict, noise_path: str | None = None) -> dict:
    levels = size["study_levels"]
    per = size["study_trials"] // len(levels)
    defaults = {
        "lines": "split",
        "scale": 0.25,
        "noise": "gaussian",
        "estimators": ["equation_error", "ml"],
        "sample_step": size["step"],
    }
    if size["step"] != 0.01:
        defaults["discard_periods"] = 2
    if "study_simulator" in size:
        defaults["simulator"] = size["study_simulator"]
    if noise_path:
        defaults["noise_path"] = noise_path
    return {
        "experiment": {"name": "gpu_check", "seed": 1, "trials": per, "chunk": size["study_chunk"]},
        "defaults": defaults,
        "settings": {f"n{i}": {"noise_level": float(lv)} for i, lv in enumerate(levels)},
    }


def stage_study(size: dict, run_dir: Path) -> dict:
    _enable_x64()
    import jaxid
    from jaxid.config import parse_experiment

    run_experiment = getattr(jaxid, "run_experiment", None)
    if run_experiment is None:  # pragma: no cover - older layouts
        from jaxid.study import run_experiment
    # The time-domain noise path (noise on every sample, a spectrum per trial): the heavier one.
    raw = study_config(size)
    exp = parse_experiment(raw)
    t0 = time.perf_counter()
    run_experiment(exp, run_dir, progress=False, figures=False)
    out = study_summary(run_dir)
    out["wall_s"] = time.perf_counter() - t0
    out["trials_per_s"] = out["trials_done"] / out["wall_s"]
    out["config"] = raw
    return out


def study_summary(run_dir: Path) -> dict:
    """What a (possibly unfinished) run directory shows: chunks done, timings, the summary table."""
    out: dict = {"complete": False, "trials_done": 0}
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.exists():
        return out
    manifest = json.loads(manifest_path.read_text())
    out["complete"] = bool(manifest.get("complete"))
    out["devices"] = manifest.get("devices")
    settings = manifest.get("settings", {})
    done = 0
    for name, info in settings.items():
        chunks = list((run_dir / "chunks" / name).glob("*.parquet"))
        n = len([c for c in chunks if c.stem.isdigit()])
        done += min(n * info.get("trials", 0) // max(info.get("chunks", 1), 1), info.get("trials", 0))
    out["trials_done"] = done
    keys = ("run_seconds", "simulate_seconds")
    out["seconds"] = {k: sum(v.get(k, 0.0) for v in settings.values()) for k in keys}
    for group in ("compile_seconds", "estimator_seconds"):
        agg: dict = {}
        for v in settings.values():
            for k, sec in v.get(group, {}).items():
                agg[k] = agg.get(k, 0.0) + sec
        out["seconds"][group] = agg
    summary = run_dir / "summary.csv"
    if summary.exists():
        import pandas as pd

        df = pd.read_csv(summary)
        cols = [c for c in ("setting", "estimator", "parameter", "rmse", "sqrt_crlb", "failures", "n") if c in df]
        out["summary"] = df[df["parameter"].isin(["m1", "m2"])][cols].to_dict(orient="records")
    return out


# -- orchestration -----------------------------------------------------------------------------


def _run_stage(name: str, args, limit: float, work: Path) -> dict:
    part = work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--part", str(part), "--work", str(work)]
    cmd += ["--budget", str(limit)] + (["--cpu"] if args.cpu else [])
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, start_new_session=True)
    status = "ok"
    try:
        rc = proc.wait(timeout=limit)
        if rc != 0:
            status = f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = f"timed out after {limit:.0f} s"
    seconds = time.perf_counter() - t0
    result = json.loads(part.read_text()) if part.exists() else {}
    if name == "study" and not result.get("complete"):
        result = {**study_summary(work / "study_run"), **result}
    result["stage_status"] = status
    result["stage_seconds"] = seconds
    return result


def _headline(report: dict) -> dict:
    """The figures a README table needs, flat."""
    h: dict = {}
    dev = report.get("device", {})
    for k in ("backend", "device_kind", "max_diff_device_vs_cpu_rad", "max_error_device_vs_tsit5_rad", "ok"):
        if k in dev:
            h[k] = dev[k]
    sim = report.get("simulate", {})
    for row in sim.get("rows", []):
        if "traj_per_s" in row:
            h[f"simulate_{row['batch']}_traj_per_s"] = row["traj_per_s"]
            if row.get("compile_s") is not None:
                h[f"simulate_{row['batch']}_compile_s"] = row["compile_s"]
            for key in ("ratio_vs_numba", "ratio_vs_solve_ivp"):
                if key in row:
                    h[f"simulate_{row['batch']}_{key}"] = row[key]
    for k in ("solve_ivp_traj_per_s",):
        if k in sim:
            h[k] = sim[k]
    study = report.get("study", {})
    for k in ("trials_done", "complete", "wall_s", "trials_per_s"):
        if k in study:
            h[f"study_{k}"] = study[k]
    return h


def orchestrate(args) -> int:
    platform = "cpu" if args.cpu else "gpu"
    size = SIZES[platform]
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    report: dict = {
        "mode": platform,
        "budget_s": args.budget,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "host_cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "sizes": {k: v for k, v in size.items() if k != "caps"},
    }

    def save():
        report["headline"] = _headline(report)
        report["elapsed_s"] = time.perf_counter() - t_start
        tmp = out_path.with_suffix(out_path.suffix + ".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str))
        os.replace(tmp, out_path)

    save()
    order = ["device", "simulate", "study"]
    caps = size["caps"]
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = Path(tmp)
        for i, name in enumerate(order):
            # A stage may use its share of the budget plus what earlier stages left unused, and
            # never so much that a later stage gets less than a little.
            scale = args.budget / size["default_budget"]
            left = args.budget - (time.perf_counter() - t_start)
            later = [caps[n] * scale for n in order[i + 1 :]]
            limit = min(max(caps[name] * scale, left - sum(later)), left - sum(min(x, 20) for x in later))
            if limit < 15:
                report[name] = {"stage_status": f"skipped ({left:.0f} s left)"}
            else:
                print(f"[gpu_check] stage {name}: up to {limit:.0f} s", flush=True)
                report[name] = _run_stage(name, args, limit, work)
                print(f"[gpu_check] stage {name}: {report[name]['stage_status']} "
                      f"in {report[name]['stage_seconds']:.0f} s", flush=True)  # fmt: skip
            save()
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report["load_average_end"] = os.getloadavg()
    save()
    print(json.dumps(report["headline"], indent=1))
    print(f"[gpu_check] wrote {out_path}", flush=True)
    return 0


def run_one_stage(args) -> int:
    platform = "cpu" if args.cpu else "gpu"
    size = SIZES[platform]
    part = Path(args.part)
    try:
        if args.stage == "device":
            result = stage_device(size, lambda partial: part.write_text(json.dumps(partial, default=str)))
        elif args.stage == "simulate":
            result = stage_simulate(size, args.budget, part, platform)
        else:
            result = stage_study(size, Path(args.work) / "study_run")
    except Exception as err:
        result = json.loads(part.read_text()) if part.exists() else {}
        result["error"] = f"{type(err).__name__}: {err}"
        result["traceback"] = traceback.format_exc()[-4000:]
        print(result["traceback"], file=sys.stderr, flush=True)
    part.write_text(json.dumps(result, indent=1, default=str))
    return 1 if "error" in result else 0


SIZES["gpu"]["default_budget"] = 360.0
SIZES["cpu"]["default_budget"] = 150.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="the JSON to write (default: $OUT/gpu_check.json or ./gpu_check.json)")
    ap.add_argument("--cpu", action="store_true", help="force the CPU platform, small sizes")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all stages (default 360; --cpu 150)")
    ap.add_argument("--stage", choices=["device", "simulate", "study"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.budget is None:
        args.budget = SIZES["cpu" if args.cpu else "gpu"]["default_budget"]
    if args.stage:
        return run_one_stage(args)
    if args.out is None:
        args.out = str(Path(os.environ["OUT"]) / "gpu_check.json") if os.environ.get("OUT") else "gpu_check.json"
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
