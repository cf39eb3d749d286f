"""Time per trial of the N-joint benchmark (``jaxid run benchmark_ur5``) beside a plain numpy/Pinocchio
loop doing the same work, float64, measured in the same run on the same trial definition.

The trial is the benchmark's (``jaxid.benchmark.trial``): the setting ``--setting`` of
``experiments/benchmark_ur5.toml`` (default ``consistency_rich``: the UR5 URDF with rotor inertias and
added viscous and Coulomb friction, a random feasible 5-harmonic Fourier reference of 5 s, PD with the
nominal model's feed-forward at 10 Hz, zero-order hold at Δ = 2 ms with one RK4 step per sample, angle,
velocity and torque noise from the trial's key, a 10-Hz zero-phase filter, IDIM-LS on the 58 base
parameters). Both sides take from ``make_plan``: the arm's numbers (inertial parameters, armature,
friction, Coulomb slope), the reference's coefficients, the controller gains, the base columns, and
the trial's noise (drawn by ``jaxid.simulation.closed_loop_record.measurement_noise`` from the trial's key, outside the
numpy timing: the three normal draws a numpy user would make cost about 0.3 ms a trial, reported).

- **jaxid** (as the benchmark runs it): ``simulate_trials`` on a batch of ``--batches`` trials in one
  compiled call, then the benchmark's batched IDIM-LS on the same batch (``jaxid.benchmark.batched``:
  ``filter_signals`` on all trials at once, the parallel-filtered regressor rows and ``ls_kernel`` in
  one compiled program); per trial = call time / batch; the first calls, which compile, are reported
  apart.
- **numpy/Pinocchio** (what a BIRDy/FIGAROH user writes): per trial a Python loop over the samples, the
  reference evaluated on the grid with numpy, per sample the PD law with the feed-forward
  ``pinocchio.rnea`` of the nominal model and one classic RK4 step (four ``pinocchio.aba`` of the
  true model, armature in ``model.armature``, friction ``fv q' + fc (2/π) atan(slope q')`` subtracted
  from the torque); then ``scipy.signal.sosfiltfilt`` (order-4 Butterworth) and ``numpy.gradient`` for
  q, q', q'', ``pinocchio.computeJointTorqueRegressor`` at every sample plus the armature, friction and
  offset columns, the base columns of jaxid's plan, the same parallel low-pass of the regressor and
  torque, the same row decimation and trim, and IDIM-LS by ``numpy.linalg.lstsq`` (ordinary, then
  weighted by each joint's residual std) with its covariance and the condition number.
- **numpy/Pinocchio, pruned** (rows "… vs pruned numpy"): the same, low-passing only the regressor
  entries jaxid's batched program low-passes (not identically zero, one of each set equal up to sign:
  123 of the UR5's 348 base-column entries), so that this pruning is not counted as jaxid's speed.

Accuracy beside speed: the largest angle difference of the two simulations of trial 0 (same noise) and
the two IDIM-LS estimates (each side on its own log), relative and in units of IDIM-LS's std; plus the
numpy fit on jaxid's log (the regressor and fit alone); and the batched IDIM-LS against jaxid's
trial-by-trial one (``filter_log`` then ``idim_ls``) on the first ``--check`` trials (largest relative
difference). Peak memory: the process's peak resident set after each batch size's first call
(``ru_maxrss``; batches run in increasing size, so the largest batch's figure is its own).

Every repeat runs the timings one after the other (per jaxid batch: closed loop and IDIM-LS; a numpy
trial, numpy IDIM-LS), so a change of the shared machine's load hits both sides; the figures are medians over
``--repeats`` and the ratios the medians of the per-repeat ratios. jaxid's batch is split over the
CPU cores as XLA host devices, as ``jaxid run`` does (set before jax is imported); Pinocchio runs on
one thread; numpy's BLAS (the least squares of both sides) on ``--blas-threads`` (default 1: on a
shared 2-core machine OpenBLAS's default of one thread per core made the 1128 × 58 SVD and ``lstsq``
of IDIM-LS take seconds instead of milliseconds, on both sides). Writes ``results/bench_benchmark_trial/summary.json`` and ``summary.csv`` (``--out``).

    python scripts/bench_benchmark_trial.py                       # batch 100 and 1000, 3 repeats
    python scripts/bench_benchmark_trial.py --batches 10 --repeats 3 --out ''
    python scripts/bench_benchmark_trial.py --blas-threads 0       # numpy's BLAS at its default threads

Needs ``pip install pin`` (Pinocchio; not a jaxid dependency).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path


def _blas_threads_before_numpy() -> None:
    """``--blas-threads`` (default 1; 0: the library's default) into ``OPENBLAS_NUM_THREADS`` and
    ``MKL_NUM_THREADS``, which numpy reads when first imported (a value already in the environment wins)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--blas-threads", type=int, default=1)
    threads = p.parse_known_args()[0].blas_threads
    if threads > 0:
        for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, str(threads))


