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
4. ``nbench``: the N-joint benchmark, ``experiments/benchmark_panda.toml``'s ``consistency_rich``
   setting (seven joints, 69 base parameters): ``make_plan`` (the closed loop compiled at the
   chunk's width), then chunk by chunk (1000 trials, up to 10^4): ``simulate_trials`` and the
   benchmark's estimators on the chunk as the runner runs them (``jaxid.benchmark.chunk.run_chunk``:
   IDIM-LS, RLS and consistent LS batched, IDIM-IV batched on the first 20 trials) while the
   stage's time lasts: trials done, seconds, trials per second, statuses, RMSE against the
   Cramér–Rao bound, coverage. Figures are saved after every call, so a
   stage cut short by its limit reports what it finished.

    python scripts/gpu_check.py --out gpu_check.json [--cpu] [--budget 540]

``--cpu`` forces the CPU platform with small sizes (what the test runs; the N-joint stage: 4
trials of a 4-s, 3-harmonic reference on the shipped two-link URDF, IDIM-LS and RLS, chunks of 2;
``--nbench-arm panda`` keeps the Panda, about a minute of CPU more).
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
        nbench_arm="panda",
        nbench_trials=10_000,
        nbench_chunk=1_000,
        nbench_overrides={},
        nbench_estimators=("idim_ls", "rls", "idim_ls_consistent", "idim_iv"),
        nbench_iv_trials=20,
        caps=dict(device=70, simulate=130, study=130, nbench=190),
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
        nbench_arm="two_link",
        nbench_trials=4,
        nbench_chunk=2,
        nbench_overrides=dict(period=4.0, harmonics=3),  # test_benchmark's shapes: shared compiles
        nbench_estimators=("idim_ls", "rls"),
        nbench_iv_trials=0,
        caps=dict(device=60, simulate=50, study=60, nbench=60),
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
    from jaxid.estimate import equation_error, ml

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


# -- stage 4: the N-joint benchmark (Panda) ----------------------------------------------------

NBENCH_CONFIG = REPO / "experiments" / "benchmark_panda.toml"
NBENCH_SETTING = "consistency_rich"
#: ``--nbench-arm two_link`` (the ``--cpu`` default, a test-sized compile): the same setting on the
#: shipped planar two-link URDF, the Panda's per-joint friction replaced by two-joint values.
TWO_LINK = dict(urdf=str(REPO / "data" / "robots" / "two_link.urdf"))
TWO_LINK_DEFAULTS = dict(true_viscous=[0.5, 0.5], true_coulomb=[1.0, 1.0], torque_std=0.02)


def nbench_experiment(size: dict, arm: str = "panda"):
    """``benchmark_panda.toml``'s ``consistency_rich`` setting at this mode's trials, chunk and
    estimators (on the two-link arm with ``arm="two_link"``)."""
    import copy

    from jaxid.benchmark import parse_benchmark
    from jaxid.config.common import read_toml

    raw = copy.deepcopy(read_toml(NBENCH_CONFIG))
    if arm == "two_link":
        raw["arm"] = dict(TWO_LINK)
        raw["defaults"].update(TWO_LINK_DEFAULTS)
    raw["experiment"].update(name="gpu_check_nbench", trials=size["nbench_trials"], chunk=size["nbench_chunk"])
    raw["experiment"].pop("full_trials", None)
    raw["settings"] = {NBENCH_SETTING: raw["settings"][NBENCH_SETTING]}
    for table in (raw["defaults"], raw["settings"][NBENCH_SETTING]):  # --full's keys: not this run's
        table.pop("full_estimator_trials", None)
        table.pop("full", None)
    raw["defaults"].update(size["nbench_overrides"])
    limits = {"idim_iv": size["nbench_iv_trials"]} if "idim_iv" in size["nbench_estimators"] else {}
    raw["defaults"].update(estimators=list(size["nbench_estimators"]), estimator_trials=limits)
    return parse_benchmark(raw, source=str(NBENCH_CONFIG))


