"""``scripts/bench_benchmark_trial.py``'s numpy/Pinocchio side does the benchmark's work: its regressor
columns are jaxid's standard regressor of the UR5 (Pinocchio's inertial parameters permuted, armature,
friction and offset columns added) and its closed loop (PD with feed-forward, zero-order hold, RK4 with
``pinocchio.aba``) is jaxid's to round-off on the same noise. Skipped without Pinocchio (``pip install
pin``; not a jaxid dependency)."""

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("pinocchio")

from jaxid import load_arm  # noqa: E402
from jaxid.excitation.fourier import FourierTrajectory
from jaxid.simulation.closed_loop import simulate_closed_loop
from jaxid.simulation.closed_loop_record import MeasurementNoise, measurement_noise
from jaxid.simulation.controllers import PDController

REPO = Path(__file__).resolve().parent.parent
URDF = REPO / "data" / "robots" / "ur5_robot.urdf"
ARMATURE = np.array([0.2, 0.2, 0.1, 0.02, 0.02, 0.02])
VISCOUS = np.array([0.8, 0.8, 0.5, 0.2, 0.2, 0.2])
COULOMB = np.array([1.5, 1.5, 1.0, 0.3, 0.3, 0.3])


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "bench_benchmark_trial", REPO / "scripts" / "bench_benchmark_trial.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def arms():
    nominal = load_arm(URDF, armature=ARMATURE)
    true = load_arm(URDF, armature=ARMATURE)
    import equinox as eqx

    true = eqx.tree_at(lambda a: (a.viscous, a.coulomb), true, (true.viscous + VISCOUS, true.coulomb + COULOMB))
    return nominal, true


def test_regressor_columns_are_jaxids(bench, arms):
    _, arm = arms
    model, data, _ = bench.pinocchio_models(URDF, ARMATURE, VISCOUS, COULOMB, arm.coulomb_slope)
    rng = np.random.default_rng(0)
    q, qd, qdd = rng.uniform(-2, 2, size=(3, 4, 6))
    mine = bench.numpy_regressor(model, data, q, qd, qdd, range(84), arm.coulomb_slope)
    theirs = np.asarray(arm.standard_regressor(q, qd, qdd))
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-12 * np.abs(theirs).max())
    # The standard vectors agree too: the torque of the true arm from Pinocchio's parameters.
    np.testing.assert_allclose(
        mine @ np.asarray(arm.standard_parameters()), np.asarray(arm.inverse_dynamics(q, qd, qdd)), atol=1e-11
    )


@pytest.mark.slow
def test_closed_loop_equals_jaxids(bench, arms):
    nominal, arm = arms
    rng = np.random.default_rng(1)
    reference = FourierTrajectory(
        0.3 * rng.normal(size=6), 0.3 * rng.normal(size=(6, 2)), 0.3 * rng.normal(size=(6, 2)), 2.0
    )
    controller = PDController.tuned(nominal, reference)
    noise = MeasurementNoise(1e-4, 1e-3, 0.2)
    key, step, samples = jax.random.key(3), 0.002, 40
    record = simulate_closed_loop(
        arm, reference, controller, duration=samples * step, sample_step=step, key=key, noise=noise
    )
    model, data, friction = bench.pinocchio_models(URDF, ARMATURE, VISCOUS, COULOMB, arm.coulomb_slope)
    coefficients = tuple(np.asarray(x) for x in (reference.offset, reference.a, reference.b)) + (reference.period,)
    draws = tuple(np.asarray(x) for x in measurement_noise(noise, key, samples, 6))
    q, qd, tau_command, tau = bench.numpy_closed_loop(
        model, data, friction, coefficients, np.asarray(controller.kp), np.asarray(controller.kd), draws, step
    )
    assert np.max(np.abs(q - np.asarray(record.q))) < 1e-12
    assert np.max(np.abs(qd - np.asarray(record.qd))) < 1e-10
    np.testing.assert_allclose(tau, np.asarray(record.tau), rtol=0, atol=1e-9)
    np.testing.assert_allclose(tau_command, np.asarray(record.tau_command), rtol=0, atol=1e-9)