if __name__ == "__main__":
    _blas_threads_before_numpy()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "experiments" / "benchmark_ur5.toml"
URDF = ROOT / "data" / "robots" / "ur5_robot.urdf"
#: jaxid's link parameters are ``m mx my mz Ixx Ixy Ixz Iyy Iyz Izz``; Pinocchio's dynamic parameters
#: ``m mx my mz Ixx Ixy Iyy Ixz Iyz Izz`` (both about the joint frame): jaxid column k is Pinocchio's PERM[k].
PERM = (0, 1, 2, 3, 4, 5, 7, 6, 8, 9)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", default="consistency_rich", help="setting of the benchmark config")
    p.add_argument("--config", default=str(CONFIG), help="benchmark TOML")
    p.add_argument("--batches", type=int, nargs="+", default=[100, 1000], help="jaxid trials per call, increasing")
    p.add_argument("--repeats", type=int, default=3, help="alternating repeats (one numpy trial each)")
    p.add_argument("--check", type=int, default=3, help="trials whose batched IDIM-LS is checked trial by trial")
    p.add_argument("--devices", type=int, default=None, help="XLA host devices (default: CPU count)")
    p.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="numpy's BLAS threads, both sides' least squares (0: the library's default, one per core)",
    )
    p.add_argument("--out", default=str(ROOT / "results" / "bench_benchmark_trial"), help="'' writes nothing")
    return p.parse_args(argv)


def _set_host_devices(devices: int | None) -> None:
    if "jax" in sys.modules:
        return
    n = devices or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if n > 1 and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


# -- the numpy/Pinocchio side (no jaxid, no jax) -------------------------------------------------------


def pinocchio_models(urdf, armature, viscous, coulomb, slope):
    """``(model, data, friction)``: Pinocchio's model of the URDF with the rotor inertias in
    ``model.armature`` and the friction law ``friction(qd)`` [N m] (smooth sign, jaxid's)."""
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(urdf))
    model.armature = np.asarray(armature, dtype=float)
    viscous, coulomb = np.asarray(viscous, dtype=float), np.asarray(coulomb, dtype=float)

    def friction(qd):
        return viscous * qd + coulomb * (2 / np.pi) * np.arctan(slope * qd)

    return model, model.createData(), friction


def fourier_reference(offset, a, b, period, t):
    """``(q, q', q'')_ref`` at the times ``t`` ``(N,)``, each ``(N, n)`` (Swevers' series, numpy)."""
    w = 2 * np.pi / period * np.arange(1, a.shape[1] + 1)
    s, c = np.sin(t[:, None] * w), np.cos(t[:, None] * w)
    q = offset + s @ (a / w).T - c @ (b / w).T
    qd = c @ a.T + s @ b.T
    qdd = c @ (b * w).T - s @ (a * w).T
    return q, qd, qdd


