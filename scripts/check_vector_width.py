"""Are batched simulations compiled with 512-bit vectors correct and deterministic? (CPU)

``jaxid.simulation.batch.CPU_COMPILER_OPTIONS`` compiled the two-link batch runner with
``xla_cpu_prefer_vector_width=512``. An N-joint open-loop batch compiled with it once returned
non-finite or diverged states in one SIMD lane of a chunk in some runs (see the comment at
``jaxid.simulation.closed_loop_batch._runner``). This script runs each check in repeated fresh processes (every run
compiles anew: no compilation cache) and compares every run bitwise against a reference run:

- ``two_link``: ``jaxid.simulate_batch`` on a study batch: Table 1 arms with masses, inertias and
  viscous friction drawn uniformly within ±``--spread`` per trial, the Table 2 multisine (``--lines``,
  scale ``--scale``), ``sample_step`` 0.01 s, each trial's own transient (``discard_periods=None``,
  the experiments' ``"auto"``), one measured period. Variants (``--two-link-variants``): ``256``
  (``XLA_FLAGS`` sets ``--xla_cpu_prefer_vector_width=256``, XLA's default; it wins over the
  option), ``opt`` (whatever ``jaxid.simulation.batch.CPU_COMPILER_OPTIONS`` holds: 512 bits while it holds
  the option; printed) and ``512`` (``XLA_FLAGS`` forcing 512 bits, whatever the option holds).
- ``closed_loop``: ``simulate_closed_loop_batch`` on the Franka Panda (fingers locked) with an
  ``OpenLoop`` controller (the commanded torques of one PD closed-loop run, a table shared by the
  trials), ``--closed-batch`` initial states perturbed by 1e-6 around the reference's, 0.5 s at
  1 kHz. Variants: ``default`` (the package's runner: XLA's default width) and ``512`` (the same
  runner rebuilt here with ``jax.jit(..., compiler_options={"xla_cpu_prefer_vector_width": "512"})``).
  ``--closed-path generic`` integrates by ``SerialArm.forward_dynamics`` under ``vmap`` (the path the
  failure was first seen on) instead of the unrolled fast path.

The reference of a check is the first run of its first variant (``256`` / ``default``). Per run:
a *bad lane* is a trial whose status is not ``SUCCESS``, whose record holds a non-finite value, or
whose angles differ from the reference's by more than ``--tolerance`` rad anywhere on the record
(compared on every ``--stride``-th sample); a run is *bitwise equal* when every trial's record
(all its arrays: angles, torques, status, and velocities or steady-state change) hashes to the
reference's; *same process* says whether a
second call of the same compiled function in the same process gave the same bits. Runs of the
variants alternate, so a change of the shared machine's load hits all of them. Exits with status 1
when a run has a bad lane or differs from its variant's first run or from its own second call.

    python scripts/check_vector_width.py                                  # both checks: 20 / 13 runs
    python scripts/check_vector_width.py --checks two_link --runs 30 --batch 1024
    python scripts/check_vector_width.py --checks closed_loop --closed-runs 26 --closed-batch 1024
    python scripts/check_vector_width.py --checks closed_loop --closed-path generic --closed-runs 5  # fails at 512 bits

CPU only (on a GPU the option is not used); needs an AVX-512 processor to test anything (elsewhere
LLVM keeps to the widest registers it has, and every variant is the same program).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PANDA = ROOT / "data" / "robots" / "panda.urdf"
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
WIDTH = "xla_cpu_prefer_vector_width"
VARIANTS = {"two_link": ("256", "opt", "512"), "closed_loop": ("default", "512")}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checks", default="two_link,closed_loop", help="comma-separated: two_link, closed_loop")
    p.add_argument("--runs", type=int, default=20, help="fresh processes per two-link variant")
    p.add_argument("--two-link-variants", default="256,opt", help="of 256, opt, 512")
    p.add_argument("--batch", type=int, default=1024, help="two-link trials per run")
    p.add_argument("--chunk-size", type=int, default=512, help="two-link trials per vmap (simulate_batch's default)")
    p.add_argument("--lines", default="split", help="Table 2 lines: same or split")
    p.add_argument("--scale", type=float, default=1.0, help="Table 2 amplitude scale")
    p.add_argument("--spread", type=float, default=0.1, help="relative spread of the sampled Table 1 parameters")
    p.add_argument("--closed-runs", type=int, default=13, help="fresh processes per closed-loop variant")
    p.add_argument("--closed-batch", type=int, default=1024, help="closed-loop trials per run")
    p.add_argument("--closed-chunk", type=int, default=256, help="closed-loop trials per vmap (the default)")
    p.add_argument("--closed-path", choices=("fast", "generic"), default="fast")
    p.add_argument("--duration", type=float, default=0.5, help="closed-loop horizon [s] at 1 kHz")
    p.add_argument("--devices", type=int, default=2, help="XLA host devices per run")
    p.add_argument("--tolerance", type=float, default=1e-6, help="rad: a lane further from the reference is bad")
    p.add_argument("--stride", type=int, default=5, help="samples between compared angles")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the table and per-run details here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--inputs", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- child: one run in a fresh process -----------------------------------------------------------


def _configure(args) -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    flags += f" --xla_force_host_platform_device_count={args.devices}"
    if args.child == "two_link" and args.variant in ("256", "512"):
        flags += f" --{WIDTH}={args.variant}"
    os.environ["XLA_FLAGS"] = flags.strip()


def _digests(arrays, batch: int):
    import hashlib

    import numpy as np

    out = []
    for i in range(batch):
        h = hashlib.blake2b(digest_size=8)
        for a in arrays:
            h.update(np.ascontiguousarray(a[i]).tobytes())
        out.append(h.hexdigest())
    return np.asarray(out)


def _summary(arrays, q, status, batch: int, stride: int):
    import numpy as np

    finite = np.ones(batch, dtype=bool)
    for a in arrays:
        if np.issubdtype(a.dtype, np.floating):
            finite &= np.isfinite(a.reshape(batch, -1)).all(axis=1)
    return dict(digest=_digests(arrays, batch), finite=finite, status=np.asarray(status), q=q[:, ::stride])


def child_two_link(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    import jaxid

    rng = np.random.default_rng(args.seed)
    nominal = jaxid.table1()
    factors = 1 + args.spread * rng.uniform(-1, 1, (3, args.batch, 2))
    arms = jax.vmap(lambda m, j, f: jaxid.table1(masses=m, inertias=j, friction=f))(
        jnp.asarray(nominal.masses * factors[0]),
        jnp.asarray(nominal.inertias * factors[1]),
        jnp.asarray(nominal.friction * factors[2]),
    )
    excitation = jaxid.table2(args.lines, scale=args.scale)
    options = dict(sample_step=0.01, measured_periods=1, discard_periods=None, chunk_size=args.chunk_size)
    compiled_with = dict(jaxid.simulation.batch.compiler_options())
    t0 = time.perf_counter()
    records = [jax.block_until_ready(jaxid.simulate_batch(arms, excitation, **options)) for _ in range(2)]
    seconds = time.perf_counter() - t0
    out = []
    for rec in records:
        arrays = [np.asarray(x) for x in (rec.q, rec.tau, rec.status, rec.steady_change)]
        out.append(_summary(arrays, arrays[0], arrays[2], args.batch, args.stride))
    return out, dict(compiled_with=compiled_with, seconds=seconds, samples=int(records[0].q.shape[1]))


def _rebuilt_runner(compiler_options: dict | None, unrolled: bool):
    """``jaxid.simulation.closed_loop_batch._runner`` rebuilt with ``compiler_options`` and the chosen dynamics path."""
    import functools

    import jax
    import numpy as np

    from jaxid.simulation import closed_loop_kernel

    @functools.lru_cache(maxsize=8)
    def runner(static_items, ndev, chunk, noisy):
        static = dict(static_items)

        def local(arms, keys, initial_states, reference, controller, noise, limits):
            def one(trial):
                arm, key, y0 = trial
                return closed_loop_kernel._closed_loop(
                    arm, reference, controller, noise, limits, key if noisy else None, y0, unrolled=unrolled, **static
                )

            return jax.lax.map(one, (arms, keys, initial_states), batch_size=chunk)

        if ndev > 1:
            mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
            spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
            local = jax.shard_map(
                local,
                mesh=mesh,
                in_specs=(spec, spec, spec, shared, shared, shared, shared),
                out_specs=spec,
                check_vma=False,
            )
        return jax.jit(local, compiler_options=compiler_options)

    return runner


def _panda():
    from jaxid.model.urdf import load_arm

    return load_arm(str(PANDA), fixed_joints=FINGERS)


def closed_loop_inputs(args, path: str) -> None:
    """The shared torque table and initial states, computed once (in a child) and saved to ``path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from jaxid.excitation.fourier import random_fourier_trajectory
    from jaxid.simulation.closed_loop import simulate_closed_loop
    from jaxid.simulation.controllers import PDController

    arm = _panda()
    reference = random_fourier_trajectory(arm, 5, 10.0, key=jax.random.key(args.seed))
    closed = simulate_closed_loop(
        arm, reference, PDController.tuned(arm, reference), duration=args.duration, sample_step=1e-3
    )
    rng = np.random.default_rng(args.seed)
    start = np.asarray(reference.initial_state())
    initial = start + 1e-6 * rng.standard_normal((args.closed_batch, 2, arm.dof))
    initial[0] = start
    np.savez(path, torques=np.asarray(closed.tau_command), initial=initial)


