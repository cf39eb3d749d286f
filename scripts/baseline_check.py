"""Monte Carlo check of the time-domain baselines (RLS, IDIM-LS, IDIM-IV, EKF, UKF) on the paper's setup.

Point-mass arm, Table 2 multisine (split lines by default), T = 100 s, Δ = 0.01 s, one measured
period, the paper's uniform noise 0.1·rand() (mean 0.05 rad, std 0.1/√12). For each scale it
simulates the noise-free record once, draws ``--trials`` noise realisations and runs every
estimator variant as one ``jit(vmap(...))`` call; reports bias, std, RMSE, the mean reported std
(from ``Estimate.covariance``), sqrt(CRLB) of the linearised arm, and seconds per trial (second
call, compile excluded) and compile seconds.

    python scripts/baseline_check.py --trials 50 --scales 1 0.25 --out /tmp/baseline_check.md
    python scripts/baseline_check.py --trials 50 --full --only idim_ls idim_iv "idim_iv keep=band"
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxid  # noqa: E402
from jaxid.estimate import ekf, rls  # noqa: E402
from jaxid.estimate.crlb import linear_crlb  # noqa: E402

UNKNOWNS = ("m1", "m2", "fv1", "fv2")
LEVEL = 0.1
MEAN = jaxid.noise_mean("uniform", LEVEL)
STD = jaxid.noise_std("uniform", LEVEL)


def variants(full: bool):
    base = {
        "idim_ls": (rls.idim_ls, dict(measurement_offset=MEAN)),
        "rls": (rls.rls, dict(measurement_offset=MEAN)),
        "idim_iv": (rls.idim_iv, dict(measurement_offset=MEAN)),
        "ekf": (ekf.ekf, dict(measurement_offset=MEAN, noise_std=STD)),
        "ukf": (ekf.ukf, dict(measurement_offset=MEAN, noise_std=STD)),
    }
    if not full:
        return base
    extra = {
        "idim_ls offset=0": (rls.idim_ls, dict()),
        "idim_ls keep=excited": (rls.idim_ls, dict(measurement_offset=MEAN, keep="excited")),
        "idim_ls keep=band": (rls.idim_ls, dict(measurement_offset=MEAN, keep="band")),
        "idim_ls butterworth": (rls.idim_ls, dict(measurement_offset=MEAN, derivative="butterworth")),
        "idim_ls weighting=none": (rls.idim_ls, dict(measurement_offset=MEAN, weighting="none")),
        "idim_iv covariance=white": (rls.idim_iv, dict(measurement_offset=MEAN, covariance="white")),
        "idim_iv iterations=1": (rls.idim_iv, dict(measurement_offset=MEAN, iterations=1)),
        "idim_iv keep=band": (rls.idim_iv, dict(measurement_offset=MEAN, keep="band")),
        "idim_iv noise_std=known": (rls.idim_iv, dict(measurement_offset=MEAN, noise_std=STD)),
        "rls lambda=0.9995": (rls.rls, dict(measurement_offset=MEAN, forgetting=0.9995)),
        "ekf offset=0": (ekf.ekf, dict(noise_std=STD)),
        "ekf noise_std=estimated": (ekf.ekf, dict(measurement_offset=MEAN)),
        "ekf theta random walk 1e-5": (
            ekf.ekf,
            dict(measurement_offset=MEAN, noise_std=STD, parameter_process_std=1e-5),
        ),
    }
    return {**base, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--lines", default="split", choices=["split", "same"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true", help="also run the tuning variants")
    parser.add_argument("--only", nargs="*", default=None, help="run only these variant names")
    parser.add_argument("--out", default=None, help="write the markdown table here too")
    args = parser.parse_args()

    arm = jaxid.point_mass()
    truth = np.asarray(arm.parameter_vector(UNKNOWNS))
    lines = [
        f"trials={args.trials}, lines={args.lines}, uniform noise level {LEVEL} (mean {MEAN}, std {STD:.4f}), "
        f"unknowns {UNKNOWNS}, truth {truth.tolist()}",
        "",
        "| scale | estimator | param | bias | std | RMSE | reported std | sqrt(CRLB lin) | failed | s/trial | compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for scale in args.scales:
        ex = jaxid.table2(args.lines, scale)
        rec = jaxid.simulate(arm, ex)
        key = jax.random.fold_in(jax.random.key(args.seed), int(scale * 1000))
        batch = jaxid.noise_draws(rec, key=key, draws=args.trials, kind="uniform", level=LEVEL)
        crlb = np.sqrt(np.diag(np.asarray(linear_crlb(arm, ex, UNKNOWNS, noise_std=STD))))
        for name, (fn, opts) in variants(args.full).items():
            if args.only and name not in args.only:
                continue
            run = jax.jit(jax.vmap(lambda r, fn=fn, opts=opts, ex=ex: fn(r, ex, arm, unknowns=UNKNOWNS, **opts)))
            t0 = time.perf_counter()
            jax.block_until_ready(run(batch))
            compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            est = jax.block_until_ready(run(batch))
            per_trial = (time.perf_counter() - t0) / args.trials
            values = np.asarray(est.value)
            ok = np.asarray(est.status) == 0
            v = values[ok]
            rep = np.sqrt(np.abs(np.diagonal(np.asarray(est.covariance)[ok], axis1=1, axis2=2))).mean(0)
            bias = v.mean(0) - truth
            std = v.std(0, ddof=1)
            rmse = np.sqrt(((v - truth) ** 2).mean(0))
            for i, p in enumerate(UNKNOWNS):
                row = (
                    f"| {scale:g} | {name} | {p} | {bias[i]:+.4f} | {std[i]:.4f} | {rmse[i]:.4f} | {rep[i]:.4f} | "
                    f"{crlb[i]:.4f} | {int((~ok).sum())} | {per_trial:.3f} | {compile_s:.1f} |"
                )
                lines.append(row)
                print(row, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