def numpy_closed_loop(model, data, friction, reference, kp, kd, noise, sample_step):
    """One closed-loop trial as a Pinocchio user writes it: ``N`` samples, zero-order hold of the PD
    command with the nominal model's feed-forward (``pinocchio.rnea``; the nominal model is ``model``
    without friction), one RK4 step per sample on the true model (``pinocchio.aba`` on the torque less
    ``friction``). ``reference``: ``(offset, a, b, period)``; ``noise``: three ``(N, n)`` arrays (angle,
    velocity, torque). Returns ``(q, qd, tau_command, tau)``, the measured log, each ``(N, n)``."""
    import pinocchio as pin

    noise_q, noise_qd, noise_tau = noise
    samples, n = noise_q.shape
    h = sample_step
    q_ref, qd_ref, qdd_ref = fourier_reference(*reference, np.arange(samples) * h)
    q, qd = q_ref[0].copy(), qd_ref[0].copy()
    log_q, log_qd, log_tau = np.empty((samples, n)), np.empty((samples, n)), np.empty((samples, n))

    def acc(q, qd, tau):
        return pin.aba(model, data, q, qd, tau - friction(qd)).copy()

    for k in range(samples):
        qm, qdm = q + noise_q[k], qd + noise_qd[k]
        tau = kp * (q_ref[k] - qm) + kd * (qd_ref[k] - qdm) + pin.rnea(model, data, q_ref[k], qd_ref[k], qdd_ref[k])
        log_q[k], log_qd[k], log_tau[k] = qm, qdm, tau
        a1 = acc(q, qd, tau)
        v2 = qd + 0.5 * h * a1
        a2 = acc(q + 0.5 * h * qd, v2, tau)
        v3 = qd + 0.5 * h * a2
        a3 = acc(q + 0.5 * h * v2, v3, tau)
        v4 = qd + h * a3
        a4 = acc(q + h * v3, v4, tau)
        q = q + (h / 6) * (qd + 2 * (v2 + v3) + v4)
        qd = qd + (h / 6) * (a1 + 2 * (a2 + a3) + a4)
    if not np.all(np.isfinite(log_q)):
        raise FloatingPointError("the numpy closed loop diverged")
    return log_q, log_qd, log_tau, log_tau + noise_tau


def numpy_regressor(model, data, q, qd, qdd, standard, slope):
    """``Y (N, n, len(standard))``: the columns ``standard`` of jaxid's ``14 n`` standard regressor
    (``m1 … Izz1, …, Ia1…, fv1…, fc1…, off1…``) built from ``pinocchio.computeJointTorqueRegressor`` at
    every sample plus the armature (q''), viscous (q'), Coulomb (smooth sign) and offset (1) columns."""
    import pinocchio as pin

    samples, n = q.shape
    full = np.zeros((samples, n, 14 * n))
    perm = np.concatenate([10 * j + np.asarray(PERM) for j in range(n)])
    for k in range(samples):
        full[k, :, : 10 * n] = pin.computeJointTorqueRegressor(model, data, q[k], qd[k], qdd[k])[:, perm]
    joints = np.arange(n)
    for block, values in enumerate((qdd, qd, (2 / np.pi) * np.arctan(slope * qd), np.ones_like(qd))):
        full[:, joints, 10 * n + block * n + joints] = values
    return full[:, :, list(standard)]


