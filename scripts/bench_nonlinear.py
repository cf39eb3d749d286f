"""Benchmark: ``nonlinear_oe``'s default route against the shooting route, in the same run.

Settings (point-mass arm, Table 2 torque, Δ = 0.01 s, N = 10 000 samples a period), as in
``experiments/*.toml``: ``paper_split`` / ``paper_same`` (split / same lines, ×1) and
``split_quarter`` (×0.25), masses unknown; with ``--sweep`` also the amplitude sweep's extremes
``sweep_s0125`` and ``sweep_s15`` (split lines, ``m1 m2 fv1 fv2``); by ``--only`` any of
``SETTINGS``: every amplitude-sweep scale, the noise sweep's extremes (Gaussian σ = 0.001 and
0.3 rad at ×0.25) and two baselines settings (same lines ×1; split ×1 over 4 periods). Uniform
``0.1*rand()`` angle noise unless stated. Per setting the clean steady-state record is simulated
once and ``--trials`` noisy copies are drawn (``noise_draws``); each route runs on the same
records as one ``jit(vmap)`` call (the ``while_loop`` then runs until the slowest trial
finishes). Compile time is measured apart (first call); the cost is the later calls' best
(``--repeats``) divided by the trials. Routes (``NonlinearOutputError`` options):

- ``default``: the default route (``route="coarse"``);
- ``shooting``: ``route="shooting"`` (relaxed two-candidate start, per iteration a primal period
  + ``4 + p`` tangents);
- ``shooting_fast``: ``route="shooting", step_tolerance=0.01, state_tolerance=1e-6`` (stops once
  the step is 1 % of its standard error).

Printed per setting and route: seconds per trial, ratio (the ``--baseline`` route's cost over this
route's: ``shooting`` by default), compile seconds, failures (status not CONVERGED),
``max |θ_route − θ_baseline| / std`` on the same records and RMSE per parameter with its Monte
Carlo standard error (delta method over the trials). No true parameter enters the estimator.

Usage:
    python scripts/bench_nonlinear.py [--trials 64] [--sweep] [--repeats 3] [--only sweep_s15,...]
        [--routes default] [--clock cpu]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxid  # noqa: E402
from jaxid.estimate.base import CONVERGED  # noqa: E402
from jaxid.estimate.nonlinear import nonlinear_output_error  # noqa: E402

ROUTES = {
    "default": {},
    "shooting": {"route": "shooting"},
    "shooting_fast": {"route": "shooting", "step_tolerance": 0.01, "state_tolerance": 1e-6},
    "coarse": {"route": "coarse"},
}


PAPER = ("m1", "m2")
SWEEP = ("m1", "m2", "fv1", "fv2")
# name: (lines, scale, unknowns, noise kind, noise level, measured periods), as in experiments/*.toml.
SETTINGS = {
    "paper_split": ("split", 1.0, PAPER, "uniform", 0.1, 1),
    "paper_same": ("same", 1.0, PAPER, "uniform", 0.1, 1),
    "split_quarter": ("split", 0.25, PAPER, "uniform", 0.1, 1),
    **{
        f"sweep_s{tag}": ("split", scale, SWEEP, "uniform", 0.1, 1)
        for tag, scale in (("0125", 0.125), ("025", 0.25), ("05", 0.5), ("075", 0.75), ("1", 1.0), ("15", 1.5))
    },
    "noise_n0001": ("split", 0.25, SWEEP, "gaussian", 0.001, 1),
    "noise_n03": ("split", 0.25, SWEEP, "gaussian", 0.3, 1),
    "baselines_same_full": ("same", 1.0, SWEEP, "uniform", 0.1, 1),
    "baselines_split_full_p4": ("split", 1.0, SWEEP, "uniform", 0.1, 4),
}


def settings(sweep: bool):
    names = ["paper_split", "paper_same", "split_quarter"]
    if sweep:
        names += ["sweep_s0125", "sweep_s15"]
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--sweep", action="store_true", help="also the amplitude sweep's x0.125 and x1.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated setting names to run (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per route (the best is reported)")
    parser.add_argument(
        "--routes", default="", help="comma-separated routes to run (default: all; the baseline always runs)"
    )
    parser.add_argument("--baseline", default="shooting", choices=list(ROUTES), help="the route ratios are against")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or the process's CPU time (steadier on a busy machine)",
    )
    args = parser.parse_args()
    arm = jaxid.point_mass()
    print(f"nonlinear_oe routes, {args.trials} trials per setting, uniform 0.1*rand() noise, jax {jax.__version__}")
    header = f"{'setting':14s} {'route':8s} {'s/trial':>9s} {'ratio':>6s} {'compile':>8s} {'fail':>4s} {'maxdiff/std':>11s}  rmse"
    print(header)
    only = {name for name in args.only.split(",") if name}
    unknown = only - set(SETTINGS)
    if unknown:
        parser.error(f"--only: unknown settings {sorted(unknown)}; choose from {list(SETTINGS)}")
    for name in [n for n in SETTINGS if n in only] if only else settings(args.sweep):
        lines, scale, unknowns, kind, level, periods = SETTINGS[name]
        ex = jaxid.table2(lines, scale)
        record = jaxid.simulate(arm, ex, measured_periods=periods)
        noisy = jaxid.noise_draws(record, key=jax.random.key(args.seed), draws=args.trials, kind=kind, level=level)
        truth = np.asarray(arm.parameter_vector(unknowns))
        results = {}
        chosen = {name for name in args.routes.split(",") if name} | {args.baseline}
        for route, options in ROUTES.items():
            if args.routes and route not in chosen:
                continue
            fit = jax.jit(
                jax.vmap(lambda r, o=options, e=ex, u=unknowns: nonlinear_output_error(r, e, arm, unknowns=u, **o))
            )
            t0 = time.perf_counter()
            jax.block_until_ready(fit(noisy))
            compile_s = time.perf_counter() - t0
            times = []
            for _ in range(args.repeats):  # the best of a few calls: the machine is shared
                t0 = time.perf_counter() if args.clock == "wall" else time.process_time()
                est = jax.block_until_ready(fit(noisy))
                times.append((time.perf_counter() if args.clock == "wall" else time.process_time()) - t0)
            per_trial = min(times) / args.trials
            results[route] = (np.asarray(est.value), np.asarray(est.status), per_trial, compile_s)
        ref_value, _, ref_cost, _ = results[args.baseline]
        spread = np.std(ref_value, axis=0)
        for route, (value, status, per_trial, compile_s) in results.items():
            sq = (value - truth) ** 2
            rmse = np.sqrt(np.mean(sq, axis=0))
            # Monte Carlo standard error of the RMSE: se(mean of squares) / (2 RMSE).
            rmse_se = np.std(sq, axis=0, ddof=1) / np.sqrt(len(sq)) / (2 * rmse)
            diff = np.max(np.abs(value - ref_value) / spread)
            fails = int(np.sum(status != CONVERGED))
            rmse_s = " ".join(f"{u}={r:.5f}±{e:.5f}" for u, r, e in zip(unknowns, rmse, rmse_se, strict=True))
            print(
                f"{name:14s} {route:8s} {per_trial:9.4f} {ref_cost / per_trial:6.2f} {compile_s:8.1f} {fails:4d}"
                f" {diff:11.2e}  {rmse_s}"
            )


if __name__ == "__main__":
    main()