def nbench_estimator_summary(rows: list[dict], plan) -> dict:
    """Per estimator: trials, statuses, seconds (the first trial holds the compiles), and on the trials
    with status ok the RMSE of every base parameter against the Cramér–Rao bound (median and max of
    the ratio over parameters), the 95 % interval coverage and the held-out torque RMSE."""
    import numpy as np
    import pandas as pd

    if not rows:
        return {}
    df = pd.DataFrame(rows)
    bound = np.sqrt(np.diag(plan.crlb))
    out = {}
    for name, g in df.groupby("estimator", sort=False):
        per_trial = g.groupby("trial", sort=True).first()
        seconds = per_trial["seconds"].to_numpy()
        e: dict = {
            "trials": int(len(per_trial)),
            "statuses": {str(k): int(v) for k, v in per_trial["status"].value_counts().items()},
            "seconds": float(seconds.sum()),
            "cpu_seconds": float(per_trial["cpu_seconds"].sum()),
            "first_trial_s": float(seconds[0]),
        }
        if len(seconds) > 1:
            e["trials_per_s_after_first"] = float((len(seconds) - 1) / max(seconds[1:].sum(), 1e-9))
        ok = g[g["status"] == "ok"]
        if len(ok):
            err = (ok["estimate"] - ok["truth"]).to_numpy().reshape(-1, len(plan.names))
            std = ok["std"].to_numpy().reshape(-1, len(plan.names))
            rmse = np.sqrt(np.mean(err**2, axis=0))
            e["ok_trials"] = int(err.shape[0])
            e["rmse"] = dict(zip(plan.names, rmse.tolist(), strict=True))
            if np.all(np.isfinite(bound)) and np.all(bound > 0):
                ratio = rmse / bound
                e["rmse_over_bound_median"] = float(np.median(ratio))
                e["rmse_over_bound_max"] = float(np.max(ratio))
            e["coverage_95"] = float(np.mean(np.abs(err) <= 1.96 * std))
            e["heldout_rmse_median"] = float(ok.groupby("trial")["heldout_rmse"].first().median())
        out[name] = e
    return out


def stage_nbench(size: dict, budget: float, save, arm: str = "panda") -> dict:
    """make_plan, then chunk by chunk: ``simulate_trials`` (``chunk`` trials per call, up to
    ``nbench_trials``; the plan compiles the loop at that width) and the benchmark's estimators on the
    chunk (``run_chunk``, the runner's path) while the time lasts; each call timed."""
    jax = _enable_x64()
    import numpy as np

    from jaxid.benchmark import trial as bench
    from jaxid.types import Status

    t_stage = time.perf_counter()
    deadline = t_stage + budget - max(5.0, 0.05 * budget)  # time to write the figures
    exp = nbench_experiment(size, arm)
    s = exp.settings[0]
    out: dict = {
        "config": str(NBENCH_CONFIG.relative_to(REPO)),
        "arm": arm,
        "setting": s.name,
        "trials_requested": s.trials,
        "period_s": s["period"],
        "sample_step_s": s["sample_step"],
        "harmonics": s["harmonics"],
        "estimator_names": list(s["estimators"]),
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "device_kind": jax.devices()[0].device_kind,
        "devices": len(jax.devices()),
    }
    save(out)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = bench.make_plan(exp, s)
    # The plan holds the closed loop's compile (at the chunk's width) and two noise-free chunk runs.
    out.update(plan_s=time.perf_counter() - t0, plan_cpu_s=time.process_time() - c0, chunk=plan.width)
    out.update(parameters=len(plan.names), condition=plan.info.get("condition"))
    out["trajectory_diverged"] = plan.info.get("trajectory_diverged")
    save(out)

    # Chunk by chunk: the closed loop (one compiled program, already compiled by the plan), then the
    # benchmark's estimators on that chunk as the runner runs them (``jaxid.benchmark.chunk.run_chunk``:
    # the least-squares family batched, IDIM-IV batched on the first ``nbench_iv_trials``), while
    # the time lasts; later chunks are then only simulated (timed).
    from jaxid.benchmark.chunk import run_chunk

    sim = {"calls": [], "trials": 0, "seconds": 0.0, "cpu_seconds": 0.0, "statuses": {}}
    est = {"chunks": [], "trials_done": 0, "wall_s": 0.0, "cpu_s": 0.0}
    out["simulate"], out["estimators"] = sim, est
    rows: list[dict] = []
    for start in range(0, s.trials, plan.width):
        if sim["calls"] and time.perf_counter() + sim["calls"][-1]["seconds"] > deadline:
            break
        trials = np.arange(start, min(start + plan.width, s.trials))
        t0, c0 = time.perf_counter(), time.process_time()
        run = bench.simulate_trials(plan, trials)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        sim["calls"].append({"trials": len(trials), "seconds": seconds, "cpu_seconds": cpu})
        sim["trials"] += len(trials)
        sim["seconds"] += seconds
        sim["cpu_seconds"] += cpu
        for code, count in zip(*np.unique(run["status"], return_counts=True), strict=True):
            label = Status.label(code)
            sim["statuses"][label] = sim["statuses"].get(label, 0) + int(count)
        sim["trials_per_s"] = sim["trials"] / sim["seconds"]
        save(out)
        last = est["chunks"][-1]["seconds"] if est["chunks"] else 0.0
        if not est["chunks"] or time.perf_counter() + last <= deadline:
            t0, c0 = time.perf_counter(), time.process_time()
            rows.extend(run_chunk(plan, run, trials))
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            est["chunks"].append({"trials": len(trials), "seconds": seconds, "cpu_seconds": cpu})
            est["trials_done"] += len(trials)
            est["wall_s"] += seconds
            est["cpu_s"] += cpu
            if len(est["chunks"]) > 1:  # the first chunk holds the estimators' compiles
                later = est["chunks"][1:]
                est["trials_per_s_after_first"] = sum(c["trials"] for c in later) / sum(c["seconds"] for c in later)
            est["per_estimator"] = nbench_estimator_summary(rows, plan)
        del run
        save(out)
    out["heldout_truth_rmse"] = plan.heldout_truth
    out["wall_s"] = time.perf_counter() - t_stage
    out["load_average"] = os.getloadavg()
    return out