def numpy_idim_ls(
    model, data, q_measured, tau_measured, sample_step, cutoff_hz, trim_s, standard, slope, distinct=None
):
    """IDIM-LS as ``jaxid.estimate.logs.idim_ls`` does it, in numpy/scipy/Pinocchio: Butterworth (order 4,
    ``sosfiltfilt``) and ``numpy.gradient`` for q, q', q''; the torque low-passed; the regressor and the
    torque low-passed again (parallel filtering); rows every ``⌊f_s / (4 f_c)⌋`` samples of the log less
    ``trim_s`` at each end; ``lstsq`` on unit-norm columns, then again with each joint's rows divided by
    its residual std. Returns ``(theta, covariance, condition)``. ``distinct = (keep, index, sign)``: only
    the regressor entries ``keep`` (flat in ``(n, p)``) are low-passed, entry ``e`` is ``sign[e]`` times
    column ``index[e]`` of them (``len(keep)``: an exact zero), as jaxid's batched program prunes them."""
    from scipy import signal

    h = sample_step
    sos = signal.butter(4, cutoff_hz, btype="low", fs=1.0 / h, output="sos")

    def band(x):
        return signal.sosfiltfilt(sos, x, axis=0)

    qf = band(q_measured)
    qd = np.gradient(qf, h, axis=0)
    qdd = np.gradient(qd, h, axis=0)
    tau = band(tau_measured)
    trim = int(round(trim_s / h))
    rows = np.arange(trim, q_measured.shape[0] - trim, max(1, int(np.floor(1.0 / (h * 4 * cutoff_hz)))))
    full = numpy_regressor(model, data, qf, qd, qdd, standard, slope)
    if distinct is None:
        w = band(full)[rows]
    else:  # the distinct nonzero entries alone low-passed, as jaxid's batched program does
        keep, index, sign = distinct
        kept = band(full.reshape(full.shape[0], -1)[:, keep])[rows]
        w = (np.concatenate([kept, np.zeros((len(rows), 1))], axis=1)[:, index] * sign).reshape(
            len(rows), *full.shape[1:]
        )
    y = band(tau)[rows]
    p, joints = w.shape[-1], w.shape[1]
    scale = np.linalg.norm(w.reshape(-1, p), axis=0)
    x = np.linalg.lstsq((w / scale).reshape(-1, p), y.reshape(-1), rcond=None)[0]
    resid = y - np.einsum("njp,p->nj", w / scale, x)
    sigma = np.sqrt(np.sum(resid**2, axis=0) / (resid.shape[0] - p / joints))
    ws = (w / sigma[None, :, None]).reshape(-1, p)
    scale = np.linalg.norm(ws, axis=0)
    a = ws / scale
    x = np.linalg.lstsq(a, (y / sigma).reshape(-1), rcond=None)[0]
    theta = x / scale
    resid = y - np.einsum("njp,p->nj", w, theta)
    variance = np.sum((resid / sigma) ** 2) / max(a.shape[0] - p, 1)
    covariance = variance * np.linalg.inv(a.T @ a) / np.outer(scale, scale)
    s = np.linalg.svd(a, compute_uv=False)
    return theta, covariance, float(s[0] / s[-1])


# -- the run -----------------------------------------------------------------------------------------


