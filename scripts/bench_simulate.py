"""Throughput of batched 400-s nonlinear simulations of the point-mass arm (issue 2, DESIGN.md §5).

Workload: Table 2 multisine, lines "same", scale 1, discard 3 + measure 1 period (400 s),
sampling step 0.01 s, float64; point-mass arms with masses spread ±10 % so the trials differ.

Reports, per batch size: compile time (separately), run time (best of ``--repeats``),
trajectories/s, the ratio against a Python loop over ``scipy.integrate.solve_ivp`` (RK45,
rtol 1e-6, atol 1e-8, numpy right-hand side, ``t_eval`` on the sampling grid) measured in the
same run, and peak resident memory. The maximum error is against ``solver="adaptive"`` (diffrax
Tsit5, rtol 1e-10, atol 1e-12) on a few trials. The compiled memory footprint is also compared for
3 and 30 discarded periods (it must not grow).

Both CPU cores are used by exposing them as two XLA host devices (set below, before importing
jax); ``simulate_batch`` shards the trial axis over ``jax.devices()``.

    python scripts/bench_simulate.py                 # batches 1 … 4096
    python scripts/bench_simulate.py --quick         # batches 1, 64, 1024, fewer repeats
    python scripts/bench_simulate.py --batches 1024 --solver diffrax-rk4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=None, help="e.g. 1,64,1024")
    p.add_argument("--quick", action="store_true", help="batches 1,64,1024; one repeat; 2 solve_ivp runs")
    p.add_argument("--devices", type=int, default=None, help="XLA host devices (default: CPU count)")
    p.add_argument("--solver", default="rk4", help="rk4 (default), diffrax-rk4, tsit5")
    p.add_argument("--substeps", type=int, default=1)
    p.add_argument("--chunk-size", type=int, default=128, help="trials integrated together per device")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--scipy-runs", type=int, default=None, help="solve_ivp trajectories to time")
    p.add_argument("--reference-trials", type=int, default=4)
    p.add_argument("--skip-memory-check", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    return p.parse_args(argv)


ARGS = parse_args()
DEVICES = ARGS.devices or os.cpu_count() or 1
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}"
).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import jaxid  # noqa: E402
from jaxid import simulation  # noqa: E402

DISCARD, MEASURE, STEP = 3, 1, 0.01


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_arms(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    masses = np.array([5.0, 1.5]) * rng.uniform(0.9, 1.1, (batch, 2))
    return jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.asarray(masses)), masses


def run_batch(arms, ex, **kw):
    rec = jaxid.simulate_batch(arms, ex, discard_periods=DISCARD, measured_periods=MEASURE, sample_step=STEP, **kw)
    rec.q.block_until_ready()
    return rec


# -- the typical user's alternative: a Python loop over solve_ivp --------------------------------


def scipy_trajectory(masses, ex, rtol=1e-6, atol=1e-8):
    m1, m2 = masses
    l1, l2 = 1.0, 0.8
    r1, r2 = l1, l2
    fv1, fv2 = 5.0, 2.0
    g = 9.81
    k = np.asarray(ex.harmonics, dtype=float) * ex.fundamental
    amp, phase = np.asarray(ex.amplitudes) * float(ex.scale), np.asarray(ex.phases)

    def rhs(t, y):
        q1, q2, v1, v2 = y
        u = np.sum(amp * np.cos(k * t + phase), axis=1)
        s1, s2, c2, s12 = np.sin(q1), np.sin(q2), np.cos(q2), np.sin(q1 + q2)
        d11 = m1 * r1**2 + m2 * (l1**2 + r2**2 + 2 * l1 * r2 * c2)
        d12 = m2 * (r2**2 + l1 * r2 * c2)
        d22 = m2 * r2**2
        h = m2 * l1 * r2 * s2
        b1 = u[0] + h * (2 * v1 * v2 + v2**2) - g * ((m1 * r1 + m2 * l1) * s1 + m2 * r2 * s12) - fv1 * v1
        b2 = u[1] - h * v1**2 - g * m2 * r2 * s12 - fv2 * v2
        det = d11 * d22 - d12**2
        return [v1, v2, (d22 * b1 - d12 * b2) / det, (d11 * b2 - d12 * b1) / det]

    n = int(round(ex.period / STEP))
    t_eval = DISCARD * ex.period + np.arange(MEASURE * n) * STEP
    sol = solve_ivp(rhs, (0.0, t_eval[-1]), np.zeros(4), method="RK45", rtol=rtol, atol=atol, t_eval=t_eval)
    return sol.y[:2].T


def main():
    quick = ARGS.quick
    batches = ARGS.batches or ([1, 64, 1024] if quick else [1, 4, 16, 64, 256, 1024, 4096])
    repeats = ARGS.repeats or (1 if quick else 3)
    scipy_runs = ARGS.scipy_runs or (2 if quick else 3)
    ex = jaxid.table2("same", scale=1.0)
    opts = dict(solver=ARGS.solver, substeps=ARGS.substeps)
    chunked = dict(opts, chunk_size=ARGS.chunk_size)
    info = {
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "versions": {"jax": jax.__version__, "numpy": np.__version__, "scipy": scipy.__version__},
        "workload": f"point-mass, Table 2 same x1, discard {DISCARD} + measure {MEASURE} periods (400 s), "
        f"step {STEP} s, solver {ARGS.solver}, substeps {ARGS.substeps}, chunk {ARGS.chunk_size}",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    print(json.dumps(info, indent=1), flush=True)

    # solve_ivp loop, same run.
    _, masses = make_arms(max(scipy_runs, ARGS.reference_trials))
    t0, c0 = time.perf_counter(), time.process_time()
    scipy_q = [scipy_trajectory(masses[i], ex) for i in range(scipy_runs)]
    scipy_rate = scipy_runs / (time.perf_counter() - t0)
    scipy_cpu_rate = scipy_runs / (time.process_time() - c0)
    print(
        f"solve_ivp loop: {scipy_rate:.3f} trajectories/s wall, {scipy_cpu_rate:.3f} per CPU-second ({scipy_runs} runs)",
        flush=True,
    )

    # Tight reference on a few trials.
    n_ref = ARGS.reference_trials
    arms_ref, _ = make_arms(n_ref)
    t0 = time.perf_counter()
    ref = run_batch(arms_ref, ex, solver="adaptive", rtol=1e-10, atol=1e-12)
    ref_seconds = time.perf_counter() - t0
    fast = run_batch(arms_ref, ex, **chunked)
    err = float(jnp.max(jnp.abs(fast.q - ref.q)))
    scipy_err = max(float(np.max(np.abs(scipy_q[i] - np.asarray(ref.q[i])))) for i in range(min(scipy_runs, n_ref)))
    print(
        f"max error vs adaptive Tsit5 (rtol 1e-10, {n_ref} trials, {ref_seconds:.1f} s incl. compile): "
        f"{err:.2e} rad; solve_ivp loop error {scipy_err:.2e} rad; statuses {np.asarray(fast.status).tolist()}",
        flush=True,
    )

    rows = []
    for batch in batches:
        arms, _ = make_arms(batch, seed=batch)
        t0 = time.perf_counter()
        rec = run_batch(arms, ex, **chunked)
        first = time.perf_counter() - t0
        best, best_cpu = np.inf, np.inf
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            rec = run_batch(arms, ex, **chunked)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        ok = int(np.sum(np.asarray(rec.status) == jaxid.SUCCESS))
        row = {
            "batch": batch,
            "compile_s": first - best,
            "run_s": best,
            "traj_per_s": batch / best,
            "ratio_vs_solve_ivp": batch / best / scipy_rate,
            # Contention-robust: trajectories per CPU-second, over solve_ivp's per CPU-second.
            "cpu_s": best_cpu,
            "traj_per_cpu_s": batch / best_cpu,
            "cpu_ratio_vs_solve_ivp": batch / best_cpu / scipy_cpu_rate,
            "peak_rss_mib": peak_rss_mib(),
            "ok": ok,
        }
        rows.append(row)
        print(
            f"batch {batch:5d}: compile {row['compile_s']:6.2f} s  run {best:7.3f} s  "
            f"{row['traj_per_s']:8.1f} traj/s  x{row['ratio_vs_solve_ivp']:7.1f} solve_ivp  "
            f"| per CPU-s {row['traj_per_cpu_s']:7.1f} (x{row['cpu_ratio_vs_solve_ivp']:6.1f}, cpu/wall "
            f"{best_cpu / best:.2f})  peak RSS {row['peak_rss_mib']:6.0f} MiB  ok {ok}/{batch}",
            flush=True,
        )
        del rec

    memory = None
    if not ARGS.skip_memory_check:
        # Compiled footprint for 3 vs 30 discarded periods, batch 1024 (compile only, no run).
        arms, _ = make_arms(1024)
        memory = {}
        for discard in (3, 30):
            run = simulation._batched_runner(
                n_per=10_000,
                discard_periods=discard,
                ndev=len(jax.devices()),
                chunk=ARGS.chunk_size,
                **simulation._resolve_options(dict(opts)),
            )
            scales = jnp.ones(1024)
            y0 = jnp.zeros((1024, 4))
            stats = run.lower(arms, scales, y0, ex, jnp.zeros(2)).compile().memory_analysis()
            memory[discard] = {
                "temp_mib": stats.temp_size_in_bytes / 2**20,
                "output_mib": stats.output_size_in_bytes / 2**20,
            }
        print(f"compiled memory, batch 1024, discard 3 vs 30 periods: {memory}", flush=True)

    result = {
        **info,
        "load_average_end": os.getloadavg(),
        "solve_ivp_traj_per_s": scipy_rate,
        "solve_ivp_traj_per_cpu_s": scipy_cpu_rate,
        "max_error_rad": err,
        "solve_ivp_max_error_rad": scipy_err,
        "rows": rows,
        "memory_vs_discard": memory,
    }
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
