"""A simulated log of the lab's arm model with known parameters (shared by the real-arm tests).

The lab model (``double_pendulum()``) with torque offsets and some viscous friction added, driven
by two sines per joint from rest, integrated by RK4 at 1 ms with ``jaxid.forward_dynamics``;
sampled at jittered stamps (steps of 1, 2 or 3 ms), angle noise 1e-4 rad (about the encoder
step of the real arm / 3), torque noise 0.01 N m, written like the real logs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import jaxid
from jaxid.simulation.integrate import rk4_step

FINE_STEP = 0.001
DURATION = 4.0


def true_arm():
    lab = jaxid.double_pendulum()
    # Built with the constructor: it decides which terms (Coulomb, rotor, offset) are active.
    return jaxid.TwoLinkArm(
        masses=lab.masses,
        lengths=lab.lengths,
        com=lab.com,
        inertias=lab.inertias,
        friction=(0.01, 0.008),
        gravity=lab.gravity,
        coulomb=lab.coulomb,
        rotor_inertia=lab.rotor_inertia,
        gear_ratio=lab.gear_ratio,
        torque_offset=(0.02, -0.01),
        coulomb_slope=lab.coulomb_slope,
    )


def torque(t):
    t = np.asarray(t)
    tau1 = 0.5 * np.sin(2 * np.pi * 1.6 * t) + 0.3 * np.sin(2 * np.pi * 0.7 * t + 1.0)
    tau2 = 0.35 * np.sin(2 * np.pi * 1.1 * t) + 0.2 * np.sin(2 * np.pi * 2.3 * t + 0.5)
    return np.stack([tau1, tau2], -1)


def simulate(arm, torque=torque, duration=DURATION):
    """``(t, states, reported torque)`` of ``arm`` from rest under ``torque(t) -> (N, 2)``."""
    steps = int(round(duration / FINE_STEP))
    t = np.arange(steps + 1) * FINE_STEP
    half = np.arange(2 * steps + 1) * (FINE_STEP / 2)
    u = torque(half)
    stages = jnp.asarray(np.stack([u[0:-1:2], u[1::2], u[2::2]], axis=1))

    def rates(y, tau):
        return jnp.concatenate([y[2:], jaxid.forward_dynamics(arm, y[:2], y[2:], tau)])

    def step(y, s):
        y = rk4_step(rates, y, s, FINE_STEP)
        return y, y

    _, ys = jax.lax.scan(step, jnp.zeros(4), stages)
    states = np.concatenate([np.zeros((1, 4)), np.asarray(ys)])
    # The torque the "drive reports": applied torque + offset is what inverse dynamics returns.
    return t, states, torque(t)


def write_logs(tmp_dir, seed=0):
    """Write the simulated log as CSV.gz and parquet; return (paths, arm)."""
    arm = true_arm()
    frame = log_frame(*simulate(arm), seed=seed)
    csv = tmp_dir / "sim.csv.gz"
    parquet = tmp_dir / "sim.parquet"
    frame.to_csv(csv, index=False)
    frame.to_parquet(parquet, index=False)
    return csv, parquet, arm, frame


def log_frame(t, states, tau, *, seed=0, angle_noise=1e-4, torque_noise=0.01):
    """A simulated run as a real log: jittered stamps (1-3 ms steps), noisy angles and torques."""
    rng = np.random.default_rng(seed)
    idx = np.concatenate([[0], np.cumsum(rng.integers(1, 4, size=t.size))])
    idx = idx[idx < t.size]
    frame = pd.DataFrame(
        {
            "time": t[idx] + rng.uniform(-2e-5, 2e-5, idx.size) * (idx > 0),
            "pos_meas1": states[idx, 0] + angle_noise * rng.standard_normal(idx.size),
            "pos_meas2": states[idx, 1] + angle_noise * rng.standard_normal(idx.size),
            "vel_meas1": states[idx, 2],
            "vel_meas2": states[idx, 3],
            "tau_meas1": tau[idx, 0] + torque_noise * rng.standard_normal(idx.size),
            "tau_meas2": tau[idx, 1] + torque_noise * rng.standard_normal(idx.size),
            "tau_con1": tau[idx, 0],
            "tau_con2": tau[idx, 1],
        }
    )
    return frame


def filtered_two_link(tmp_dir):
    """The log written by ``write_logs`` into ``tmp_dir``, filtered at 20 Hz, with its model and IDIM-LS:
    ``(regressor, names, [log], IDIM-LS)`` (the base regressor of the true arm)."""
    from jaxid.estimate.logs import filter_log, idim_ls

    _, parquet, arm, _ = write_logs(tmp_dir)
    base = jaxid.base_parameters(arm)

    def regressor(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)

    logs = [filter_log(jaxid.load_log(parquet), 20.0)]
    return regressor, base.names, logs, idim_ls(logs, regressor, base.names)
