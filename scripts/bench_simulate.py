"""Throughput of batched 400-s nonlinear simulations of the point-mass arm (DESIGN.md §5).

Workload: Table 2 multisine, lines "same", scale 1, discard 3 + measure 1 period (400 s),
sampling step 0.01 s, float64; point-mass arms with masses spread ±10 % so the trials differ.

Reports, per batch size: compile time (separately), run time (best of ``--repeats``),
trajectories/s and two baselines measured in the same run:

- a numba RK4 (``@njit(parallel=True)``, ``prange`` over the trials, ``--numba-threads``
  threads, the same fixed step, the torque tabulated on the half-step grid as jaxid does), timed
  on the same batch (at most ``--numba-max`` trajectories, scaled); needs the ``bench`` extra
  (``pip install -e .[bench]``);
- a Python loop over ``scipy.integrate.solve_ivp`` (RK45, rtol 1e-6, atol 1e-8, numpy
  right-hand side, ``t_eval`` on the sampling grid), the typical user's alternative.

The maximum error is against ``solver="adaptive"`` (diffrax Tsit5, rtol 1e-10, atol 1e-12) on a
few trials, for jaxid and for both baselines. The compiled memory footprint is compared for 3
and 30 discarded periods (it must not grow).

On a CPU both cores are used by exposing them as XLA host devices (set below, before importing
jax); ``simulate_batch`` shards the trial axis over ``jax.devices()``. On a GPU a large batch is
run in calls of at most ``--max-call`` trajectories (the records of 10^6 trials at Δ = 0.01 s
would not fit in memory), each one ``vmap`` (chunk = call), and throughput counts every call. On CPU the chunk is 512
trials per device (``--chunk-size``), compiled with ``jaxid.simulation.batch.CPU_COMPILER_OPTIONS`` (512-bit vectors;
``XLA_FLAGS=--xla_cpu_prefer_vector_width=256`` measures XLA's default).

    python scripts/bench_simulate.py                 # batches 1 … 4096
    python scripts/bench_simulate.py --quick         # batches 1, 64, 1024, fewer repeats
    python scripts/bench_simulate.py --batches 1024 --solver diffrax-rk4
    python scripts/bench_simulate.py --batches 10000,100000,1000000 --max-call 50000 --budget 200  # GPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time

DISCARD, MEASURE = 3, 1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--batches", type=lambda s: [int(float(x)) for x in s.split(",")], default=None, help="e.g. 1,64,1024"
    )
    p.add_argument("--quick", action="store_true", help="batches 1,64,1024; one repeat; 2 solve_ivp runs")
    p.add_argument("--devices", type=int, default=None, help="XLA host devices (default: CPU count)")
    p.add_argument("--solver", default="rk4", help="rk4 (default), diffrax-rk4, tsit5")
    p.add_argument("--substeps", type=int, default=1)
    p.add_argument("--sample-step", type=float, default=0.01, help="sampling step [s] (must divide 100 s)")
    p.add_argument("--discard-periods", type=int, default=DISCARD)
    p.add_argument("--chunk-size", type=int, default=None, help="trials per vmap on a device (CPU 512, GPU: a call)")
    p.add_argument("--max-call", type=int, default=None, help="largest batch in one call (default: no limit)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--scipy-runs", type=int, default=None, help="solve_ivp trajectories to time (0: skip)")
    p.add_argument("--numba-threads", type=int, default=2, help="numba baseline threads (0: skip)")
    p.add_argument("--numba-max", type=int, default=4096, help="largest batch the numba baseline is timed on")
    p.add_argument("--reference-trials", type=int, default=4, help="trials checked against adaptive Tsit5 (0: skip)")
    p.add_argument("--skip-memory-check", action="store_true")
    p.add_argument("--budget", type=float, default=None, help="seconds; skip batches predicted not to fit")
    p.add_argument("--json", default=None, help="write the results here (rewritten after every batch)")
    return p.parse_args(argv)


def _set_host_devices(devices: int | None) -> None:
    if "jax" in sys.modules:
        return  # too late: the caller configured jax already
    n = devices or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_masses(batch: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.array([5.0, 1.5]) * rng.uniform(0.9, 1.1, (batch, 2))


def make_arms(masses):
    import jax
    import jax.numpy as jnp

    import jaxid

    return jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.asarray(masses))


# -- the typical user's alternative: a Python loop over solve_ivp --------------------------------


def _point_mass_constants():
    return dict(l1=1.0, l2=0.8, fv1=5.0, fv2=2.0, g=9.81)


def scipy_trajectory(masses, ex, step, discard, rtol=1e-6, atol=1e-8):
    import numpy as np
    from scipy.integrate import solve_ivp

    m1, m2 = masses
    c = _point_mass_constants()
    l1, l2, fv1, fv2, g = c["l1"], c["l2"], c["fv1"], c["fv2"], c["g"]
    r1, r2 = l1, l2
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

    n = int(round(ex.period / step))
    t_eval = discard * ex.period + np.arange(MEASURE * n) * step
    sol = solve_ivp(rhs, (0.0, t_eval[-1]), np.zeros(4), method="RK45", rtol=rtol, atol=atol, t_eval=t_eval)
    return sol.y[:2].T


# -- the compiled-loop baseline: numba RK4 ------------------------------------------------------


def numba_simulator(threads: int):
    """A ``(masses (B, 2), table (2S+1, 2), h, steps, discard, measure) -> q (B, measure·S, 2)`` RK4, or None."""
    try:
        import numba
    except ImportError:
        return None
    import numpy as np

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    c = _point_mass_constants()
    l1, l2, fv1, fv2, g = c["l1"], c["l2"], c["fv1"], c["fv2"], c["g"]

    @numba.njit(inline="always", fastmath=False)
    def rates(q1, q2, v1, v2, u1, u2, d22, d11_0, b, g1, g2):
        s1, c1 = math.sin(q1), math.cos(q1)
        s2, c2 = math.sin(q2), math.cos(q2)
        s12 = s1 * c2 + c1 * s2
        bc = b * c2
        d11 = d11_0 + 2 * bc
        d12 = d22 + bc
        h = b * s2
        grav2 = g2 * s12
        rhs1 = u1 + h * (2 * v1 + v2) * v2 - g1 * s1 - grav2 - fv1 * v1
        rhs2 = u2 - h * v1 * v1 - grav2 - fv2 * v2
        inv_det = 1.0 / (d11 * d22 - d12 * d12)
        return v1, v2, (d22 * rhs1 - d12 * rhs2) * inv_det, (d11 * rhs2 - d12 * rhs1) * inv_det

    @numba.njit(parallel=True, fastmath=False)
    def run(masses, table, h, steps, discard, measure):
        batch = masses.shape[0]
        out = np.empty((batch, measure * steps, 2))
        for i in numba.prange(batch):
            m1, m2 = masses[i, 0], masses[i, 1]
            r1, r2 = l1, l2
            d22 = m2 * r2 * r2
            d11_0 = m1 * r1 * r1 + m2 * l1 * l1 + d22
            b = m2 * l1 * r2
            g1 = g * (m1 * r1 + m2 * l1)
            g2 = g * m2 * r2
            q1 = q2 = v1 = v2 = 0.0
            for p in range(discard + measure):
                for n in range(steps):
                    if p >= discard:
                        out[i, (p - discard) * steps + n, 0] = q1
                        out[i, (p - discard) * steps + n, 1] = q2
                    ua1, ua2 = table[2 * n, 0], table[2 * n, 1]
                    ub1, ub2 = table[2 * n + 1, 0], table[2 * n + 1, 1]
                    uc1, uc2 = table[2 * n + 2, 0], table[2 * n + 2, 1]
                    k1 = rates(q1, q2, v1, v2, ua1, ua2, d22, d11_0, b, g1, g2)
                    k2 = rates(
                        q1 + 0.5 * h * k1[0],
                        q2 + 0.5 * h * k1[1],
                        v1 + 0.5 * h * k1[2],
                        v2 + 0.5 * h * k1[3],
                        ub1,
                        ub2,
                        d22,
                        d11_0,
                        b,
                        g1,
                        g2,
                    )
                    k3 = rates(
                        q1 + 0.5 * h * k2[0],
                        q2 + 0.5 * h * k2[1],
                        v1 + 0.5 * h * k2[2],
                        v2 + 0.5 * h * k2[3],
                        ub1,
                        ub2,
                        d22,
                        d11_0,
                        b,
                        g1,
                        g2,
                    )
                    k4 = rates(
                        q1 + h * k3[0], q2 + h * k3[1], v1 + h * k3[2], v2 + h * k3[3], uc1, uc2, d22, d11_0, b, g1, g2
                    )
                    q1 += h / 6 * (k1[0] + 2 * (k2[0] + k3[0]) + k4[0])
                    q2 += h / 6 * (k1[1] + 2 * (k2[1] + k3[1]) + k4[1])
                    v1 += h / 6 * (k1[2] + 2 * (k2[2] + k3[2]) + k4[2])
                    v2 += h / 6 * (k1[3] + 2 * (k2[3] + k3[3]) + k4[3])
        return out

    return run


def torque_table(ex, h: float, steps: int):
    """Torque [N m] at the half-step grid of one period, ``(2·steps + 1, 2)`` (float64, numpy)."""
    import numpy as np

    t = np.arange(2 * steps + 1) * (h / 2)
    k = np.asarray(ex.harmonics, dtype=float) * ex.fundamental
    amp, phase = np.asarray(ex.amplitudes) * float(ex.scale), np.asarray(ex.phases)
    return np.sum(amp[None] * np.cos(k[None] * t[:, None, None] + phase[None]), axis=2)


def main(argv=None):
    args = parse_args(argv)
    _set_host_devices(args.devices)
    import jax

    jax.config.update("jax_enable_x64", True)

    import jax.numpy as jnp
    import numpy as np
    import scipy

    import jaxid

    t_main = time.perf_counter()
    quick = args.quick
    batches = args.batches or ([1, 64, 1024] if quick else [1, 4, 16, 64, 256, 1024, 4096])
    repeats = args.repeats or (1 if quick else 3)
    scipy_runs = (2 if quick else 3) if args.scipy_runs is None else args.scipy_runs
    step, discard = args.sample_step, args.discard_periods
    platform = jax.devices()[0].platform
    ex = jaxid.table2("same", scale=1.0)
    steps = int(round(ex.period / step))
    opts = dict(solver=args.solver, substeps=args.substeps, sample_step=step)
    sim = dict(discard_periods=discard, measured_periods=MEASURE, **opts)
    result = {
        "devices": [str(d) for d in jax.devices()],
        "platform": platform,
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "versions": {"jax": jax.__version__, "numpy": np.__version__, "scipy": scipy.__version__},
        "workload": f"point-mass, Table 2 same x1, discard {discard} + measure {MEASURE} periods "
        f"({(discard + MEASURE) * ex.period:.0f} s), step {step} s, solver {args.solver}, substeps {args.substeps}",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compiler_options": dict(jaxid.simulation.batch.compiler_options()),  # what simulate_batch compiles with
        "rows": [],
    }

    def save():
        result["load_average_end"] = os.getloadavg()
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f, indent=1)
            os.replace(tmp, args.json)

    def left():
        return math.inf if args.budget is None else args.budget - (time.perf_counter() - t_main)

    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1), flush=True)

    def run_call(arms):
        chunk = args.chunk_size or (512 if platform == "cpu" else arms.masses.shape[0])
        rec = jaxid.simulate_batch(arms, ex, chunk_size=chunk, **sim)
        ok = jnp.sum(rec.status == jaxid.SUCCESS)
        return rec, int(ok)

    # Tight reference on a few trials (adaptive Tsit5), and the error of jaxid against it.
    n_ref = args.reference_trials
    ref_masses = make_masses(max(n_ref, 1))
    ref_q = None
    if n_ref:
        t0 = time.perf_counter()
        ref = jaxid.simulate_batch(
            make_arms(ref_masses),
            ex,
            solver="adaptive",
            rtol=1e-10,
            atol=1e-12,
            discard_periods=discard,
            measured_periods=MEASURE,
            sample_step=step,
        )
        ref_q = np.asarray(ref.q)
        fast, _ = run_call(make_arms(ref_masses))
        result["max_error_rad"] = float(np.max(np.abs(np.asarray(fast.q) - ref_q)))
        result["reference_seconds"] = time.perf_counter() - t0
        print(
            f"max error vs adaptive Tsit5 (rtol 1e-10, {n_ref} trials): {result['max_error_rad']:.2e} rad", flush=True
        )

    # solve_ivp loop, same run.
    if scipy_runs:
        masses = make_masses(max(scipy_runs, n_ref))
        t0, c0 = time.perf_counter(), time.process_time()
        scipy_q = [scipy_trajectory(masses[i], ex, step, discard) for i in range(scipy_runs)]
        result["solve_ivp_traj_per_s"] = scipy_runs / (time.perf_counter() - t0)
        result["solve_ivp_traj_per_cpu_s"] = scipy_runs / (time.process_time() - c0)
        if ref_q is not None:
            result["solve_ivp_max_error_rad"] = max(
                float(np.max(np.abs(scipy_q[i] - ref_q[i]))) for i in range(min(scipy_runs, n_ref))
            )
        print(f"solve_ivp loop: {result['solve_ivp_traj_per_s']:.3f} trajectories/s ({scipy_runs} runs)", flush=True)

    # numba RK4: compile once, error against the reference.
    numba_run = numba_simulator(args.numba_threads) if args.numba_threads else None
    table = torque_table(ex, step, steps)
    if numba_run is not None:
        import numba

        t0 = time.perf_counter()
        nq = numba_run(ref_masses[:1], table, step, steps, discard, MEASURE)
        result["numba"] = {
            "threads": numba.get_num_threads(),
            "version": numba.__version__,
            "compile_s": time.perf_counter() - t0,
        }
        if ref_q is not None:
            nq = numba_run(ref_masses, table, step, steps, discard, MEASURE)
            result["numba"]["max_error_rad"] = float(np.max(np.abs(nq - ref_q)))
        print(f"numba RK4 baseline: {result['numba']}", flush=True)
    elif args.numba_threads:
        result["numba"] = {"skipped": "numba is not installed (pip install -e .[bench])"}
    save()

    compiled_calls: set[int] = set()
    for batch in batches:
        call = min(batch, args.max_call or batch)
        n_calls = -(-batch // call)
        total = n_calls * call
        masses = make_masses(total, seed=batch)
        prev = [r for r in result["rows"] if "traj_per_s" in r]
        if prev and left() < math.inf:
            rate = prev[-1]["traj_per_s"]
            compiles = [r["compile_s"] for r in prev if r.get("compile_s") is not None]
            compile_guess = 2 * max(compiles) + 5 if compiles else 30
            new_shape = call not in compiled_calls
            need = total / rate * repeats + (call / rate + compile_guess if new_shape else 0)
            if need > left():
                result["rows"].append({"batch": batch, "skipped": f"predicted {need:.0f} s > {left():.0f} s left"})
                print(f"batch {batch}: skipped ({result['rows'][-1]['skipped']})", flush=True)
                save()
                continue
        calls = [make_arms(masses[i * call : (i + 1) * call]) for i in range(n_calls)]
        first = None
        if call not in compiled_calls:
            t0 = time.perf_counter()
            rec, _ = run_call(calls[0])
            del rec
            first = time.perf_counter() - t0
            compiled_calls.add(call)
        best, best_cpu, ok = np.inf, np.inf, 0
        with_numba = numba_run is not None and batch <= args.numba_max
        numba_times, ratios = [], []
        for _ in range(repeats):
            # jaxid and numba alternate, so a change of the machine's load hits both: the median of
            # the per-repeat ratios is the figure to read on a shared machine.
            t0, c0 = time.perf_counter(), time.process_time()
            ok = 0
            for arms in calls:
                rec, k = run_call(arms)  # int(...) blocks: one call's records in memory at a time
                ok += k
                del rec
            wall = time.perf_counter() - t0
            best = min(best, wall)
            best_cpu = min(best_cpu, time.process_time() - c0)
            if with_numba:
                t0 = time.perf_counter()
                numba_run(masses[:batch], table, step, steps, discard, MEASURE)
                numba_times.append(time.perf_counter() - t0)
                ratios.append((total / wall) / (batch / numba_times[-1]))
        row = {
            "batch": batch,
            "trajectories": total,
            "calls": n_calls,
            "compile_s": None if first is None else max(first - best / n_calls, 0.0),
            "run_s": best,
            "traj_per_s": total / best,
            "cpu_s": best_cpu,
            "traj_per_cpu_s": total / best_cpu,
            "peak_rss_mib": peak_rss_mib(),
            "ok": ok,
        }
        if "solve_ivp_traj_per_s" in result:
            row["ratio_vs_solve_ivp"] = row["traj_per_s"] / result["solve_ivp_traj_per_s"]
        if with_numba:
            row["numba_traj_per_s"] = batch / min(numba_times)
            row["ratio_vs_numba"] = row["traj_per_s"] / row["numba_traj_per_s"]  # best against best
            row["ratio_vs_numba_per_repeat"] = ratios
            row["ratio_vs_numba_median"] = float(np.median(ratios))
        result["rows"].append(row)
        save()
        print(
            f"batch {batch:7d}: compile {row['compile_s'] or 0:6.2f} s  run {best:7.3f} s  "
            f"{row['traj_per_s']:9.1f} traj/s"
            + (
                f"  x{row['ratio_vs_numba']:5.2f} numba ({row['numba_traj_per_s']:.0f}/s; median of "
                f"{len(ratios)} alternating repeats x{row['ratio_vs_numba_median']:.2f})"
                if "ratio_vs_numba" in row
                else ""
            )
            + (f"  x{row['ratio_vs_solve_ivp']:7.1f} solve_ivp" if "ratio_vs_solve_ivp" in row else "")
            + f"  cpu/wall {best_cpu / best:.2f}  peak RSS {row['peak_rss_mib']:6.0f} MiB  ok {ok}/{total}",
            flush=True,
        )
        del calls

    if not args.skip_memory_check and platform == "cpu":
        # Compiled footprint for 3 vs 30 discarded periods, batch 1024 (compile only, no run).
        arms = make_arms(make_masses(1024))
        memory = {}
        for d in (3, 30):
            try:
                lowered = jax.jit(
                    lambda a, d=d: jaxid.simulate_batch(
                        a, ex, chunk_size=args.chunk_size or 512, **{**sim, "discard_periods": d}
                    )
                ).lower(arms)
                stats = lowered.compile().memory_analysis()
                memory[d] = {
                    "temp_mib": stats.temp_size_in_bytes / 2**20,
                    "output_mib": stats.output_size_in_bytes / 2**20,
                }
            except Exception as err:  # the memory analysis is diagnostic only
                memory[d] = {"error": f"{type(err).__name__}: {err}"[:300]}
        result["memory_vs_discard"] = memory
        print(f"compiled memory, batch 1024, discard 3 vs 30 periods: {memory}", flush=True)
    save()
    return result


if __name__ == "__main__":
    main()
