"""CPU cost of ``SerialArm.standard_regressor`` on a batch of states (the hot step of IDIM-LS).

The arm: the Panda (``data/robots/panda.urdf``, fingers fixed, 7 joints), 2 500 random states
(``--samples``), output ``(2500, 7, 98)``. Three formulations, all jitted and timed in the same
process on the same inputs:

- ``batched``: ``arm.standard_regressor`` as shipped (``spatial.rnea_regressor_batched``,
  batch-minor, elementwise over the batch);
- ``per_state``: the per-state recursion ``spatial.rnea_regressor`` plus the joint columns, vmapped
  over the states (``jnp.vectorize``): the formulation ``standard_regressor`` used before;
- ``jacfwd``: the forward-mode Jacobian of ``inverse_dynamics`` in the standard vector, vmapped.

Times are CPU seconds (``time.process_time``, medians over ``--repeats`` calls after one warm-up
call; compile seconds reported apart, wall clock of the first call); the ratio is per_state /
batched (and jacfwd / batched). The largest difference to ``per_state`` and ``jacfwd``, relative to
the largest entry, is reported too. Writes ``results/bench_regressor/summary.json`` (``--out``).

    OPENBLAS_NUM_THREADS=1 python scripts/bench_regressor.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxid  # noqa: E402
from jaxid.model import serial_dynamics, spatial  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _per_state(arm):
    """The previous ``standard_regressor``: the per-state recursion vmapped over the states."""
    n = arm.dof

    def one(q, qd, qdd):
        joints, xs = serial_dynamics._transforms(arm, q, None)
        rigid = spatial.rnea_regressor(joints, xs, arm.gravity, qd, qdd)
        eye = jnp.eye(n)
        sign = serial_dynamics._TWO_OVER_PI * jnp.arctan(arm.coulomb_slope * qd)
        return jnp.concatenate([rigid, eye * qdd, eye * qd, eye * sign, eye], axis=1)

    return jnp.vectorize(one, signature="(n),(n),(n)->(n,s)")


def _jacfwd(arm):
    def torque(standard, q, qd, qdd):
        return arm.with_standard_parameters(standard).inverse_dynamics(q, qd, qdd)

    theta = arm.standard_parameters()
    jac = jax.vmap(jax.jacfwd(torque), in_axes=(None, 0, 0, 0))
    return lambda q, qd, qdd: jac(theta, q, qd, qdd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2500)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_regressor")
    args = parser.parse_args()

    arm = jaxid.load_arm(ROOT / "data/robots/panda.urdf", fixed_joints=("panda_finger_joint1", "panda_finger_joint2"))
    rng = np.random.default_rng(0)
    q, qd, qdd = (jnp.asarray(rng.uniform(-s, s, (args.samples, arm.dof))) for s in (3.0, 3.0, 10.0))
    functions = {
        "batched": jax.jit(lambda q, qd, qdd: arm.standard_regressor(q, qd, qdd)),
        "per_state": jax.jit(_per_state(arm)),
        "jacfwd": jax.jit(_jacfwd(arm)),
    }
    compile_s, outputs = {}, {}
    for name, fn in functions.items():
        start = time.perf_counter()
        outputs[name] = np.asarray(fn(q, qd, qdd).block_until_ready())
        compile_s[name] = time.perf_counter() - start
    times = {name: [] for name in functions}
    for _ in range(args.repeats):  # interleaved: the same contention for all
        for name, fn in functions.items():
            start = time.process_time()
            fn(q, qd, qdd).block_until_ready()
            times[name].append(time.process_time() - start)
    median_ms = {name: 1e3 * float(np.median(t)) for name, t in times.items()}
    scale = np.max(np.abs(outputs["jacfwd"]))
    summary = {
        "arm": "panda (7 joints)",
        "samples": args.samples,
        "output_shape": list(outputs["batched"].shape),
        "repeats": args.repeats,
        "cpu_ms_per_batch_median": median_ms,
        "cpu_us_per_sample_median": {k: 1e3 * v / args.samples for k, v in median_ms.items()},
        "compile_and_first_call_s": compile_s,
        "speedup_vs_per_state": median_ms["per_state"] / median_ms["batched"],
        "speedup_vs_jacfwd": median_ms["jacfwd"] / median_ms["batched"],
        "max_relative_difference": {
            "batched_vs_per_state": float(np.max(np.abs(outputs["batched"] - outputs["per_state"])) / scale),
            "batched_vs_jacfwd": float(np.max(np.abs(outputs["batched"] - outputs["jacfwd"])) / scale),
        },
        "jax": jax.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