# -- orchestration -----------------------------------------------------------------------------


def _run_stage(name: str, args, limit: float, work: Path) -> dict:
    part = work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--part", str(part), "--work", str(work)]
    cmd += ["--budget", str(limit)] + (["--cpu"] if args.cpu else [])
    cmd += ["--nbench-arm", args.nbench_arm] if args.nbench_arm else []
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
    nb = report.get("nbench", {})
    for k in ("plan_s", "chunk"):
        if k in nb:
            h[f"nbench_{k}"] = nb[k]
    for k in ("trials", "trials_per_s", "statuses"):
        if k in nb.get("simulate", {}):
            h[f"nbench_simulate_{k}"] = nb["simulate"][k]
    for k in ("trials_done", "trials_per_s_after_first"):
        if k in nb.get("estimators", {}):
            h[f"nbench_estimators_{k}"] = nb["estimators"][k]
    for name, e in nb.get("estimators", {}).get("per_estimator", {}).items():
        for k in ("statuses", "rmse_over_bound_median"):
            if k in e:
                h[f"nbench_{name}_{k}"] = e[k]
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
    order = ["device", "simulate", "study", "nbench"]
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
        elif args.stage == "nbench":
            save = lambda partial: part.write_text(json.dumps(partial, default=str))  # noqa: E731
            result = stage_nbench(size, args.budget, save, args.nbench_arm or size["nbench_arm"])
        else:
            result = stage_study(size, Path(args.work) / "study_run")
    except Exception as err:
        result = json.loads(part.read_text()) if part.exists() else {}
        result["error"] = f"{type(err).__name__}: {err}"
        result["traceback"] = traceback.format_exc()[-4000:]
        print(result["traceback"], file=sys.stderr, flush=True)
    part.write_text(json.dumps(result, indent=1, default=str))
    return 1 if "error" in result else 0


SIZES["gpu"]["default_budget"] = 540.0
SIZES["cpu"]["default_budget"] = 240.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="the JSON to write (default: $OUT/gpu_check.json or ./gpu_check.json)")
    ap.add_argument("--cpu", action="store_true", help="force the CPU platform, small sizes")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all stages (default 540; --cpu 240)")
    ap.add_argument(
        "--nbench-arm",
        choices=["panda", "two_link"],
        default=None,
        help="arm of the N-joint stage (default: panda; --cpu: two_link, test-sized)",
    )
    ap.add_argument("--stage", choices=["device", "simulate", "study", "nbench"], default=None, help=argparse.SUPPRESS)
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
