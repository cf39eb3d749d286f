"""Benchmark: ``nonlinear_oe``'s default route against its fast options, in the same run.

Paper settings (point-mass arm, Table 2 torque, uniform ``0.1*rand()`` angle noise, Δ = 0.01 s,
one measured period, N = 10 000 samples): ``paper_split`` (split lines, ×1), ``paper_same`` (same
lines, ×1), ``split_quarter`` (split lines, ×0.25), masses unknown; with ``--sweep`` also the
amplitude sweep's extremes (split lines, ×0.125 and ×1.5, ``m1 m2 fv1 fv2``). Per setting the clean
steady-state record is simulated once and ``--trials`` noisy copies are drawn (``noise_draws``);
each route runs on the same records as one ``jit(vmap)`` call (the ``while_loop`` then runs until
the slowest trial finishes). Compile time is measured apart (first call); the cost is the later
calls' best (``--repeats``) divided by the trials. Routes (``NonlinearOutputError`` options):

- ``default``: ``route="shooting"`` (relaxed two-candidate start, per iteration a primal period +
  ``4 + p`` tangents);
- ``warm``: ``route="warm"`` (one candidate, per iteration one period with ``p`` warm tangents);
- ``fast``: ``route="warm", jacobian="differences", step_tolerance=0.01, state_tolerance=1e-6``
  (``p + 1`` primal periods per iteration, stop when the step is 1 % of its standard error).

Printed per setting and route: seconds per trial, ratio default/route, compile seconds, RMSE per
parameter, failures (status not CONVERGED) and ``max |θ_route − θ_default| / std`` on the same
records. No true parameter enters the estimator (the start is ``ml``'s estimate).

Usage:
    python scripts/bench_nonlinear.py [--trials 64] [--sweep] [--repeats 3] [--only sweep_s15,...]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxid  # noqa: E402
from jaxid.estimators.base import CONVERGED  # noqa: E402
from jaxid.estimators.nonlinear import nonlinear_output_error  # noqa: E402

ROUTES = {
    "default": {},
    "warm": {"route": "warm"},
    "fast": {"route": "warm", "jacobian": "differences", "step_tolerance": 0.01, "state_tolerance": 1e-6},
    "coarse": {"route": "coarse"},
}


def settings(sweep: bool):
    out = [
        ("paper_split", "split", 1.0, ("m1", "m2")),
        ("paper_same", "same", 1.0, ("m1", "m2")),
        ("split_quarter", "split", 0.25, ("m1", "m2")),
    ]
    if sweep:
        out += [
            ("sweep_s0125", "split", 0.125, ("m1", "m2", "fv1", "fv2")),
            ("sweep_s15", "split", 1.5, ("m1", "m2", "fv1", "fv2")),
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--sweep", action="store_true", help="also the amplitude sweep's x0.125 and x1.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated setting names to run (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per route (the best is reported)")
    parser.add_argument(
        "--routes", default="", help="comma-separated routes to run (default: all; 'default' always runs)"
    )
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
    for name, lines, scale, unknowns in settings(args.sweep or bool(only)):
        if only and name not in only:
            continue
        ex = jaxid.table2(lines, scale)
        record = jaxid.simulate(arm, ex)
        noisy = jaxid.noise_draws(record, key=jax.random.key(args.seed), draws=args.trials, kind="uniform", level=0.1)
        truth = np.asarray(arm.parameter_vector(unknowns))
        results = {}
        chosen = {name for name in args.routes.split(",") if name} | {"default"}
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
        ref_value, _, ref_cost, _ = results["default"]
        spread = np.std(ref_value, axis=0)
        for route, (value, status, per_trial, compile_s) in results.items():
            rmse = np.sqrt(np.mean((value - truth) ** 2, axis=0))
            diff = np.max(np.abs(value - ref_value) / spread)
            fails = int(np.sum(status != CONVERGED))
            rmse_s = " ".join(f"{u}={r:.5f}" for u, r in zip(unknowns, rmse, strict=True))
            print(
                f"{name:14s} {route:8s} {per_trial:9.4f} {ref_cost / per_trial:6.2f} {compile_s:8.1f} {fails:4d}"
                f" {diff:11.2e}  {rmse_s}"
            )


if __name__ == "__main__":
    main()
