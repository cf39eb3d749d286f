"""Benchmark: noise + spectrum + equation error + ML on many one-period trials, JAX against numpy/scipy.

Paths, all on the same clean record (point-mass arm, split Table 2 lines, nonlinear simulation,
Δ = 0.01 s, N = 10 000 samples), measured in the same run:

- ``jax time``: per trial, noise on the 2 × 10 000 samples, the spectrum (``fourier_coefficients``),
  ``equation_error`` and ``ml`` (plus ``paper`` with ``--paper``), as one compiled call
  (``jax.lax.map`` over chunks of ``vmap``-ed trials);
- ``jax spectral`` (Gaussian noise only): the clean spectrum once, then per trial the noisy lines
  drawn directly (``add_line_noise``, exact in distribution) and the same two estimators
  (``equation_error_fit``, ``ml_fit``);
- ``numpy loop``: what a numpy/scipy user writes — per trial the noise, ``numpy.fft.rfft``,
  ``numpy.linalg.lstsq`` and ``scipy.optimize.least_squares(method="lm")``; timed on
  ``--loop-trials`` trials and scaled to ``--trials``; its estimates are checked against the
  ``jax time`` ones on the same noise;
- ``numpy loop, spectral``: the same loop with the noisy lines drawn as ``jax spectral`` does
  (shows what the noise and the FFT cost the loop).

Every ratio is against the ``numpy loop`` (time domain); compile time is reported apart.
With ``--ml-solver gauss_newton`` the script also reports, at each ``--convergence-levels`` σ on
``--convergence-trials`` spectral-path trials, how many Gauss–Newton steps the closed-form route
takes (``gauss_newton_affine``), its statuses, and its largest relative distance to the optimum
(optimistix Gauss–Newton on the autodiff residual run to ``rtol = 1e-14``).
Accuracy: the Monte Carlo RMSE of each path (the two JAX paths must agree within Monte Carlo
error) and the JAX-vs-numpy difference on the same records.

Single XLA CPU device: splitting the batch over two host devices deadlocked in this workload with
jaxlib 0.10 (the optimiser's ``while_loop`` with LAPACK calls); see docs/lapack-deadlock.md.

Usage:
    python scripts/bench_estimators.py [--trials 10000] [--chunk 500] [--loop-trials 200] [--noise gaussian]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=500, help="trials per vmapped chunk inside the compiled call")
    ap.add_argument("--loop-trials", type=int, default=200, help="trials timed with the numpy/scipy loop")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--noise", default="gaussian", choices=["gaussian", "uniform"])
    ap.add_argument("--level", type=float, default=None, help="noise level (gaussian: std 0.01; uniform: 0.1*rand)")
    ap.add_argument("--paper", action="store_true", help="also run the paper's estimator on the time path")
    ap.add_argument("--ml-solver", default="levenberg_marquardt", choices=["levenberg_marquardt", "gauss_newton"])
    ap.add_argument("--convergence-levels", default="0.001,0.01,0.1", help="σ list for the step count ('' skips)")
    ap.add_argument("--convergence-trials", type=int, default=1000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.trials % args.chunk:
        sys.exit("--trials must be a multiple of --chunk")

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import scipy.optimize

    import jaxid
    from jaxid.estimate import equation_error_fit, ml_fit, paper, parameter_values
    from jaxid.measure.noise import add_line_noise
    from jaxid.measure.spectrum import fourier_coefficients
    from jaxid.simulation.linearisation import affine_impedance

    unknowns = ("m1", "m2", "fv1", "fv2")
    arm = jaxid.point_mass()
    exc = jaxid.table2("split", scale=args.scale)
    kind = args.noise
    level = args.level if args.level is not None else (0.01 if kind == "gaussian" else 0.1)
    sigma = jaxid.noise_std(kind, level)

    t0 = time.perf_counter()
    rec = jax.block_until_ready(jaxid.simulate(arm, exc, measured_periods=1))  # nonlinear, Δ = 0.01 s
    t_sim = time.perf_counter() - t0
    clean = fourier_coefficients(rec, exc)
    theta_true = np.asarray(parameter_values(arm, unknowns))
    result: dict = {
        "device": str(jax.devices()[0]),
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "trials": args.trials,
        "chunk": args.chunk,
        "noise": f"{kind} level {level} (std {sigma:.4g} rad)",
        "samples_per_period": rec.samples_per_period,
        "scale": args.scale,
        "ml_solver": args.ml_solver,
        "simulate_s": t_sim,
        "paths": {},
    }

    def estimates(s):
        e = equation_error_fit(s, arm, unknowns=unknowns, noise_std=sigma)
        m = ml_fit(s, arm, unknowns=unknowns, noise_std=sigma, solver=args.ml_solver)
        return (e.value, e.status), (m.value, m.status)

    def time_trial(key):
        r = jaxid.add_noise(rec, key=key, kind=kind, level=level)
        out = estimates(fourier_coefficients(r, exc))
        if args.paper:
            p = paper(r, exc, arm)
            out = out + ((p.value, p.status),)
        return out

    def spectral_trial(key):
        return estimates(add_line_noise(clean, key=key, kind="gaussian", level=level))

    keys = jax.random.split(jax.random.key(0), args.trials)
    paths = {"jax time": time_trial}
    if kind == "gaussian":
        paths["jax spectral"] = spectral_trial
    outputs = {}
    for name, trial in paths.items():
        run = jax.jit(lambda keys, trial=trial: jax.lax.map(trial, keys, batch_size=args.chunk))
        t0 = time.perf_counter()
        compiled = run.lower(keys).compile()
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = jax.tree.map(np.asarray, jax.block_until_ready(compiled(keys)))
        t_run = time.perf_counter() - t0
        outputs[name] = out
        (ev, es), (mv, ms) = out[:2]
        result["paths"][name] = {
            "compile_s": t_compile,
            "run_s": t_run,
            "trials_per_s": args.trials / t_run,
            "ok_equation_error": float(np.mean(es == 0)),
            "ok_ml": float(np.mean(ms == 0)),
            "rmse_equation_error": np.sqrt(np.mean((ev - theta_true) ** 2, axis=0)).tolist(),
            "rmse_ml": np.sqrt(np.mean((mv - theta_true) ** 2, axis=0)).tolist(),
        }

    # ---- numpy / scipy loop ----------------------------------------------------------------------
    k = args.loop_trials
    tau = np.asarray(rec.tau)
    t_start = float(rec.t[0])
    n = rec.samples_per_period
    lines = np.asarray(exc.lines)
    omega = exc.line_frequencies
    # The model a numpy user would write: Z(θ) = Z0 + Σ θ_i Z_i (affine), from jaxid once.
    z0, zi = (np.asarray(x) for x in affine_impedance(arm, unknowns, omega))
    zi = np.moveaxis(zi, -1, 0)
    rot = np.exp(-1j * omega * t_start)
    u = (2.0 / n) * np.fft.rfft(tau, axis=0)[lines] * rot[:, None]
    q_clean_lines = np.asarray(clean.Q)
    v = 4 * sigma**2 / n

    def np_fit(qk):
        a = np.einsum("pkij,kj->kip", zi, qk)
        b = u - np.einsum("kij,kj->ki", z0, qk)
        a_r = np.concatenate([a.real, a.imag], 1).reshape(-1, 4)
        b_r = np.concatenate([b.real, b.imag], 1).reshape(-1)
        e_est = np.linalg.lstsq(a_r, b_r, rcond=None)[0]

        def resid(th):
            z = z0 + np.einsum("p,pkij->kij", th, zi)
            h = np.linalg.inv(z)
            r = (qk - np.einsum("kij,kj->ki", h, u)) / np.sqrt(v / 2)
            return np.concatenate([r.real, r.imag], 1).ravel()

        sol = scipy.optimize.least_squares(resid, e_est, method="lm", xtol=1e-10, ftol=1e-10)
        return e_est, sol.x

    def np_time_trial(qn):
        return np_fit((2.0 / n) * np.fft.rfft(qn, axis=0)[lines] * rot[:, None])

    rng = np.random.default_rng(0)
    q_clean = np.asarray(rec.q)

    def draw_time():
        if kind == "uniform":
            return q_clean + level * rng.random(q_clean.shape)
        return q_clean + level * rng.standard_normal(q_clean.shape)

    t0 = time.perf_counter()
    for _ in range(k):
        np_time_trial(draw_time())
    t_loop = (time.perf_counter() - t0) / k
    result["paths"]["numpy loop"] = {"run_s": t_loop * args.trials, "trials_per_s": 1 / t_loop, "timed_trials": k}
    if kind == "gaussian":
        s_line = np.sqrt(2 * sigma**2 / n)
        t0 = time.perf_counter()
        for _ in range(k):
            np_fit(q_clean_lines + s_line * (rng.standard_normal(u.shape) + 1j * rng.standard_normal(u.shape)))
        t_loop_s = (time.perf_counter() - t0) / k
        result["paths"]["numpy loop, spectral"] = {"run_s": t_loop_s * args.trials, "trials_per_s": 1 / t_loop_s}
    for p in result["paths"].values():
        p["ratio_vs_numpy_loop"] = p["trials_per_s"] * t_loop
        if "compile_s" in p:
            p["ratio_incl_compile"] = t_loop * args.trials / (p["run_s"] + p["compile_s"])

    # Same records, both implementations: the numpy loop on the JAX time path's noisy records.
    noisy = jax.jit(jax.vmap(lambda key: jaxid.add_noise(rec, key=key, kind=kind, level=level).q))
    qs = np.asarray(noisy(keys[: min(k, 50)]))
    loop = [np_time_trial(q) for q in qs]
    le, lm = (np.stack(x) for x in zip(*loop, strict=True))
    (ev, _), (mv, _) = outputs["jax time"][:2]
    result["max_rel_diff_jax_vs_numpy"] = {
        "equation_error": float(np.max(np.abs(le - ev[: len(qs)]) / theta_true)),
        "ml": float(np.max(np.abs(lm - mv[: len(qs)]) / theta_true)),
    }
    if args.ml_solver == "gauss_newton" and args.convergence_levels:
        result["convergence"] = convergence(args, rec, arm, unknowns, exc, args.convergence_trials)
    result["load_average_end"] = os.getloadavg()

    print(
        f"device={result['device']}, trials={args.trials}, chunk={args.chunk}, N={n}, scale={args.scale}, "
        f"noise {result['noise']}, ml solver={args.ml_solver}; load average {result['load_average_start'][0]:.1f}"
    )
    print(f"one nonlinear simulation (incl. compile): {t_sim:.2f} s")
    for name, p in result["paths"].items():
        extra = (
            f", compile {p['compile_s']:.1f} s (x{p['ratio_incl_compile']:.1f} incl. compile)"
            if "compile_s" in p
            else ""
        )
        print(f"{name:22s} {p['trials_per_s']:9.0f} trials/s  x{p['ratio_vs_numpy_loop']:6.1f} the numpy loop{extra}")
    for name in outputs:
        p = result["paths"][name]
        print(
            f"  {name}: RMSE equation_error {np.round(p['rmse_equation_error'], 4)}, ml {np.round(p['rmse_ml'], 4)} "
            f"(truth {theta_true}); ok {p['ok_equation_error']:.4f} / {p['ok_ml']:.4f}"
        )
    print(
        "max relative difference JAX vs numpy on the same records: " + json.dumps(result["max_rel_diff_jax_vs_numpy"])
    )
    for level, c in result.get("convergence", {}).items():
        print(
            f"Gauss-Newton at sigma {level}: steps {c['steps']}, statuses {c['statuses']}, "
            f"max relative distance to the optimum {c['max_rel_to_optimum']:.1e}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


def convergence(args, rec, arm, unknowns, exc, trials) -> dict:
    """Steps of the closed-form Gauss–Newton ML and its distance to the optimum, per noise level."""
    import jax
    import numpy as np

    from jaxid.estimate import equation_error_fit
    from jaxid.estimate.equation_error import line_variance
    from jaxid.estimate.ml import gauss_newton_affine, levenberg_marquardt, output_error_residual
    from jaxid.measure.noise import add_line_noise
    from jaxid.measure.spectrum import fourier_coefficients
    from jaxid.simulation.linearisation import affine_impedance

    clean = fourier_coefficients(rec, exc)

    def both(key, sigma):
        s = add_line_noise(clean, key=key, kind="gaussian", level=sigma)
        variance = line_variance(s, sigma)
        start = equation_error_fit(s, arm, unknowns=unknowns, noise_std=sigma).value
        z0, zi = affine_impedance(arm, unknowns, s.omega)
        theta, _, status, steps = gauss_newton_affine(s, variance, z0, zi, start)
        residual = output_error_residual(s, arm, unknowns, variance)
        optimum, _ = levenberg_marquardt(residual, start, rtol=1e-14, atol=1e-16, max_steps=300, solver="gauss_newton")
        return theta, status, steps, optimum

    run = jax.jit(jax.vmap(both, in_axes=(0, None)))
    out = {}
    for i, level in enumerate(float(x) for x in args.convergence_levels.split(",")):
        keys = jax.random.split(jax.random.key(100 + i), trials)
        theta, status, steps, optimum = (np.asarray(x) for x in run(keys, level))
        ok = status == 0
        out[str(level)] = {
            "steps": {int(k): int(n) for k, n in zip(*np.unique(steps, return_counts=True), strict=True)},
            "statuses": {int(k): int(n) for k, n in zip(*np.unique(status, return_counts=True), strict=True)},
            "max_rel_to_optimum": float(np.max(np.abs(theta[ok] - optimum[ok]) / np.abs(optimum[ok]))),
        }
    return out


if __name__ == "__main__":
    main()
