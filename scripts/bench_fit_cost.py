"""Cost of ``jaxid fit`` on a campaign of a real six-joint arm's size: peak resident memory and wall time.

The data: ``jaxid.fit.simulated.simulated_logs`` of the UR5 (``data/robots/ur5_robot.urdf``), ten
closed-loop runs of 50 s logged at 100 Hz (jittered stamps, the function's default noise, friction,
armature and offsets; the nominal URDF off by its default 20 %), written once into ``--data`` (default:
a temporary folder; a folder that already holds them, with the same settings, is reused).

The fit: the real CLI (``python -m jaxid fit CONFIG --out DIR --overwrite``, figures on, as a user runs
it) in a subprocess, on eight runs (two held out), estimators ``idim_ls``, ``idim_ls_consistent``,
``idim_iv`` and ``output_error`` at their defaults; ``[filter] cutoff_hz = 5.0`` (stated, not searched).
Measured: the subprocess's wall time, CPU seconds (user + system) and peak resident set size (``ru_maxrss`` of the waited-for
child, ``resource.getrusage(RUSAGE_CHILDREN)``: the largest RSS of any child, i.e. of the fit), and
from the fit's ``manifest.json`` each estimator's seconds, status and iterations and the stages' seconds. The fit runs
with an empty compilation cache (a user's first fit); ``--warm`` times it once more with its programs cached. The requirement it
checks: within 4 GB peak RSS and 3 minutes on 2 cores.

Writes ``results/bench_fit_cost/result.json``, ``config.toml`` (the fit config used) and ``README.md``
(``--out``); the fit's own output goes to a temporary folder unless ``--fit-out`` is given.

    python scripts/bench_fit_cost.py                          # data in a temp dir
    python scripts/bench_fit_cost.py --data /tmp/ur5_campaign  # cached between runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
URDF = ROOT / "data" / "robots" / "ur5_robot.urdf"
RUNS, DURATION, LOG_RATE, SEED = 10, 50.0, 100.0, 0
ESTIMATORS = ["idim_ls", "idim_ls_consistent", "idim_iv", "output_error"]
LIMITS = {"peak_rss_gb": 4.0, "wall_s": 180.0}

CONFIG = """# jaxid fit on ten simulated 50-s closed-loop runs of a UR5 at 100 Hz (scripts/bench_fit_cost.py).
[fit]
name = "bench_fit_cost"
data = "{data}"
reference = "{data}/true.urdf"  # the simulation's truth, through the same metrics

[arm]
urdf = "{data}/nominal.urdf"  # the user's CAD model: link masses and inertias off by up to 20 %
armature = 0.0               # unknown: fitted among the base parameters
offset = 0.0

[log]
angles = "pos_meas"
torques = "tau_meas"
sample_step = {step}

[split]
rule = "eight runs to fit, the last two held out"
train = {train}
test = {test}

[filter]
cutoff_hz = 5.0              # stated: about 10x the reference's highest harmonic (5 x 0.1 Hz) and below the noise

[estimators]
use = {estimators}

[validation]
horizons_s = [0.5, 1.0]
headline = "idim_ls"

[frequency]
harmonics = 5
"""


def generate(data: Path) -> dict:
    """The ten runs in ``data`` (reused when ``simulated.json`` there records the same settings)."""
    settings = {"urdf": URDF.name, "runs": RUNS, "duration_s": DURATION, "log_rate_hz": LOG_RATE, "seed": SEED}
    marker = data / "simulated.json"
    if marker.exists() and json.loads(marker.read_text()).get("settings") == settings:
        return json.loads(marker.read_text())
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxid.fit.simulated import simulated_logs

    t0 = time.time()
    info = simulated_logs(URDF, data, durations=[DURATION] * RUNS, log_rate=LOG_RATE, seed=SEED)
    record = {"settings": settings, "runs": info["runs"], "seconds": round(time.time() - t0, 1)}
    marker.write_text(json.dumps(record, indent=2))
    return record


def _warm_line(result: dict) -> str:
    warm = result.get("warm")
    if not warm:
        return "not run again with its compiled programs cached (`--warm`)"
    return (
        f"run again with its compiled programs cached (`--warm`): wall {warm['wall_s']} s, fit {warm['fit_seconds']} s, "
        f"stages {warm['stage_seconds']}"
    )


def write_readme(out: Path, result: dict) -> None:
    """``README.md`` in ``out`` from a ``result.json`` record."""
    per = result["estimators"]
    rows = "\n".join(f"| {name} | {v['seconds']} | {v['status']} | {v['iterations']} |" for name, v in per.items())
    failed = "".join(f"\n- **{k} failed**: {v}" for k, v in result["failed_estimators"].items())
    limits, machine = result["limits"], result["machine"]
    rest = None if result["fit_seconds"] is None else round(result["fit_seconds"] - result["estimator_seconds"], 1)
    (out / "README.md").write_text(
        f"""# bench_fit_cost

Written by `python scripts/bench_fit_cost.py`: `jaxid fit` (the CLI in a subprocess, figures on) on ten
simulated closed-loop runs of a UR5 (`jaxid.fit.simulated.simulated_logs`, 50 s each at 100 Hz,
default noise; eight fitted, two held out), estimators {", ".join(per) or "(none ran)"},
`[filter] cutoff_hz = 5.0` (`config.toml`). Requirement: within {limits["peak_rss_gb"]:g} GB peak resident
memory and {limits["wall_s"]:g} s on 2 cores.

