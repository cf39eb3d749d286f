"""Excitation designed by gradient on the seven-joint Panda: a random feasible trajectory, the
condition-number optimum and the Cramér–Rao-bound optimum, compared in one run.

The arm: ``data/robots/panda.urdf`` with the fingers locked, plus a nominal joint friction the URDF
lacks (viscous ``--viscous`` N m s/rad, Coulomb ``--coulomb`` N m on every joint; the URDF's damping
0.003 N m s/rad is a simulator placeholder), no armature, no offset. Its 69 base parameters
(``jaxid.model.base_parameters``) are the unknowns. The experiment: one period ``T = --period`` s of a
Fourier trajectory of ``--harmonics`` harmonics tracked exactly, the torque measured at ``--rate`` Hz
with white Gaussian noise of std ``--noise`` N m on every joint, the states known.

Three trajectories, all inside the URDF position and velocity limits and 10 rad/s² at the margin 0.9:

- **random**: ``random_fourier_trajectory`` (key ``fold_in(key(seed), 0)``), the designs' first start;
- **condition**: ``design_trajectory(criterion="condition")``: the raw base regressor's condition
  number, as FloBaRoID/FIGAROH minimise it;
- **bound**: ``design_trajectory(criterion="bound")``: the relative Cramér–Rao bound trace
  ``trace(D⁻¹ C D⁻¹)`` (``D``: the base parameters' magnitudes, floored by ``DEFAULT_FLOORS``).

Both designs run ``--starts`` random starts (the same draws) of at most ``--steps`` BFGS steps on
``64 L`` samples per period. Each trajectory is then evaluated at the experiment's sampling:
relative bound trace, condition number (raw and unit-norm columns), the **Monte Carlo** of IDIM-LS
(``--trials`` noise draws on the torque, states exact: ordinary least squares, then each joint's rows
weighted by its residual std and solved again, Gautier's rule) — its relative mean squared error
``mean Σ_i (δ_i/d_i)²`` next to the bound trace — and the held-out torque RMSE: the identified model's
torque error ``W_val (θ̂ − θ)`` on a validation trajectory (another random feasible draw) against the
noise-free truth, RMS over trials, samples and joints [N m]. The distribution of the bound over
``--draws`` further random feasible draws is reported too (how typical the random trajectory is).

Writes ``summary.csv``, ``summary.md``, ``parameters.csv`` (per base parameter: magnitude, bound and
Monte Carlo relative std of each trajectory), ``random_draws.csv``, ``manifest.json`` and
``excitation_design.png`` into ``--out`` (default ``results/excitation_design``).

    python scripts/design_excitation.py                     # the committed run
    python scripts/design_excitation.py --steps 50 --starts 1 --trials 50 --draws 4 --out /tmp/x   # quick
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PANDA = ROOT / "data" / "robots" / "panda.urdf"
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "excitation_design")
    p.add_argument("--harmonics", type=int, default=5)
    p.add_argument("--period", type=float, default=10.0, help="T [s]")
    p.add_argument("--rate", type=float, default=1000.0, help="torque sampling of the experiment [Hz]")
    p.add_argument("--noise", type=float, default=0.5, help="torque noise std [N m]")
    p.add_argument("--viscous", type=float, default=0.1, help="nominal viscous friction [N m s/rad]")
    p.add_argument("--coulomb", type=float, default=0.5, help="nominal Coulomb friction [N m]")
    p.add_argument("--steps", type=int, default=600, help="most BFGS steps per start")
    p.add_argument("--starts", type=int, default=3, help="random starts per design")
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo noise draws per trajectory")
    p.add_argument("--draws", type=int, default=16, help="further random feasible trajectories for the bound")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def monte_carlo(w, noise, w_val, trials, rng, chunk=50):
    """IDIM-LS errors on ``trials`` torque-noise draws (states exact): OLS, then per-joint weighted LS.

    ``w`` ``(N, n, r)``; returns ``(trials, r)`` errors ``θ̂ − θ`` (the estimate's error depends on the
    noise only: LS is linear in the torque) and the held-out torque mean squares ``(trials,)``."""
    import numpy as np

    n_rows, n, r = w.shape
    grams = np.einsum("knp,knq->npq", w, w)  # per joint
    gram = grams.sum(0)
    gram_val = np.einsum("knp,knq->pq", w_val, w_val) / (w_val.shape[0] * w_val.shape[1])
    errors, held_out = [], []
    for start in range(0, trials, chunk):
        m = min(chunk, trials - start)
        e = noise * rng.standard_normal((m, n_rows, n))
        b = np.stack([e[:, :, j] @ w[:, j, :] for j in range(n)], axis=1)  # (m, n, r): W_jᵀ e_j
        delta = np.linalg.solve(gram, b.sum(1).T).T  # OLS error (m, r)
        fitted = np.stack([delta @ w[:, j, :].T for j in range(n)], axis=-1)  # (m, N, n)
        sigma2 = ((e - fitted) ** 2).sum(1) / (n_rows - r / n)  # (m, n) per-joint residual variance
        weights = 1.0 / sigma2
        gram_w = np.einsum("tn,npq->tpq", weights, grams)
        rhs = np.einsum("tn,tnp->tp", weights, b)
        delta = np.linalg.solve(gram_w, rhs[..., None])[..., 0]
        errors.append(delta)
        held_out.append(np.einsum("tp,pq,tq->t", delta, gram_val, delta))
    return np.concatenate(errors), np.concatenate(held_out)


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxid.excitation.fourier import check_limits, joint_limits, random_fourier_trajectory
    from jaxid.excitation.fourier_design import design_trajectory
    from jaxid.excitation.fourier_information import (
        base_parameter_bound,
        design_regressor,
        parameter_magnitudes,
        regressor_condition,
        relative_bound_trace,
    )
    from jaxid.model.base_parameters import base_parameters
    from jaxid.model.urdf import load_arm

    clock = time.perf_counter()
    arm = load_arm(PANDA, fixed_joints=FINGERS)
    n = arm.dof
    names = [f"fv{i}" for i in range(1, n + 1)] + [f"fc{i}" for i in range(1, n + 1)]
    arm = arm.with_parameters(names, jnp.array([args.viscous] * n + [args.coulomb] * n))
    base = base_parameters(arm)
    theta = np.asarray(base.values(arm.standard_parameters()))
    magnitudes = parameter_magnitudes(base, arm.standard_parameters())
    d = np.asarray(magnitudes)
    limits = joint_limits(arm)
    samples = round(args.rate * args.period)
    if abs(samples - args.rate * args.period) > 1e-9 * samples:
        raise SystemExit("--rate · --period must be a whole number of samples.")
    root = jax.random.key(args.seed)
    common = dict(harmonics=args.harmonics, period=args.period, noise_std=args.noise, base=base)
    common |= dict(seed=args.seed, starts=args.starts, steps=args.steps)
    print(f"Panda: {n} joints, {base.rank} base parameters; designing ({args.starts} starts, ≤{args.steps} steps)")

    designs = {}
    for criterion in ("condition", "bound"):
        designs[criterion] = design_trajectory(arm, criterion=criterion, **common)
        des = designs[criterion]
        print(
            f"  {criterion}: {des.seconds:.1f} s, {des.iterations} steps (best start), "
            f"bound {des.bound_start:.4g} → {des.bound_end:.4g}, cond {des.condition_start:.4g} → {des.condition_end:.4g}"
        )
    trajectories = {
        "random": random_fourier_trajectory(
            limits, args.harmonics, args.period, key=jax.random.fold_in(root, 0), margin=0.9
        ),
        "condition": designs["condition"].trajectory,
        "bound": designs["bound"].trajectory,
    }
    validation = random_fourier_trajectory(
        limits, args.harmonics, args.period, key=jax.random.fold_in(jax.random.key(args.seed + 1), 0), margin=0.9
    )

    def bound_trace(traj):
        return float(
            relative_bound_trace(arm, base, traj, noise_std=args.noise, magnitudes=magnitudes, samples=samples)
        )

    # distribution of the bound over further random feasible draws (keys not used by the designs)
    t_draws = time.perf_counter()
    draws = np.array(
        [
            bound_trace(
                random_fourier_trajectory(
                    limits, args.harmonics, args.period, key=jax.random.fold_in(root, 1000 + i), margin=0.9
                )
            )
            for i in range(args.draws)
        ]
    )
    t_draws = time.perf_counter() - t_draws

    w_val = np.asarray(design_regressor(arm, base, validation, samples))
    rng = np.random.default_rng(args.seed)
    rows, per_parameter = [], {"name": list(base.labels), "value": theta.tolist(), "magnitude": d.tolist()}
    t_mc = 0.0
    for label, traj in trajectories.items():
        w = np.asarray(design_regressor(arm, base, traj, samples))
        bound = np.asarray(base_parameter_bound(arm, base, traj, noise_std=args.noise, samples=samples))
        tic = time.perf_counter()
        errors, held = monte_carlo(w, args.noise, w_val, args.trials, rng)
        t_mc += time.perf_counter() - tic
        rel = errors / d
        mc_trace = float(np.mean(np.sum(rel**2, axis=1)))
        # the bound's prediction of the held-out torque error: trace(G_val C) / rows
        gram_val = np.einsum("knp,knq->pq", w_val, w_val) / (w_val.shape[0] * n)
        ratios = check_limits(traj, limits)
        row = {
            "trajectory": label,
            "bound_trace": float(np.trace(bound / np.outer(d, d))),
            "mc_trace": mc_trace,
            "mc_trace_se": float(np.std(np.sum(rel**2, axis=1)) / np.sqrt(args.trials)),
            "condition": float(regressor_condition(arm, base, traj, samples=samples)),
            "condition_unit": float(regressor_condition(arm, base, traj, samples=samples, column_scaling="unit")),
            "held_out_torque_rmse": float(np.sqrt(np.mean(held))),
            "held_out_torque_rmse_bound": float(np.sqrt(np.trace(gram_val @ bound))),
            "position_ratio": float(ratios.position),
            "velocity_ratio": float(ratios.velocity),
            "acceleration_ratio": float(ratios.acceleration),
            "design_seconds": designs[label].seconds if label in designs else 0.0,
            "design_steps": designs[label].iterations if label in designs else 0,
        }
        rows.append(row)
        per_parameter[f"{label}_bound_rel_std"] = (np.sqrt(np.diag(bound)) / d).tolist()
        per_parameter[f"{label}_mc_rel_rmse"] = np.sqrt(np.mean(rel**2, axis=0)).tolist()
    import pandas as pd

    table = pd.DataFrame(rows).set_index("trajectory")
    random_bound = table.loc["random", "bound_trace"]
    table["bound_vs_random"] = random_bound / table["bound_trace"]
    table["bound_vs_median_random"] = np.median(draws) / table["bound_trace"]
    table["mc_vs_random"] = table.loc["random", "mc_trace"] / table["mc_trace"]
    seconds = time.perf_counter() - clock

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "summary.csv", float_format="%.6g")
    pd.DataFrame(per_parameter).to_csv(out / "parameters.csv", index=False, float_format="%.6g")
    pd.DataFrame({"draw": np.arange(args.draws), "bound_trace": draws}).to_csv(
        out / "random_draws.csv", index=False, float_format="%.6g"
    )
    b = table["bound_trace"]
    lines = [
        "# Excitation design on the Panda (7 joints, 69 base parameters)",
        "",
        f"One period T = {args.period:g} s, {args.harmonics} harmonics, torque sampled at {args.rate:g} Hz "
        f"({samples} samples), noise std {args.noise:g} N m per joint, states exact; limits: URDF position and "
        "velocity, 10 rad/s², all at margin 0.9. Relative bound trace = trace(D⁻¹ C D⁻¹); Monte Carlo: "
        f"IDIM-LS (Gautier-weighted) on {args.trials} torque-noise draws per trajectory.",
        "",
        "| trajectory | bound trace (rel.) | MC rel. MSE (± s.e.) | cond (raw) | cond (unit columns) "
        "| held-out torque RMSE [N m] (bound) | design [s] (steps) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in table.iterrows():
        lines.append(
            f"| {label} | {r.bound_trace:.4g} | {r.mc_trace:.4g} ± {r.mc_trace_se:.2g} | {r.condition:.4g} "
            f"| {r.condition_unit:.4g} | {r.held_out_torque_rmse:.4g} ({r.held_out_torque_rmse_bound:.4g}) "
            f"| {r.design_seconds:.0f} ({int(r.design_steps)}) |"
        )
    lines += [
        "",
        f"- Bound optimum vs the random trajectory: **{b['random'] / b['bound']:.2f}×** lower bound trace "
        f"(target ≥ 5×: {'met' if b['random'] / b['bound'] >= 5 else 'not met'}); vs the median of "
        f"{args.draws} further random draws ({np.median(draws):.4g}; range {draws.min():.4g}–{draws.max():.4g}): "
        f"**{np.median(draws) / b['bound']:.2f}×**; vs the best of them: {draws.min() / b['bound']:.2f}×.",
        f"- Bound optimum vs the condition-number optimum: **{b['condition'] / b['bound']:.2f}×** lower bound trace; "
        f"Monte Carlo: {table.loc['condition', 'mc_trace'] / table.loc['bound', 'mc_trace']:.2f}× lower relative MSE.",
        f"- Ranking by Monte Carlo: {' < '.join(table['mc_trace'].sort_values().index)} "
        f"(by the bound: {' < '.join(b.sort_values().index)}).",
        *(
            f"- {k} design, criterion at each of its {len(v.end_values)} starts → at its optimum (design samples): "
            + ", ".join(f"{a:.4g} → {b:.4g}" for a, b in zip(v.start_values, v.end_values, strict=True))
            + "."
            for k, v in designs.items()
        ),
        f"- Wall time: designs {sum(x.seconds for x in designs.values()):.0f} s, random-draw bounds {t_draws:.0f} s, "
        f"Monte Carlo {t_mc:.0f} s, total {seconds:.0f} s.",
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")

    try:
        revision = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        revision = "unknown"
    manifest = {
        "settings": {k: _relative(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "starts": {k: {"start": list(v.start_values), "end": list(v.end_values)} for k, v in designs.items()},
        "base_parameters": base.rank,
        "git_revision": revision,
        "versions": {"jax": jax.__version__, "python": platform.python_version()},
        "device": str(jax.devices()[0]),
        "cpus": __import__("os").cpu_count(),
        "seconds": {
            "designs": {k: v.seconds for k, v in designs.items()},
            "random_draws": t_draws,
            "monte_carlo": t_mc,
            "total": seconds,
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    labels = list(table.index)
    x = np.arange(len(labels))
    axes[0].bar(x - 0.2, table["bound_trace"], 0.4, label="Cramér–Rao bound")
    axes[0].bar(x + 0.2, table["mc_trace"], 0.4, label="Monte Carlo IDIM-LS")
    axes[0].axhline(np.median(draws), color="k", ls=":", lw=1, label=f"median of {args.draws} random draws")
    axes[0].set_xticks(x, labels)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("Σ (std / |θ_b|)²")
    axes[0].legend(fontsize=8)
    axes[0].set_title("relative error of the 69 base parameters")
    order = np.argsort(np.asarray(per_parameter["random_bound_rel_std"]))[::-1]
    for label in labels:
        axes[1].semilogy(np.asarray(per_parameter[f"{label}_bound_rel_std"])[order], label=label)
    axes[1].set_xlabel("base parameter (sorted by the random trajectory's bound)")
    axes[1].set_ylabel("relative std at the bound")
    axes[1].legend(fontsize=8)
    t = np.linspace(0, args.period, 1000)
    q = np.asarray(trajectories["bound"].q(t))
    mid, half = np.asarray(limits.middle), np.asarray(limits.half_range)
    axes[2].plot(t, (q - mid) / half)
    axes[2].axhline(0.9, color="k", ls=":", lw=1)
    axes[2].axhline(-0.9, color="k", ls=":", lw=1)
    axes[2].set_xlabel("t [s]")
    axes[2].set_ylabel("(q − middle) / half range")
    axes[2].set_title("bound optimum, joints 1–7")
    fig.tight_layout()
    fig.savefig(out / "excitation_design.png", dpi=110)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
