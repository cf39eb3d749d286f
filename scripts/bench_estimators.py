"""Benchmark: spectrum + the paper, equation-error and ML estimators on many noisy one-period trials.

One compiled call (``jax.lax.map`` over chunks of ``vmap``-ed trials) against a typical user's
numpy/scipy loop (``numpy.fft`` + ``numpy.linalg.lstsq`` + ``scipy.optimize.least_squares(method="lm")``),
measured in the same run on the same data. The loop is timed on ``--loop-trials`` trials and its
time scaled to ``--trials``; its estimates are checked against the JAX ones on those trials.

Single XLA CPU device: splitting the batch over two host devices
(``--xla_force_host_platform_device_count=2``, a sharded ``vmap``) deadlocked in this workload with
jax 0.10.2 (the optimiser's ``while_loop`` with LAPACK calls), and ``shard_map`` does not trace
through optimistix/lineax here; see docs/lapack-deadlock.md.

Usage:
    python scripts/bench_estimators.py --trials 10000 --chunk 500 --loop-trials 200 [--ml-solver gauss_newton]
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=500, help="trials per vmapped chunk inside the compiled call")
    ap.add_argument("--loop-trials", type=int, default=200, help="trials timed with the numpy/scipy loop")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--ml-solver", default="levenberg_marquardt", choices=["levenberg_marquardt", "gauss_newton"])
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import scipy.optimize

    import jaxid
    from jaxid.estimators import equation_error_fit, ml_fit, paper, parameter_values
    from jaxid.spectrum import fourier_coefficients

    unknowns = ("m1", "m2", "fv1", "fv2")
    arm = jaxid.point_mass()
    exc = jaxid.table2("split", scale=args.scale)
    level = 0.1  # the paper's uniform noise 0.1*rand(): std 0.1/sqrt(12)
    sigma = jaxid.noise_std("uniform", level)

    t0 = time.perf_counter()
    rec = jaxid.simulate(arm, exc, measured_periods=1)  # nonlinear, Δ = 0.01 s, N = 10 000
    rec = jax.block_until_ready(rec)
    t_sim = time.perf_counter() - t0

    def trial(key):
        r = jaxid.add_noise(rec, key=key, kind="uniform", level=level)
        s = fourier_coefficients(r, exc)
        p = paper(r, exc, arm)
        e = equation_error_fit(s, arm, unknowns=unknowns, noise_std=sigma)
        m = ml_fit(s, arm, unknowns=unknowns, noise_std=sigma, solver=args.ml_solver)
        return (p.value, p.status), (e.value, e.status), (m.value, m.status, jnp.sqrt(jnp.diag(m.covariance)))

    if args.trials % args.chunk:
        sys.exit("--trials must be a multiple of --chunk")

    def run(keys):
        return jax.lax.map(trial, keys, batch_size=args.chunk)

    keys = jax.random.split(jax.random.key(0), args.trials)
    run_c = jax.jit(run)
    t0 = time.perf_counter()
    compiled = run_c.lower(keys).compile()
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    t_jax = time.perf_counter() - t0
    (pv, ps), (ev, es), (mv, ms, mstd) = jax.tree.map(np.asarray, out)

    # ---- numpy / scipy loop on the first loop-trials noisy records (same noise) --------------------
    k = args.loop_trials
    noisy = jax.jit(jax.vmap(lambda key: jaxid.add_noise(rec, key=key, kind="uniform", level=level).q))
    qs = np.asarray(noisy(jax.random.split(jax.random.key(0), args.trials)[:k]))
    tau = np.asarray(rec.tau)
    t_start = float(rec.t[0])
    n = rec.samples_per_period
    lines = np.asarray(exc.lines)
    omega = exc.line_frequencies
    h1 = np.asarray([exc.lines.index(x) for x in exc.harmonics[0]])
    h2 = np.asarray([exc.lines.index(x) for x in exc.harmonics[1]])
    # The model a numpy user would write: Z(θ) = Z0 + Σ θ_i Z_i (affine), from jaxid once.
    lin_of = lambda th: jaxid.estimators.linear_system(arm, unknowns, th).impedance(omega)  # noqa: E731
    z0 = np.asarray(lin_of(jnp.zeros(4)))
    zi = np.stack([np.asarray(lin_of(jnp.eye(4)[i])) - z0 for i in range(4)])
    lengths = np.asarray(arm.lengths)
    rot = np.exp(-1j * omega * t_start)
    u = (2.0 / n) * np.fft.rfft(tau, axis=0)[lines] * rot[:, None]
    v = 4 * sigma**2 / n
    theta_true = np.asarray(parameter_values(arm, unknowns))

    def np_paper(q, uu, w):
        c, d = q.real, -q.imag
        a = np.concatenate(
            [np.stack([c, -2 * d * w, -uu.real, w * uu.imag], 1), np.stack([d, 2 * c * w, uu.imag, w * uu.real], 1)]
        )
        return np.linalg.lstsq(a, np.concatenate([c * w**2, d * w**2]), rcond=None)[0]

    def np_trial(qn):
        qk = (2.0 / n) * np.fft.rfft(qn, axis=0)[lines] * rot[:, None]
        b11 = np_paper(qk[h1, 0], u[h1, 0], omega[h1])[3]
        b22 = np_paper(qk[h2, 1], u[h2, 1], omega[h2])[3]
        p_est = _masses(b11, b22, lengths)
        a = np.einsum("pkij,kj->kip", zi, qk)
        b = u - np.einsum("kij,kj->ki", z0, qk)
        a_r = np.concatenate([a.real, a.imag], 1).reshape(-1, 4)
        b_r = np.concatenate([b.real, b.imag], 1).reshape(-1)
        e_est = np.linalg.lstsq(a_r, b_r, rcond=None)[0]

        def resid(th):
            z = z0 + np.einsum("p,pkij->kij", th, zi)
            h = np.linalg.inv(z)
            r = (qk - np.einsum("kij,kj->ki", h, u)) / np.sqrt(v / 2)
            return np.concatenate([r.real, r.imag], 1).ravel()

        sol = scipy.optimize.least_squares(resid, e_est, method="lm", xtol=1e-10, ftol=1e-10)
        cov = np.linalg.inv(sol.jac.T @ sol.jac)
        return p_est, e_est, sol.x, np.sqrt(np.diag(cov))

    # Timed: the loop draws its own noise (numpy's PCG64), as the compiled call does.
    rng = np.random.default_rng(0)
    q_clean = np.asarray(rec.q)
    t0 = time.perf_counter()
    for _ in range(k):
        np_trial(q_clean + level * rng.random(q_clean.shape))
    t_loop = (time.perf_counter() - t0) / k * args.trials
    # Untimed: the same noise as the compiled call, to check that both compute the same thing.
    loop = [np_trial(q) for q in qs]
    lp, le, lm, lstd = (np.stack(x) for x in zip(*loop, strict=True))
    agree = {
        "paper": np.max(np.abs(lp - pv[:k]) / np.abs(pv[:k])),
        "equation_error": np.max(np.abs(le - ev[:k]) / theta_true),
        "ml": np.max(np.abs(lm - mv[:k]) / theta_true),
    }

    print(
        f"device={jax.devices()[0]}, trials={args.trials}, chunk={args.chunk}, N={n}, scale={args.scale}, "
        f"ml solver={args.ml_solver}, noise 0.1*rand"
    )
    print(f"one nonlinear simulation (incl. compile): {t_sim:.2f} s")
    print(f"JAX compile: {t_compile:.2f} s; run: {t_jax:.2f} s = {args.trials / t_jax:.0f} trials/s")
    print(
        f"numpy/scipy loop: {t_loop / args.trials * 1e3:.2f} ms/trial -> {t_loop:.1f} s for {args.trials} (timed on {k})"
    )
    print(f"speed-up (run only): {t_loop / t_jax:.1f}x; including compile: {t_loop / (t_jax + t_compile):.1f}x")
    print(f"max relative difference JAX vs loop on {k} trials: " + ", ".join(f"{a}={b:.1e}" for a, b in agree.items()))
    print(f"status ok: paper {np.mean(ps == 0):.4f}, equation_error {np.mean(es == 0):.4f}, ml {np.mean(ms == 0):.4f}")
    for name, val in [("paper", pv), ("equation_error", ev), ("ml", mv)]:
        names = ("m1", "m2") if name == "paper" else unknowns
        truth = theta_true[: len(names)]
        print(
            f"  {name:15s} mean {np.round(val.mean(0), 4)} std {np.round(val.std(0), 4)} (truth {truth}, "
            f"ml reported std {np.round(mstd.mean(0), 4)})"
        )


def _masses(b11, b22, lengths):
    l1, l2 = lengths
    m2 = 1.0 / (l2**2 * b22 - b11 * (l1 + l2) ** 2)
    return [1.0 / (l1**2 * b11), m2]


if __name__ == "__main__":
    main()