def _threads() -> dict:
    out = {"cpu_count": os.cpu_count(), "xla_flags": os.environ.get("XLA_FLAGS", ""), "pinocchio_threads": 1}
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if name in os.environ:
            out[name] = os.environ[name]
    try:
        from threadpoolctl import threadpool_info

        out["blas"] = [f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info()]
    except ImportError:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        threads = os.environ.get("OPENBLAS_NUM_THREADS", "its default: one per core")
        out["blas"] = f"{blas['name']} {blas['version']}, threads {threads}"
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    _set_host_devices(args.devices)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import pinocchio as pin

    from jaxid.benchmark import load_benchmark, make_plan
    from jaxid.benchmark.batched import _entries_regressor, _nonzero, batched_fits
    from jaxid.benchmark.trial import _filtered, simulate_trials
    from jaxid.estimate.logs import idim_ls
    from jaxid.simulation.closed_loop_record import measurement_noise
    from jaxid.study.sampling import trial_key
    from jaxid.types import Status

    exp = load_benchmark(args.config).select([args.setting])
    setting = exp.settings[0]
    load = os.getloadavg()
    t0 = time.perf_counter()
    plan = make_plan(exp, setting)
    plan_seconds = time.perf_counter() - t0
    s = plan.setting
    h, duration = s["sample_step"], plan.duration
    if s["substeps"] != 1 or s["controller"] != "pd":
        raise SystemExit("the numpy loop mirrors substeps = 1 and the PD controller only")
    samples = int(round(duration / h))
    arm, true_arm = plan.nominal, plan.true_arm
    slope = true_arm.coulomb_slope
    standard = [plan.base.independent[i] for i in plan.columns]
    ref = plan.reference
    reference = (np.asarray(ref.offset), np.asarray(ref.a), np.asarray(ref.b), float(ref.period))
    kp, kd = np.asarray(plan.controller.kp), np.asarray(plan.controller.kd)
    model, data, friction = pinocchio_models(
        URDF, np.asarray(true_arm.armature), np.asarray(true_arm.viscous), np.asarray(true_arm.coulomb), slope
    )
    same_inertia = np.allclose(np.asarray(arm.armature), np.asarray(true_arm.armature))
    no_friction = all(np.all(np.asarray(x) == 0) for x in (arm.viscous, arm.coulomb, arm.offset, true_arm.offset))
    if not (same_inertia and no_friction):
        raise SystemExit("the numpy loop needs the nominal model = the true one less friction, and no offsets")

    def noise_of(trial):
        key = trial_key(exp.seed, s.name, trial)
        return tuple(np.asarray(x) for x in measurement_noise(plan.noise, key, samples, arm.dof))

    def jaxid_ls(run, index):
        logs = [_filtered(plan, run, index)]
        return idim_ls(logs, plan.regressor, plan.names)

    def jaxid_batched_ls(run, batch):
        plan.width = batch
        return batched_fits(plan, run, ("idim_ls",))

    def np_ls(q, tau):
        return numpy_idim_ls(model, data, q, tau, h, s["cutoff_hz"], s["trim_s"], standard, slope)

    # The entries jaxid's batched program low-passes (nonzero, one of each set equal up to sign), as
    # positions in the numpy side's (n, p) base regressor: a numpy baseline doing that pruning too.
    n_dof, p_base = arm.dof, len(standard)
    mask = np.zeros((n_dof, 14 * n_dof), dtype=bool)
    mask[:, standard] = True
    flat, index, sign, _ = _entries_regressor(arm, mask & _nonzero(arm))
    base_position = {j * 14 * n_dof + c: j * p_base + k for j in range(n_dof) for k, c in enumerate(standard)}
    keep = [base_position[int(flat[np.flatnonzero(index == d)[0]])] for d in range(int(index.max()) + 1)]
    pruned_index, pruned_sign = np.full(n_dof * p_base, len(keep)), np.zeros(n_dof * p_base)
    for e, position in enumerate(flat):
        pruned_index[base_position[int(position)]], pruned_sign[base_position[int(position)]] = index[e], sign[e]
    distinct = (np.asarray(keep), pruned_index, pruned_sign)

    def np_ls_pruned(q, tau):
        return numpy_idim_ls(model, data, q, tau, h, s["cutoff_hz"], s["trim_s"], standard, slope, distinct)

    def timed(f, *a):
        start = time.perf_counter()
        out = f(*a)
        return time.perf_counter() - start, out

    # Numpy's own draw of the noise, for the record (not in the loop's time).
    rng = np.random.default_rng(0)
    draw = min(timed(lambda: [rng.normal(size=(samples, arm.dof)) for _ in range(3)])[0] for _ in range(5))

    import resource

    results = {"batches": {}}
    first_run = {}
    jax.clear_caches()  # make_plan compiled the closed loop at the config's chunk: time the compiles below
    for batch in args.batches:
        plan.width = batch
        compile_call, run = timed(simulate_trials, plan, np.arange(batch))
        if np.any(run["status"] != Status.SUCCESS):
            raise SystemExit(f"jaxid: {int(np.sum(run['status'] != Status.SUCCESS))} trials diverged")
        ls_compile_call, fits = timed(jaxid_batched_ls, run, batch)
        first_run[batch] = (compile_call, run, fits)
        results["batches"][batch] = {
            "first_call_s": compile_call,
            "call_s": [],
            "ls_first_call_s": ls_compile_call,
            "ls_call_s": [],
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    run0 = first_run[args.batches[0]][1]
    ls_first, _ = timed(jaxid_ls, run0, 0)
    # The batched IDIM-LS against the trial-by-trial one on the first trials (each batch size).
    batched_vs_trial = {}
    for batch in args.batches:
        run_b, fits_b = first_run[batch][1], first_run[batch][2]
        worst = 0.0
        for k in range(min(args.check, batch)):
            one = np.asarray(jaxid_ls(run_b, k).value)
            worst = max(worst, float(np.linalg.norm(fits_b["ls_theta"][k] - one) / np.linalg.norm(one)))
        batched_vs_trial[batch] = worst
    # Numpy's first IDIM-LS (LAPACK and scipy's first calls) is its warm-up, reported apart; it also
    # gives the numpy fit on jaxid's log of trial 0 (the regressor and the fit alone).
    np_ls_first, (on_jaxid_log, _, _) = timed(np_ls, run0["q"][0], run0["tau"][0])

    rows = {"numpy_sim_s": [], "numpy_ls_s": [], "numpy_ls_pruned_s": [], "jaxid_ls_s": []}
    accuracy = {}
    for r in range(args.repeats):
        for batch in args.batches:
            plan.width = batch
            elapsed, run_b = timed(simulate_trials, plan, np.arange(batch))
            results["batches"][batch]["call_s"].append(elapsed)
            elapsed, _ = timed(jaxid_batched_ls, run_b, batch)
            results["batches"][batch]["ls_call_s"].append(elapsed)
            del run_b
        index = r % args.batches[0]
        noise = noise_of(index)
        elapsed, (q, qd, tau_command, tau) = timed(
            numpy_closed_loop, model, data, friction, reference, kp, kd, noise, h
        )
        rows["numpy_sim_s"].append(elapsed)
        elapsed, jx = timed(jaxid_ls, run0, index)
        rows["jaxid_ls_s"].append(elapsed)  # the trial-by-trial IDIM-LS, for the record
        elapsed, (theta, cov, cond) = timed(np_ls, q, tau)
        rows["numpy_ls_s"].append(elapsed)
        elapsed, (theta_pruned, _, _) = timed(np_ls_pruned, q, tau)
        rows["numpy_ls_pruned_s"].append(elapsed)
        if r == 0:
            std = np.sqrt(np.diag(np.asarray(jx.covariance)))
            theta_jx = np.asarray(jx.value)
            accuracy = {
                "trial": int(index),
                "max_angle_difference_rad": float(np.max(np.abs(q - run0["q"][0]))),
                "max_velocity_difference_rad_s": float(np.max(np.abs(qd - run0["qd"][0]))),
                "max_command_difference_Nm": float(np.max(np.abs(tau_command - run0["tau_command"][0]))),
                "idim_ls_relative_difference": float(np.linalg.norm(theta - theta_jx) / np.linalg.norm(theta_jx)),
                "idim_ls_max_difference_in_std": float(np.max(np.abs(theta - theta_jx) / std)),
                "idim_ls_same_log_relative_difference": float(
                    np.linalg.norm(on_jaxid_log - theta_jx) / np.linalg.norm(theta_jx)
                ),
                "idim_ls_same_log_max_difference_in_std": float(np.max(np.abs(on_jaxid_log - theta_jx) / std)),
                "idim_ls_numpy_pruned_relative_difference": float(
                    np.linalg.norm(theta_pruned - theta) / np.linalg.norm(theta)
                ),
                "condition_numpy": cond,
                "condition_jaxid": float(jx.condition),
                "idim_ls_rmse_vs_truth_jaxid": float(np.sqrt(np.mean(((theta_jx - plan.truth) / std) ** 2))),
                "idim_ls_rmse_vs_truth_numpy": float(np.sqrt(np.mean(((theta - plan.truth) / std) ** 2))),
            }
        print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)

    def row(stage, batch, jaxid_s, numpy_s, compile_s):
        ratios = [n / j for n, j in zip(numpy_s, jaxid_s, strict=True)]
        return {
            "stage": stage,
            "batch": batch,
            "jaxid_per_trial_s": float(np.median(jaxid_s)),
            "numpy_pinocchio_per_trial_s": float(np.median(numpy_s)),
            "numpy_over_jaxid": float(np.median(ratios)),
            "ratio_min": float(min(ratios)),
            "ratio_max": float(max(ratios)),
            "compile_s": compile_s,
        }

    table = []
    ls_compile = ls_first - float(np.median(rows["jaxid_ls_s"]))
    for batch, b in results["batches"].items():
        per_trial = [c / batch for c in b["call_s"]]
        compile_s = b["first_call_s"] - float(np.median(b["call_s"]))
        table.append(row("closed loop", batch, per_trial, rows["numpy_sim_s"], compile_s))
    table.append(row("IDIM-LS trial by trial", 1, rows["jaxid_ls_s"], rows["numpy_ls_s"], ls_compile))
    for batch, b in results["batches"].items():
        per_trial = [c / batch for c in b["ls_call_s"]]
        compile_s = b["ls_first_call_s"] - float(np.median(b["ls_call_s"]))
        table.append(row("IDIM-LS", batch, per_trial, rows["numpy_ls_s"], compile_s))
    for batch, b in results["batches"].items():
        jaxid_total = [(c + ls) / batch for c, ls in zip(b["call_s"], b["ls_call_s"], strict=True)]
        numpy_total = [a + b for a, b in zip(rows["numpy_sim_s"], rows["numpy_ls_s"], strict=True)]
        table.append(row("whole trial", batch, jaxid_total, numpy_total, None))
    # Against a numpy baseline that low-passes only the distinct nonzero entries, as jaxid does.
    for batch, b in results["batches"].items():
        per_trial = [c / batch for c in b["ls_call_s"]]
        table.append(row("IDIM-LS vs pruned numpy", batch, per_trial, rows["numpy_ls_pruned_s"], None))
    for batch, b in results["batches"].items():
        jaxid_total = [(c + ls) / batch for c, ls in zip(b["call_s"], b["ls_call_s"], strict=True)]
        numpy_total = [a + b for a, b in zip(rows["numpy_sim_s"], rows["numpy_ls_pruned_s"], strict=True)]
        table.append(row("whole trial vs pruned numpy", batch, jaxid_total, numpy_total, None))
    results.update(
        pruned_entries={"low_passed": len(keep), "base_entries": n_dof * p_base, "nonzero": int(len(flat))},
        setting=s.name,
        config=str(Path(args.config).resolve().relative_to(ROOT))
        if ROOT in Path(args.config).resolve().parents
        else args.config,
        samples=samples,
        sample_step=h,
        parameters=len(plan.names),
        repeats=args.repeats,
        plan_seconds=plan_seconds,
        table=table,
        jaxid_ls_first_call_s=ls_first,
        numpy_ls_first_call_s=np_ls_first,
        numpy_noise_draw_s=draw,
        seconds_per_repeat=rows,
        accuracy=accuracy,
        batched_vs_trial_by_trial_relative=batched_vs_trial,
        peak_rss_gib={batch: b["peak_rss_gib"] for batch, b in results["batches"].items()},
        targets={"whole trial": 10.0, "IDIM-LS": 3.0},
        threads=_threads(),
        devices=[str(d) for d in jax.devices()],
        load_average_start=list(load),
        load_average_end=list(os.getloadavg()),
        versions={
            "python": platform.python_version(),
            "jax": jax.__version__,
            "numpy": np.__version__,
            "pinocchio": pin.__version__,
        },
        float64=bool(jnp.zeros(()).dtype == jnp.float64),
        git_revision=_git_revision(),
    )
    _print(results)
    if args.out:
        _write(results, Path(args.out))
    return results


