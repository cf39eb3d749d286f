"""Throughput of batched N-joint simulation: jaxid's ``simulate_closed_loop_batch`` against MuJoCo's
batched ``mujoco.rollout`` on the Franka Panda, float64, measured in the same run.

MuJoCo's rollout takes open-loop controls, so the like-for-like comparison drives both with the same
precomputed torque sequence: the commanded torques of one jaxid closed-loop run (PD with the
model's feed-forward, default gains, zero-order hold at the sample rate, tracking a random feasible
Fourier reference), applied open-loop (jaxid: ``OpenLoop`` with ``control="hold"``; MuJoCo:
``qfrc_applied``) from ``--batch`` initial states perturbed around the reference's (``--perturbation``
rad and rad/s; trial 0 unperturbed), over a short horizon where the arm stays near the reference.
Both step the same RK4 (MuJoCo ``mjINT_RK4``; jaxid ``rk4_step``, one step per sample) at the same
step, torque held over each step, contacts and joint limits off (MuJoCo ``mjDSBL_CONSTRAINT``). The
jaxid closed-loop run itself (controller in the loop) is timed as well.

The same integrator work on both sides: four evaluations of the forward dynamics per step (MuJoCo:
kinematics, composite rigid body mass matrix, its LDLᵀ factorisation and recursive Newton–Euler
bias forces at each RK4 stage; jaxid: recursive Newton–Euler bias forces, composite rigid body mass
matrix and a Cholesky solve), the same URDF dynamics (MuJoCo reads the URDF's joint ``damping``, jaxid
its viscous friction; armature zero in both; MuJoCo's friction loss and jaxid's Coulomb friction
zero, though jaxid still evaluates its smooth sign), float64 both, one step per sample. MuJoCo's
rollout has no controller in the loop, so the ratio is taken on the open-loop replay; the jaxid
closed-loop run (PD with the model's feed-forward, whose reference terms are shared by the batch)
is reported beside it.

Reported: compile time (apart: first call minus the median run; MuJoCo's is its warm-up), run time
(median of ``--repeats``, the three runs alternating, so a change of the shared machine's load hits
all of them), trajectories/s and steps/s, **the speed ratio jaxid/MuJoCo as the median of the
per-repeat ratios** (with their range), and the accuracy beside it: the largest difference of the
joint angles and velocities between the two over the horizon and at its end, and between jaxid's
open-loop replay of trial 0 and the closed-loop run it replays (the same discrete dynamics). Writes
nothing.

On a CPU jaxid splits the batch over the cores exposed as XLA host devices (set below, before jax is
imported); MuJoCo's rollout gets one ``MjData`` per thread (``nthread = os.cpu_count()``).

    python scripts/bench_closed_loop.py                          # batch 1024, 0.5 s at 1 kHz, 5 repeats
    python scripts/bench_closed_loop.py --batch 64 --duration 0.2 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PANDA = ROOT / "data" / "robots" / "panda.urdf"
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024, help="trajectories per batch")
    p.add_argument("--duration", type=float, default=0.5, help="horizon [s]")
    p.add_argument("--sample-step", type=float, default=1e-3, help="step = sample step [s]")
    p.add_argument("--harmonics", type=int, default=5)
    p.add_argument("--period", type=float, default=10.0, help="reference period [s]")
    p.add_argument("--perturbation", type=float, default=1e-6, help="initial-state spread [rad, rad/s]")
    p.add_argument("--devices", type=int, default=None, help="XLA host devices (default: CPU count)")
    p.add_argument("--threads", type=int, default=None, help="MuJoCo threads (default: CPU count)")
    p.add_argument("--chunk-size", type=int, default=256, help="jaxid trials per vmap on a device")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _set_host_devices(devices: int | None) -> None:
    if "jax" in sys.modules:
        return
    n = devices or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


def mujoco_model(step: float):
    """MuJoCo's model of the same URDF: meshes stripped, fingers fixed, constraints (contacts, joint
    limits, friction loss) disabled, gravity −9.81 along z, RK4 at ``step``."""
    import mujoco

    root = ET.parse(PANDA).getroot()
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for element in link.findall(tag):
                link.remove(element)
    for joint in root.iter("joint"):
        if joint.get("name") in FINGERS:
            joint.set("type", "fixed")
    extension = ET.SubElement(root, "mujoco")
    ET.SubElement(extension, "compiler", discardvisual="true", fusestatic="false")
    model = mujoco.MjModel.from_xml_string(ET.tostring(root, encoding="unicode"))
    model.opt.gravity[:] = (0.0, 0.0, -9.81)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    model.opt.timestep = step
    return model


def main(argv=None):
    args = parse_args(argv)
    _set_host_devices(args.devices)
    import jax

    jax.config.update("jax_enable_x64", True)
    import mujoco
    import mujoco.rollout
    import numpy as np

    import jaxid
    from jaxid.excitation.fourier import random_fourier_trajectory
    from jaxid.model.urdf import load_arm
    from jaxid.simulation.closed_loop import simulate_closed_loop
    from jaxid.simulation.closed_loop_batch import simulate_closed_loop_batch
    from jaxid.simulation.controllers import OpenLoop, PDController

    step, batch = args.sample_step, args.batch
    threads = args.threads or os.cpu_count() or 1
    arm = load_arm(PANDA, fixed_joints=FINGERS)
    n = arm.dof
    reference = random_fourier_trajectory(arm, args.harmonics, args.period, key=jax.random.key(args.seed))
    controller = PDController.tuned(arm, reference)
    print(
        f"Panda ({n} joints), float64, batch {batch}, horizon {args.duration} s at {step * 1e3:g} ms "
        f"({round(args.duration / step)} RK4 steps), jax {jax.__version__} on {len(jax.devices())} "
        f"{jax.devices()[0].platform} device(s), MuJoCo {mujoco.__version__} on {threads} thread(s), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )

    # The torque sequence: one jaxid closed-loop run on the reference (PD + feed-forward, hold).
    closed = simulate_closed_loop(arm, reference, controller, duration=args.duration, sample_step=step)
    torques = np.asarray(closed.tau_command)
    steps = torques.shape[0]
    tracking = float(np.max(np.abs(np.asarray(closed.q) - np.asarray(closed.q_reference))))
    print(f"closed loop: status {jaxid.Status.label(closed.status)}, tracking error {tracking:.2e} rad", flush=True)

    rng = np.random.default_rng(args.seed)
    start = np.asarray(reference.initial_state())
    initial = start + args.perturbation * rng.standard_normal((batch, 2, n))
    initial[0] = start

    def jaxid_run(ctrl):
        rec = simulate_closed_loop_batch(
            arm,
            reference,
            ctrl,
            duration=args.duration,
            sample_step=step,
            initial_states=initial,
            chunk_size=args.chunk_size,
        )
        return jax.block_until_ready(rec)

    # MuJoCo: the same torques as qfrc_applied, the same initial states.
    model = mujoco_model(step)
    data = [mujoco.MjData(model) for _ in range(threads)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(model, spec)
    states0 = np.empty((batch, nstate))
    scratch = mujoco.MjData(model)
    for i in range(batch):
        scratch.qpos[:] = initial[i, 0]
        scratch.qvel[:] = initial[i, 1]
        scratch.time = 0.0
        mujoco.mj_getState(model, scratch, states0[i], spec)
    control = torques[None]  # (1, N, nv): shared by the batch

    def mujoco_run():
        state, _ = mujoco.rollout.rollout(
            model, data, states0, control, control_spec=mujoco.mjtState.mjSTATE_QFRC_APPLIED, nstep=steps
        )
        return state

    runs = {
        "jaxid open loop (OpenLoop, hold)": lambda: jaxid_run(OpenLoop(torques, step)),
        "jaxid closed loop (PD + feed-forward)": lambda: jaxid_run(controller),
        f"MuJoCo rollout ({threads} threads)": mujoco_run,
    }
    first, outputs = {}, {}
    for name, run in runs.items():  # compile (jaxid) or warm up (MuJoCo)
        t0 = time.perf_counter()
        outputs[name] = run()
        first[name] = time.perf_counter() - t0
    # The three alternate in every repeat, so a change of the shared machine's load hits all of them.
    times = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    mujoco_name = list(runs)[-1]
    median = {name: float(np.median(t)) for name, t in times.items()}
    rows = [(name, max(first[name] - median[name], 0.0), median[name]) for name in runs]
    ratios = {name: np.asarray(times[mujoco_name]) / np.asarray(t) for name, t in times.items()}
    replay, state = outputs[list(runs)[0]], outputs[mujoco_name]

    # Accuracy: MuJoCo's state k is after step k + 1, jaxid's sample k at t_k. Trials that left the
    # reference far enough to diverge (open loop, a long horizon or a large perturbation) are counted
    # and left out.
    nq = model.nq
    mj_q, mj_qd = state[:, :, 1 : 1 + nq], state[:, :, 1 + nq : 1 + nq + model.nv]
    q, qd = np.asarray(replay.q), np.asarray(replay.qd)
    ok = (np.asarray(replay.status) == 0) & np.all(np.isfinite(state), axis=(1, 2))
    diff_q = np.abs(q[ok, 1:] - mj_q[ok, :-1])
    diff_qd = np.abs(qd[ok, 1:] - mj_qd[ok, :-1])
    replay_vs_closed = max(
        float(np.max(np.abs(q[0] - np.asarray(closed.q)))), float(np.max(np.abs(qd[0] - np.asarray(closed.qd))))
    )
    drift = float(np.max(np.abs(q[ok] - np.asarray(closed.q_reference)[None])))

    print()
    print(f"{'':40s} {'compile s':>9s} {'run s':>8s} {'traj/s':>9s} {'steps/s':>10s} {'vs MuJoCo':>9s} {'range':>13s}")
    for name, compile_s, run_s in rows:
        rate = batch / run_s
        r = ratios[name]
        print(
            f"{name:40s} {compile_s:9.2f} {run_s:8.3f} {rate:9.1f} {rate * steps:10.3g} {np.median(r):8.2f}x "
            f"{r.min():5.2f}-{r.max():5.2f}x"
        )
    print(
        f"(run s, traj/s: median of {args.repeats} alternating repeats; vs MuJoCo: median of the per-repeat "
        "speed ratios, range: their smallest and largest; compile: first call minus the median run)"
    )
    print()
    print(
        f"jaxid vs MuJoCo, open loop, {int(ok.sum())}/{batch} trials that stayed finite in both: "
        f"max |dq| {diff_q.max():.2e} rad, max |dq'| {diff_qd.max():.2e} rad/s over the horizon; "
        f"at the end {diff_q[:, -1].max():.2e} rad, {diff_qd[:, -1].max():.2e} rad/s"
    )
    print(f"jaxid open-loop replay of trial 0 vs the closed-loop run it replays: {replay_vs_closed:.2e}")
    print(f"largest distance from the reference in the open-loop batch: {drift:.2e} rad")
    print(f"load average {os.getloadavg()[0]:.1f}")
    replay_name, closed_name = list(runs)[:2]
    print(
        f"\nSUMMARY jaxid/MuJoCo speed (median of {args.repeats}): open loop {np.median(ratios[replay_name]):.2f}x, "
        f"closed loop {np.median(ratios[closed_name]):.2f}x; agreement {diff_q.max():.1e} rad, {diff_qd.max():.1e} rad/s"
    )
    return rows


if __name__ == "__main__":
    main()
