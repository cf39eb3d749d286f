"""Benchmark: an estimator called on concrete inputs, compiled as one program against op by op.

The README quickstart's case (point-mass arm, split Table 2 lines at ×0.25, nonlinear steady
state at Δ = 0.01 s, one period, the paper's uniform noise, unknowns m1, m2, fv1, fv2; ``paper``:
m1, m2). Each registered estimator called outside ``jit`` runs compiled
(``jaxid.estimate.base.register``: ``eqx.filter_jit``); the baseline, measured in the same run, is the function it wraps
(``__wrapped__``), which JAX runs op by op. Each (estimator, mode) runs in a fresh process with
the persistent compilation cache off, so the first call includes every compile a new session
pays; the second call (same inputs) shows the steady cost. Accuracy beside it: the largest
difference between the two modes' estimates, relative to the estimate, and both statuses. The
time-domain baselines get the noise's known mean as ``measurement_offset``.

``simulate`` and ``linear_crlb`` may be named too (compiled by ``jaxid.types.compiled_when_concrete``
in the same way; their baseline is the function it wraps): the value compared is the record's last
sample, the bound's diagonal.

Usage:
    python scripts/bench_eager.py [--estimators simulate linear_crlb equation_error ml nonlinear_oe] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jaxid
from jaxid.estimate.interface import ESTIMATORS as ESTIMATOR_CLASSES

name, mode = sys.argv[1], sys.argv[2]
arm = jaxid.point_mass()
exc = jaxid.table2(lines="split", scale=0.25)
sigma = jaxid.noise_std("uniform", 0.1)
unknowns = ("m1", "m2") if name == "paper" else ("m1", "m2", "fv1", "fv2")  # the paper's route: masses
if name == "simulate":  # the record itself (simulate's compiled part is jaxid.simulation._trajectory)
    if mode != "compiled":
        jaxid.simulation._trajectory = jaxid.simulation._trajectory.__wrapped__
    fn = lambda: jaxid.simulate(arm, exc)
    value = lambda out: out.q[-1]
elif name == "linear_crlb":
    crlb = jaxid.linear_crlb if mode == "compiled" else jaxid.linear_crlb.__wrapped__
    fn = lambda: crlb(arm, exc, unknowns, noise_std=sigma)
    value = lambda out: jax.numpy.diag(out)
else:
    noisy = jaxid.add_noise(jaxid.simulate(arm, exc), key=jax.random.key(0), kind="uniform", level=0.1)
    estimator = jaxid.get_estimator(name)
    run_estimator = estimator if mode == "compiled" else estimator.__wrapped__
    kwargs = dict(unknowns=unknowns, noise_std=sigma)
    if ESTIMATOR_CLASSES[name].takes_noise_mean:  # the time-domain baselines: the noise's mean is known
        kwargs["measurement_offset"] = jaxid.noise_mean("uniform", 0.1)
    fn = lambda: run_estimator(noisy, exc, arm, **kwargs)
    value = lambda out: out.value

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

out = {}
try:
    for call in ("first", "second"):
        t0, c0 = time.perf_counter(), cpu()
        result = fn()
        jax.block_until_ready(value(result))
        out[call + "_s"], out[call + "_cpu_s"] = time.perf_counter() - t0, cpu() - c0
    out["value"] = [float(v) for v in value(result)]
    out["status"] = int(result.status) if hasattr(result, "status") else 0
except ValueError as err:  # reported, not hidden: op by op, a value check can fire mid-computation
    out["error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
"""


def run(name: str, mode: str) -> dict:
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, name, mode], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--estimators", nargs="+", default=["equation_error", "ml", "nonlinear_oe"])
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    rows = []
    print(
        f"{'estimator':16s} {'op by op':>10s} {'compiled':>10s} {'ratio':>7s} {'2nd call':>17s} {'max rel diff':>13s}"
        " status"
    )
    for name in args.estimators:
        eager, compiled = run(name, "op_by_op"), run(name, "compiled")
        if "error" in eager or "error" in compiled:
            rows.append({"estimator": name, "op_by_op": eager, "compiled": compiled})
            print(f"{name:16s} op by op: {eager.get('error', 'ok')} | compiled: {compiled.get('error', 'ok')}")
            continue
        diff = max(abs(a - b) / abs(a) for a, b in zip(eager["value"], compiled["value"], strict=True))
        row = {
            "estimator": name,
            "op_by_op": eager,
            "compiled": compiled,
            "first_call_ratio": eager["first_s"] / compiled["first_s"],
            "max_relative_difference": diff,
        }
        rows.append(row)
        print(
            f"{name:16s} {eager['first_s']:9.2f}s {compiled['first_s']:9.2f}s {row['first_call_ratio']:6.2f}x"
            f" {eager['second_s']:7.3f}s/{compiled['second_s']:.3f}s {diff:13.1e} {eager['status']}/{compiled['status']}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return {"rows": rows}


if __name__ == "__main__":
    main()