def _git_revision() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "jaxid"], cwd=ROOT).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + (" (jaxid/ has uncommitted changes)" if dirty else "")


def _print(res: dict) -> None:
    a = res["accuracy"]
    print(
        f"\n{res['setting']}: {res['samples']} samples of {res['sample_step'] * 1e3:g} ms, {res['parameters']} base "
        f"parameters, float64={res['float64']}, {len(res['devices'])} XLA devices, load "
        f"{res['load_average_start'][0]:.1f} -> {res['load_average_end'][0]:.1f}; medians of {res['repeats']} repeats"
    )
    print(f"make_plan (the benchmark's per-setting set-up, compiles the closed loop once): {res['plan_seconds']:.1f} s")
    head = ("stage", "batch", "jaxid/trial", "numpy+pin/trial", "numpy/jaxid", "(range)", "compile")
    print(f"{head[0]:<12} {head[1]:>5} {head[2]:>12} {head[3]:>16} {head[4]:>12} {head[5]:>13} {head[6]:>8}")
    for r in res["table"]:
        compile_s = "" if r["compile_s"] is None else f"{r['compile_s']:.1f} s"
        print(
            f"{r['stage']:<12} {r['batch']:>5} {r['jaxid_per_trial_s'] * 1e3:>9.2f} ms "
            f"{r['numpy_pinocchio_per_trial_s'] * 1e3:>13.1f} ms {r['numpy_over_jaxid']:>11.2f}x "
            f"{r['ratio_min']:>6.2f}-{r['ratio_max']:<6.2f} {compile_s:>8}"
        )
    print(
        f"first calls: jaxid IDIM-LS {res['jaxid_ls_first_call_s']:.2f} s, numpy IDIM-LS "
        f"{res['numpy_ls_first_call_s']:.2f} s; numpy's noise draw (outside its loop time) "
        f"{res['numpy_noise_draw_s'] * 1e3:.2f} ms/trial"
    )
    print(
        f"accuracy, trial {a['trial']}: max angle difference {a['max_angle_difference_rad']:.2e} rad (velocity "
        f"{a['max_velocity_difference_rad_s']:.2e} rad/s, command {a['max_command_difference_Nm']:.2e} N m); "
        f"IDIM-LS relative difference {a['idim_ls_relative_difference']:.2e} (largest "
        f"{a['idim_ls_max_difference_in_std']:.2e} std), on jaxid's log {a['idim_ls_same_log_relative_difference']:.2e}"
        f"; condition {a['condition_jaxid']:.6g} / {a['condition_numpy']:.6g}; numpy pruned (low-passing "
        f"{res['pruned_entries']['low_passed']} of {res['pruned_entries']['base_entries']} entries) vs numpy "
        f"{a['idim_ls_numpy_pruned_relative_difference']:.1e}"
    )
    print(
        "batched IDIM-LS vs trial by trial (largest relative difference): "
        + ", ".join(f"batch {b}: {v:.1e}" for b, v in res["batched_vs_trial_by_trial_relative"].items())
        + "; peak RSS after each batch's first call: "
        + ", ".join(f"batch {b}: {v:.2f} GiB" for b, v in res["peak_rss_gib"].items())
    )
    for r in res["table"]:
        target = res["targets"].get(r["stage"])
        if target is not None:
            met = "met" if r["numpy_over_jaxid"] >= target else "NOT met"
            print(f"target {r['stage']} >= {target:g}x at batch {r['batch']}: {r['numpy_over_jaxid']:.2f}x, {met}")
    print(f"threads: {res['threads']}")


def _write(res: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res["table"][0]))
        w.writeheader()
        w.writerows(res["table"])


if __name__ == "__main__":
    main()