def child_closed_loop(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from jaxid.excitation.fourier import random_fourier_trajectory
    from jaxid.simulation import closed_loop_batch
    from jaxid.simulation.closed_loop_batch import simulate_closed_loop_batch
    from jaxid.simulation.controllers import OpenLoop

    inputs = np.load(args.inputs)
    unrolled = args.closed_path == "fast"
    options = {WIDTH: "512"} if args.variant == "512" else None
    if options or not unrolled:
        closed_loop_batch._runner = _rebuilt_runner(options, unrolled)
    arm = _panda()
    reference = random_fourier_trajectory(arm, 5, 10.0, key=jax.random.key(args.seed))
    controller = OpenLoop(inputs["torques"], 1e-3)
    t0 = time.perf_counter()
    records = [
        jax.block_until_ready(
            simulate_closed_loop_batch(
                arm,
                reference,
                controller,
                duration=args.duration,
                sample_step=1e-3,
                initial_states=inputs["initial"],
                chunk_size=args.closed_chunk,
            )
        )
        for _ in range(2)
    ]
    seconds = time.perf_counter() - t0
    out = []
    for rec in records:
        arrays = [np.asarray(x) for x in (rec.q, rec.qd, rec.tau_command, rec.status)]
        out.append(_summary(arrays, arrays[0], arrays[3], args.closed_batch, args.stride))
    return out, dict(compiled_with=options or {}, seconds=seconds, samples=int(records[0].q.shape[1]))


def child(args) -> None:
    _configure(args)
    import numpy as np

    if args.child == "inputs":
        closed_loop_inputs(args, args.out)
        return
    out, info = (child_two_link if args.child == "two_link" else child_closed_loop)(args)
    import jax

    info.update(devices=len(jax.devices()), xla_flags=os.environ["XLA_FLAGS"])
    first, second = out
    np.savez(
        args.out,
        **first,
        same_process=np.all(first["digest"] == second["digest"]),
        info=json.dumps(info),
    )


# -- parent: fresh processes, comparison, table ----------------------------------------------------


def _run_child(args, check: str, variant: str, out: str, inputs: str | None = None) -> None:
    cmd = [sys.executable, __file__, "--child", check, "--variant", variant, "--out", out]
    for name in ("batch", "chunk_size", "lines", "scale", "spread", "closed_batch", "closed_chunk", "closed_path"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    cmd += ["--duration", str(args.duration), "--devices", str(args.devices), "--stride", str(args.stride)]
    cmd += ["--seed", str(args.seed)]
    if inputs:
        cmd += ["--inputs", inputs]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run(cmd, check=True, env=env)


def _label(run) -> str:
    """What set the vector width of a run: the compiler options, else the ``XLA_FLAGS`` width, else none."""
    if run["compiled_with"]:
        return f"compiler_options {run['compiled_with']}"
    flag = [f for f in run["xla_flags"].split() if WIDTH in f]
    return f"XLA_FLAGS {flag[0]}" if flag else "XLA default"


def _compare(run, ref, tolerance: float):
    import numpy as np

    deviation = np.abs(run["q"] - ref["q"]).reshape(len(run["status"]), -1)
    deviation = np.where(np.isnan(deviation), np.inf, deviation).max(axis=1)
    bad = (run["status"] != 0) | ~run["finite"] | (deviation > tolerance)
    finite_dev = deviation[np.isfinite(deviation)]
    return dict(
        bad=np.flatnonzero(bad).tolist(),
        bitwise=bool(np.all(run["digest"] == ref["digest"])),
        differing_trials=int(np.sum(run["digest"] != ref["digest"])),
        max_deviation=float(finite_dev.max()) if finite_dev.size else float("nan"),
        statuses={int(s): int(c) for s, c in zip(*np.unique(run["status"], return_counts=True), strict=True)},
    )


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        child(args)
        return
    import numpy as np

    checks = [c for c in args.checks.split(",") if c]
    plan = {}
    for check in checks:
        if check not in VARIANTS:
            raise SystemExit(f"unknown check {check!r}; choose from {list(VARIANTS)}")
        if check == "two_link":
            variants = [v for v in args.two_link_variants.split(",") if v]
            if any(v not in VARIANTS[check] for v in variants):
                raise SystemExit(f"two-link variants are {VARIANTS[check]}, got {variants}")
            plan[check] = (variants, args.runs, args.batch)
        else:
            plan[check] = (list(VARIANTS[check]), args.closed_runs, args.closed_batch)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"{args.devices} XLA host devices; tolerance {args.tolerance:g} rad",
        flush=True,
    )
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for check, (variants, runs, batch) in plan.items():
            inputs = None
            if check == "closed_loop":
                inputs = os.path.join(tmp, "inputs.npz")
                _run_child(args, "inputs", "none", inputs)
            ref, firsts, per = None, {}, {v: [] for v in variants}
            for r in range(runs):
                for v in variants:  # alternating
                    out = os.path.join(tmp, f"{check}-{v}-{r}.npz")
                    t0 = time.perf_counter()
                    _run_child(args, check, v, out, inputs)
                    wall = time.perf_counter() - t0
                    with np.load(out) as f:
                        run = {k: f[k] for k in f.files}
                    os.remove(out)
                    if ref is None:
                        ref = run
                    firsts.setdefault(v, run)
                    info = json.loads(str(run["info"]))
                    cmp = _compare(run, ref, args.tolerance)
                    cmp.update(
                        own_first=bool(np.all(run["digest"] == firsts[v]["digest"])),
                        same_process=bool(run["same_process"]),
                        wall=round(wall, 1),
                        **info,
                    )
                    per[v].append(cmp)
                    lanes = cmp["bad"]
                    print(
                        f"{check:11s} {v:7s} run {r + 1:2d}/{runs}: bad lanes {len(lanes)}"
                        f"{' ' + str(lanes[:16]) + (' mod 8: ' + str(sorted({i % 8 for i in lanes}))) if lanes else ''}"
                        f", = reference {cmp['bitwise']} ({cmp['differing_trials']} trials differ, "
                        f"max |dq| {cmp['max_deviation']:.1e}), = own first {cmp['own_first']}, "
                        f"same process {cmp['same_process']}, statuses {cmp['statuses']}, options {info['compiled_with']}, "
                        f"{wall:.0f} s",
                        flush=True,
                    )
            results[check] = per
            for v in variants:
                rs = per[v]
                rows.append(
                    dict(
                        check=check,
                        variant=v,
                        options=_label(rs[0]),
                        runs=len(rs),
                        trials=len(rs) * batch,
                        bad_lanes=sum(len(c["bad"]) for c in rs),
                        runs_with_bad=sum(bool(c["bad"]) for c in rs),
                        equal_reference=sum(c["bitwise"] for c in rs),
                        equal_own_first=sum(c["own_first"] for c in rs),
                        same_process=sum(c["same_process"] for c in rs),
                        max_deviation=max(c["max_deviation"] for c in rs),
                        seconds=float(np.median([c["seconds"] for c in rs])),
                    )
                )
    print()
    header = (
        "| check | variant | options | runs | trials | bad lanes (runs) | = reference | = own 1st run | "
        "same-process repeat equal | max abs dq vs reference [rad] | median s (compile + 2 calls) |"
    )
    print(header)
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in rows:
        print(
            f"| {w['check']} | {w['variant']} | {w['options'] or '-'} | {w['runs']} | {w['trials']} | "
            f"{w['bad_lanes']} ({w['runs_with_bad']}) | {w['equal_reference']}/{w['runs']} | "
            f"{w['equal_own_first']}/{w['runs']} | {w['same_process']}/{w['runs']} | {w['max_deviation']:.1e} | {w['seconds']:.1f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), rows=rows, runs=results), f, indent=1, default=str)
    if any(w["bad_lanes"] or w["equal_own_first"] < w["runs"] or w["same_process"] < w["runs"] for w in rows):
        print("FAILED: bad lanes or run-to-run differences (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
