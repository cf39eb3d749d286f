"""Check: nonlinear output error vs its Cramér–Rao bound and the linear-model estimators.

At the paper's Table 2 amplitudes (scale 1) with the paper's noise (``0.1*rand()``, uniform, std
0.1/√12) on the point-mass arm, unknowns m1, m2, fv1, fv2: Monte Carlo bias, std and RMSE of
``nonlinear_oe``, ``ml`` and ``equation_error`` against the nonlinear and linear bounds, and the
cost per trial (each estimator one compiled, vmapped call over all trials; compile timed apart).
Optionally (``--design``) the excitation design (best scale per estimator).

    python scripts/nonlinear_check.py --trials 200 --lines same split --design
"""

from __future__ import annotations

import argparse
import math
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxid  # noqa: E402
from jaxid.estimate import get_estimator  # noqa: E402
from jaxid.estimate.crlb import linear_crlb  # noqa: E402
from jaxid.estimate.nonlinear import nonlinear_crlb  # noqa: E402

UNKNOWNS = ("m1", "m2", "fv1", "fv2")


def run(lines: str, trials: int, scale: float, level: float, periods: int, seed: int, estimators) -> None:
    arm = jaxid.point_mass()
    truth = np.asarray(arm.parameter_vector(UNKNOWNS))
    nominal = arm.with_parameters(UNKNOWNS, truth * 1.1)  # estimators must not start at the truth
    ex = jaxid.table2(lines, scale=scale)
    sigma = jaxid.noise_std("uniform", level)
    rec = jaxid.simulate(arm, ex, measured_periods=periods)
    noisy = jaxid.noise_draws(rec, key=jax.random.key(seed), draws=trials, kind="uniform", level=level)
    nl_bound = np.sqrt(np.diag(nonlinear_crlb(arm, ex, UNKNOWNS, sigma, measured_periods=periods)))
    lin_bound = np.sqrt(np.diag(linear_crlb(arm, ex, UNKNOWNS, noise_std=sigma, periods=periods)))
    print(
        f"\n## lines={lines}, scale={scale}, noise uniform level {level} (std {sigma:.5f}), P={periods}, {trials} trials"
    )
    print(f"nonlinear CRLB std: {dict(zip(UNKNOWNS, nl_bound.round(6), strict=True))}")
    print(f"linear    CRLB std: {dict(zip(UNKNOWNS, lin_bound.round(6), strict=True))}")
    print("\n| estimator | param | bias | std | RMSE | RMSE / nonlinear CRLB | converged | compile s | run s/trial |")
    print("|---|---|---|---|---|---|---|---|---|")
    cost = {}
    for name in estimators:
        fn = get_estimator(name)
        f = jax.jit(jax.vmap(lambda r, fn=fn: fn(r, ex, nominal, unknowns=UNKNOWNS, noise_std=sigma)))
        t0 = time.perf_counter()
        compiled = f.lower(noisy).compile()
        t1 = time.perf_counter()
        est = compiled(noisy)
        est.value.block_until_ready()
        t2 = time.perf_counter()
        cost[name] = (t2 - t1) / trials
        v = np.asarray(est.value)
        ok = np.asarray(est.status) == 0
        for i, u in enumerate(UNKNOWNS):
            bias = v[ok, i].mean() - truth[i]
            std = v[ok, i].std(ddof=1)
            rmse = math.sqrt(np.mean((v[ok, i] - truth[i]) ** 2))
            print(
                f"| {name} | {u} | {bias:+.2e} | {std:.2e} | {rmse:.2e} | {rmse / nl_bound[i]:.3f} | "
                f"{ok.sum()}/{trials} | {t1 - t0:.1f} | {cost[name]:.2e} |"
            )
    if "nonlinear_oe" in cost and "ml" in cost:
        print(
            f"\ncost per trial: nonlinear_oe / ml = {cost['nonlinear_oe'] / cost['ml']:.0f}x "
            f"({cost['nonlinear_oe'] * 1e3:.1f} ms vs {cost['ml'] * 1e3:.2f} ms, batch {trials}, {jax.device_count()} device(s))"
        )


def design(lines: str, level: float, periods: int) -> None:
    import pandas as pd

    from jaxid.excitation.multisine_design import design_scale

    pd.set_option("display.width", 200)
    arm = jaxid.point_mass()
    out = design_scale(
        arm, jaxid.table2(lines), noise_std=jaxid.noise_std("uniform", level), measured_periods=periods, refine=5
    )
    print(f"\n## design, lines={lines}: best scale per estimator (objective: relative RMSE of m1, m2)")
    print(out["best"].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    t = out["table"]
    piv = t[t.parameter == "m2"].pivot_table(index="scale", columns="estimator", values="objective", aggfunc="first")
    print("\nobjective against scale:")
    print(piv.to_string(float_format=lambda x: f"{x:.4g}"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--lines", nargs="+", default=["same", "split"])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--level", type=float, default=0.1)
    p.add_argument("--periods", type=int, default=1)
    p.add_argument("--seed", type=int, default=6)
    p.add_argument("--estimators", nargs="+", default=["nonlinear_oe", "ml", "equation_error"])
    p.add_argument("--design", action="store_true")
    a = p.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    for lines in a.lines:
        run(lines, a.trials, a.scale, a.level, a.periods, a.seed, a.estimators)
        if a.design:
            design(lines, a.level, a.periods)


if __name__ == "__main__":
    main()
