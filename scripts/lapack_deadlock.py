"""Minimal reproducer of the XLA:CPU batched-LAPACK deadlock (see docs/lapack-deadlock.md).

A batched ``jnp.linalg.inv`` (LAPACK getrf + getri) of small complex matrices inside the loop of
an ``optimistix`` Levenberg–Marquardt fit (which runs its own batched QR), under ``vmap`` over
many trials: two batched LAPACK calls in flight at once each split their batch over jaxlib's
intra-op thread pool and wait for each other, and the process stops at 0 % CPU.

    python scripts/lapack_deadlock.py                       # inv inside the fit (the hazard)
    python scripts/lapack_deadlock.py --inverse closed-form # jaxid's closed-form 2x2 inverse

Each try runs in a child process; the parent watches the child's CPU time and reports a
deadlock when it stops advancing for ``--stall`` seconds (a slow machine is not a hang). Exits
1 if any try hung.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = """
import sys
import jax, jax.numpy as jnp, numpy as np
import optimistix as optx
jax.config.update("jax_enable_x64", True)
batch, inverse = int(sys.argv[1]), sys.argv[2]
omega = jnp.linspace(0.1, 3.0, 20)

def inv2(z):  # closed form, no LAPACK
    det = z[..., 0, 0] * z[..., 1, 1] - z[..., 0, 1] * z[..., 1, 0]
    adj = jnp.stack([jnp.stack([z[..., 1, 1], -z[..., 0, 1]], -1), jnp.stack([-z[..., 1, 0], z[..., 0, 0]], -1)], -2)
    return adj / det[..., None, None]

def response(theta):  # H(jw) = (K - w^2 M + jw C)^-1 of a 2x2 system at 20 lines
    k, c = theta[:2], theta[2:]
    z = jnp.diag(k) - omega[:, None, None] ** 2 * jnp.eye(2) + 1j * omega[:, None, None] * jnp.diag(c) + 0.1
    return jnp.linalg.inv(z) if inverse == "lapack" else inv2(z)

def fit(data):
    def residual(theta, _):
        r = response(theta) - data
        return jnp.concatenate([r.real.ravel(), r.imag.ravel()])
    solver = optx.LevenbergMarquardt(rtol=1e-8, atol=1e-8)
    return optx.least_squares(residual, solver, jnp.array([1.0, 2.0, 0.5, 0.5]), throw=False, max_steps=50).value

rng = np.random.default_rng(0)
truth = jnp.asarray(rng.uniform(0.5, 2.0, size=(batch, 4)))
data = jax.vmap(response)(truth) + 1e-3 * rng.normal(size=(batch, 20, 2, 2))
estimates = jax.block_until_ready(jax.jit(jax.vmap(fit))(data))
print("ok", float(jnp.max(jnp.abs(estimates - truth))))
"""


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1000, help="trials under vmap (hangs seen from ~450)")
    parser.add_argument("--inverse", choices=("lapack", "closed-form"), default="lapack")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--stall", type=float, default=30.0, help="seconds without CPU progress = deadlock")
    args = parser.parse_args()
    hung = 0
    for i in range(args.tries):
        t0 = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(args.batch), args.inverse], stdout=subprocess.PIPE, text=True
        )
        last, since = -1.0, time.perf_counter()
        while child.poll() is None:
            time.sleep(1.0)
            try:
                cpu = _cpu_seconds(child.pid)
            except OSError:
                break
            if cpu > last + 0.05:
                last, since = cpu, time.perf_counter()
            elif time.perf_counter() - since > args.stall:
                child.kill()
                child.wait()
                hung += 1
                print(f"try {i}: no CPU progress for {args.stall:.0f} s after {cpu:.1f} CPU-s — deadlocked (killed)")
                break
        else:
            out = child.stdout.read().strip()
            print(f"try {i}: {out or 'failed'} in {time.perf_counter() - t0:.1f} s")
    print(f"{hung} of {args.tries} tries hung (batch {args.batch}, inverse {args.inverse})")
    return 1 if hung else 0


if __name__ == "__main__":
    sys.exit(main())