- exit code {result["returncode"]}; peak RSS **{result["peak_rss_gb"]:.2f} GB** (`ru_maxrss` of the child):
  within the memory limit **{result["within_memory_limit"]}**; wall time **{result["wall_s"]:.1f} s**: within the
  time limit **{result["within_time_limit"]}**; the fit's CPU time {result.get("cpu_s")} s (user + system, all
  threads: on a machine shared with other jobs the wall time is not the fit's alone)
- of the fit's {result["fit_seconds"]} s (manifest), the estimators took {result["estimator_seconds"]} s and the
  rest of the fit (cut-off tables, jackknife, validation simulations, tables, figures) {rest} s
- stages (the manifest's `stage_seconds`, with an empty compilation cache): {result.get("stage_seconds")}
- {_warm_line(result)}
- machine: {machine["cpus"]} CPUs shared with other jobs, load average {machine.get("load_average_before")}
  before and {machine["load_average_after"]} after the run (1, 5, 15 min)

| estimator | seconds | status | iterations |
|---|---|---|---|
{rows}
{failed}

`result.json` holds the same numbers, each estimator's notes, versions and the git revision.
"""
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="folder for the simulated logs (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_fit_cost", help="results folder")
    parser.add_argument("--fit-out", type=Path, default=None, help="the fit's output folder (default: a temp dir)")
    parser.add_argument("--estimators", nargs="+", default=ESTIMATORS)
    parser.add_argument("--report-only", action="store_true", help="rewrite README.md from --out's result.json")
    parser.add_argument(
        "--warm", action="store_true", help="also time the same fit again, its compiled programs cached"
    )
    args = parser.parse_args(argv)
    if args.report_only:
        write_readme(args.out, json.loads((args.out / "result.json").read_text()))
        return 0

    data = args.data or Path(tempfile.mkdtemp(prefix="bench_fit_cost_data_"))
    data.mkdir(parents=True, exist_ok=True)
    simulated = generate(data)
    runs = simulated["runs"]
    config = CONFIG.format(
        data=data.resolve(),
        step=1.0 / LOG_RATE,
        train=json.dumps(runs[:-2]),
        test=json.dumps(runs[-2:]),
        estimators=json.dumps(args.estimators),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    config_path = args.out / "config.toml"
    config_path.write_text(config)
    fit_out = args.fit_out or Path(tempfile.mkdtemp(prefix="bench_fit_cost_fit_"))

    command = [sys.executable, "-m", "jaxid", "fit", str(config_path), "--out", str(fit_out), "--overwrite"]
    # An empty compilation cache, as a user's first fit has (the CLI otherwise keeps one in ~/.cache/jaxid).
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": tempfile.mkdtemp(prefix="bench_fit_cost_cache_")}
    load_before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kb = usage.ru_maxrss  # Linux: kB
    cpu_s = usage.ru_utime + usage.ru_stime  # the fit's own CPU seconds (all its threads), beside the wall time
    manifest_path = fit_out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if proc.returncode == 0 and manifest_path.exists() else {}
    per = {
        name: {k: entry.get(k) for k in ("seconds", "status", "iterations", "rank", "condition", "notes")}
        for name, entry in manifest.get("estimators", {}).items()
    }
    peak_gb = peak_kb / 1024**2
    result = {
        "command": " ".join(command[1:]),
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu_s, 1),
        "peak_rss_gb": round(peak_gb, 3),
        "limits": LIMITS,
        "within_memory_limit": proc.returncode == 0 and peak_gb <= LIMITS["peak_rss_gb"],
        "within_time_limit": proc.returncode == 0 and wall <= LIMITS["wall_s"],
        "estimator_seconds": round(sum(v.get("seconds") or 0.0 for v in per.values()), 1),
        "estimators": per,
        "failed_estimators": manifest.get("failed_estimators", {}),
        "fit_seconds": manifest.get("seconds"),
        "stage_seconds": manifest.get("stage_seconds"),
        "cutoff_hz": manifest.get("cutoff_hz"),
        "data": {**simulated["settings"], "train": runs[:-2], "test": runs[-2:]},
        "stderr_tail": proc.stderr[-3000:] if proc.returncode else "",
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "git_revision": manifest.get("git_revision"),
        "versions": manifest.get("versions"),
    }
    if args.warm and proc.returncode == 0:  # the same fit again, its programs now in the cache
        t0 = time.time()
        again = subprocess.run(command, capture_output=True, text=True, env=env)
        warm = json.loads(manifest_path.read_text()) if again.returncode == 0 else {}
        result["warm"] = {
            "returncode": again.returncode,
            "wall_s": round(time.time() - t0, 1),
            "fit_seconds": warm.get("seconds"),
            "stage_seconds": warm.get("stage_seconds"),
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
    (args.out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    write_readme(args.out, result)
    keys = ("returncode", "wall_s", "peak_rss_gb", "within_memory_limit", "within_time_limit", "estimator_seconds")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    print(json.dumps(per, indent=1))
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
