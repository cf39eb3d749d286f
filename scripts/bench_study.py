"""End-to-end throughput of the study runner on a 10 000-trial noise sweep.

    python scripts/bench_study.py [--trials 10000] [--levels 5] [--estimators equation_error,ml] [--devices N]

Runs a noise sweep (point-mass arm, split Table 2 lines at scale 0.25, Gaussian noise at
``--levels`` levels, ``--trials`` trials in all) through ``run_experiment`` twice into temporary
directories: the first run includes compilation, the second reuses the compiled functions (same
process), so compile time is reported apart. A numpy baseline — per trial: projection onto the
lines and the equation-error least squares in numpy (``numpy.linalg.lstsq``), a Python loop —
runs on the same records for a subset of trials, and the ratio is reported. Accuracy: the jaxid
and numpy equation-error estimates are compared on those trials.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--levels", type=int, default=5)
    ap.add_argument("--estimators", default="equation_error,ml")
    ap.add_argument("--devices", type=int, default=os.cpu_count())
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--baseline-trials", type=int, default=100)
    args = ap.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"

    import jax

    jax.config.update("jax_enable_x64", True)
    import json
    from pathlib import Path

    import numpy as np
    import pandas as pd

    import jaxid
    from jaxid.config import parse_experiment
    from jaxid.experiment import run_experiment

    levels = np.geomspace(0.001, 0.1, args.levels)
    per = args.trials // args.levels
    estimators = [e for e in args.estimators.split(",") if e]
    raw = {
        "experiment": {"name": "bench", "seed": 1, "trials": per, "chunk": args.chunk},
        "defaults": {"lines": "split", "scale": 0.25, "noise": "gaussian", "estimators": estimators},
        "settings": {f"n{i}": {"noise_level": float(lv)} for i, lv in enumerate(levels)},
    }
    exp = parse_experiment(raw)
    total = per * args.levels
    print(f"devices: {jax.devices()}  trials: {total}  estimators: {estimators}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_experiment(exp, Path(tmp) / "cold", progress=False, figures=False)
        cold = time.perf_counter() - t0
        manifest = json.loads((Path(tmp) / "cold" / "manifest.json").read_text())
        compile_s = sum(sum(v.get("compile_seconds", {}).values()) for v in manifest["settings"].values())
        t0 = time.perf_counter()
        run_experiment(exp, Path(tmp) / "warm", progress=False, figures=False)
        warm = time.perf_counter() - t0
        trials = pd.read_parquet(Path(tmp) / "warm" / "trials.parquet")
        warm_manifest = json.loads((Path(tmp) / "warm" / "manifest.json").read_text())
        summary = pd.read_parquet(Path(tmp) / "warm" / "summary.parquet")

    # numpy baseline on the same kind of records (first setting), equation error per trial.
    arm = jaxid.point_mass()
    exc = jaxid.table2("split", 0.25)
    rec = jaxid.simulate(arm, exc)
    t = np.asarray(rec.t)
    tau = np.asarray(rec.tau)
    q = np.asarray(rec.q)
    omega = np.asarray(exc.line_frequencies)
    rng = np.random.default_rng(0)
    # D0 and K0 of the point-mass arm are linear in (m1, m2) with no constant part.
    lin_of = lambda th: jaxid.linearise(arm.with_parameters(("m1", "m2"), th))
    d_m = np.asarray(jax.jacfwd(lambda th: lin_of(th).mass)(np.array([5.0, 1.5])))
    k_m = np.asarray(jax.jacfwd(lambda th: lin_of(th).stiffness)(np.array([5.0, 1.5])))
    basis = np.exp(-1j * np.outer(t, omega)) * (2 / len(t))

    def numpy_equation_error(qn):
        qk = basis.T @ qn  # (L, 2) phasors X = C - jD
        uk = basis.T @ tau
        rows, rhs = [], []
        for i, w in enumerate(omega):
            z_m = k_m - w**2 * d_m  # (2, 2, 2): d Z / d m_j
            cols = [z_m[:, :, j] @ qk[i] for j in range(2)]
            cols += [1j * w * np.array([qk[i, 0], 0]), 1j * w * np.array([0, qk[i, 1]])]
            a = np.stack(cols, axis=1)
            rows += [a.real, a.imag]
            rhs += [uk[i].real, uk[i].imag]
        sol, *_ = np.linalg.lstsq(np.concatenate(rows), np.concatenate(rhs), rcond=None)
        return sol

    nb = args.baseline_trials
    t0 = time.perf_counter()
    base = [numpy_equation_error(q + levels[0] * rng.standard_normal(q.shape)) for _ in range(nb)]
    base_s = (time.perf_counter() - t0) / nb
    truth = np.array([5.0, 1.5, 5.0, 2.0])
    base_err = np.max(np.abs(np.mean(base, axis=0) - truth) / truth)

    rate = total / warm
    print(f"cold run (compile included): {cold:.1f} s; estimator compile {compile_s:.1f} s")
    print(f"warm run: {warm:.1f} s -> {rate:.0f} trials/s end to end ({len(estimators)} estimators, spectrum, noise)")
    print(f"numpy equation-error loop: {1 / base_s:.0f} trials/s (one estimator) -> jaxid/numpy = {rate * base_s:.1f}x")
    print(f"numpy mean relative error at noise {levels[0]:.3g}: {base_err:.2e}")
    parts = warm_manifest["settings"].values()
    est_s = {}
    for v in parts:
        for k, sec in v.get("estimator_seconds", {}).items():
            est_s[k] = est_s.get(k, 0.0) + sec
    sim_s = sum(v.get("simulate_seconds", 0.0) for v in parts)
    chunk_s = sum(v.get("run_seconds", 0.0) for v in parts)
    print(
        f"warm breakdown: chunks {chunk_s:.1f} s (simulation {sim_s:.1f} s, estimators "
        + ", ".join(f"{k} {v:.1f} s = {1e3 * v / total:.2f} ms/trial" for k, v in est_s.items())
        + f"); the rest ({warm - chunk_s:.1f} s) is per-setting CRLB / coefficient tables and table writing"
    )
    eq = est_s.get("equation_error")
    if eq:
        print(
            f"equation_error alone (noise + spectrum + estimate, batched): {total / eq:.0f} trials/s "
            f"-> {total / eq * base_s:.1f}x the numpy loop"
        )
    ok = (trials["status"] == "ok").mean()
    print(f"trials ok: {ok:.4f}")
    cols = ["setting", "estimator", "parameter", "rmse", "sqrt_crlb", "std_over_sqrt_crlb"]
    print(summary[summary.parameter == "m2"][cols].to_string(index=False))


if __name__ == "__main__":
    sys.exit(main())
