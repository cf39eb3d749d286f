"""Closed-loop simulation (``jaxid.simulation.closed_loop``) against exact answers.

- the Fourier reference: ``q'``, ``q''`` equal forward-mode derivatives of ``q``, periodicity, and the
  random feasible trajectory on its limits (the two-link URDF's defaults and the Panda's URDF limits);
- computed torque with the true arm tracks the reference exactly (linear error dynamics from 0);
- PD error decay on a one-joint arm without gravity: the analytic critically damped solution
  (controller per RK4 stage) and the exact zero-order-hold recursion and its poles (hold mode);
- energy conservation with the controller off and no friction (Panda);
- the logged torque is the torque that drove the arm: measured − noise = commanded, and the
  commanded torque equals the true arm's inverse dynamics at the simulated state and acceleration;
- batch properties: ``vmap(f)(xs)[i] == f(xs[i])``, the batch runner equals ``vmap``, a trial depends
  on its own key (not its position) and not on the chunk size, a diverging trial is a status;
  saturation; one compile per sweep; errors before compiling.

Compiled functions are shared through module fixtures; every Panda check runs through one compiled
program (computed torque evaluated per stage, 0.2 s at 1 kHz).
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _typecheck import package_errors

from jaxid.excitation.fourier import (
    FourierTrajectory,
    JointLimits,
    check_limits,
    joint_limits,
    random_fourier_trajectory,
)
from jaxid.model.serial import SerialArm
from jaxid.model.urdf import load_arm
from jaxid.simulation.closed_loop import simulate_closed_loop
from jaxid.simulation.closed_loop_batch import simulate_closed_loop_batch
from jaxid.simulation.closed_loop_record import MeasurementNoise, measurement_noise
from jaxid.simulation.controllers import ComputedTorque, OpenLoop, PDController
from jaxid.types import Status

ROBOTS = Path(__file__).resolve().parent.parent / "data" / "robots"
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
STEP = 1e-3


@pytest.fixture(scope="module")
def two_link():
    return load_arm(ROBOTS / "two_link.urdf")


@pytest.fixture(scope="module")
def panda():
    return load_arm(ROBOTS / "panda.urdf", fixed_joints=PANDA_FINGERS)


@pytest.fixture(scope="module")
def panda_reference(panda):
    return random_fourier_trajectory(panda, 5, 10.0, key=jax.random.key(1))


@pytest.fixture(scope="module")
def panda_run():
    """The one compiled Panda program: controller per RK4 stage, 0.2 s at 1 kHz, noise from a key."""

    def run(arm, reference, controller, noise, key):
        return simulate_closed_loop(
            arm, reference, controller, duration=0.2, sample_step=STEP, key=key, noise=noise, control="stage"
        )

    return jax.jit(run)


# -- the reference ----------------------------------------------------------------------------------


def test_fourier_derivatives_and_period():
    rng = np.random.default_rng(0)
    traj = FourierTrajectory(rng.normal(size=3), rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), 2.5)
    t = jnp.asarray([0.0, 0.37, 1.3, 2.49, 7.1])

    @jax.jit
    def derivatives(traj, t):
        return traj.evaluate(t), jax.vmap(jax.jacfwd(traj.q))(t), jax.vmap(jax.jacfwd(traj.qd))(t)

    (q, qd, qdd), jac_q, jac_qd = derivatives(traj, t)
    assert q.shape == qd.shape == qdd.shape == (5, 3)
    np.testing.assert_allclose(jac_q, qd, rtol=0, atol=1e-12 * np.max(np.abs(qd)))
    np.testing.assert_allclose(jac_qd, qdd, rtol=0, atol=1e-12 * np.max(np.abs(qdd)))
    # Periodic, and the offset is the mean over a period.
    for shifted, value in zip(derivatives(traj, t + 2.5)[0], (q, qd, qdd), strict=True):
        np.testing.assert_allclose(shifted, value, rtol=0, atol=1e-12 * np.max(np.abs(value)))
    grid = traj.q(jnp.arange(400) * (2.5 / 400))
    np.testing.assert_allclose(jnp.mean(grid, axis=0), traj.offset, rtol=0, atol=1e-12)
    # The formula term by term at one time (joint 1, harmonic 2).
    single = FourierTrajectory([0.1], [[0.0, 0.3]], [[0.0, -0.2]], 2.5)
    w = 2 * np.pi / 2.5 * 2
    expected = 0.1 + 0.3 / w * np.sin(w * 0.37) + 0.2 / w * np.cos(w * 0.37)
    np.testing.assert_allclose(single.q(0.37)[0], expected, rtol=1e-14)


@pytest.mark.parametrize("robot", ["two_link", "panda"])
def test_random_fourier_trajectory_respects_the_limits(robot, two_link, panda):
    arm = two_link if robot == "two_link" else panda
    limits = joint_limits(arm)
    if robot == "two_link":  # continuous joints, no URDF limits: the documented defaults
        np.testing.assert_array_equal(limits.position, [[-np.pi, np.pi]] * 2)
        np.testing.assert_array_equal(limits.velocity, [2.0, 2.0])
        assert np.all(np.isinf(limits.effort))
    else:
        np.testing.assert_allclose(limits.position[3], [-3.0718, -0.0698])
        np.testing.assert_allclose(limits.velocity[:4], 2.175)
        np.testing.assert_allclose(limits.effort, [87.0] * 4 + [12.0] * 3)
    np.testing.assert_array_equal(limits.acceleration, 10.0)
    keys = jax.random.split(jax.random.key(3), 4)

    @jax.jit
    def draw(limits, keys):
        trajs = jax.vmap(lambda k: random_fourier_trajectory(limits, 5, 8.0, key=k))(keys)
        # On the design grid (64 samples per period of the top harmonic), and densely (check_limits).
        q, qd, qdd = jax.vmap(lambda traj: traj.evaluate(jnp.arange(320) * (8.0 / 320)))(trajs)
        ratios = jnp.stack(
            [
                jnp.max(jnp.abs(q - limits.middle), axis=1) / limits.half_range,
                jnp.max(jnp.abs(qd), axis=1) / limits.velocity,
                jnp.max(jnp.abs(qdd), axis=1) / limits.acceleration,
            ]
        )
        return trajs, ratios, jax.vmap(lambda traj: check_limits(traj, limits))(trajs)

    trajs, ratios, worst = draw(limits, keys)
    np.testing.assert_allclose(trajs.offset, np.broadcast_to(limits.middle, (4, arm.dof)), rtol=0, atol=1e-15)
    # Each joint's binding limit is at exactly 0.9 on the design grid; densely sampled, no limit is
    # passed by more than 0.2 % of it.
    np.testing.assert_allclose(np.max(ratios, axis=0), 0.9, rtol=1e-12)
    worst = np.stack(worst)  # (kind, trial)
    assert np.all(worst.max(axis=0) <= 0.9 * 1.002) and np.all(worst.max(axis=0) >= 0.9) and np.all(worst > 0)


# -- controllers: exact answers ---------------------------------------------------------------------


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_computed_torque_with_the_true_arm_tracks_exactly(panda, panda_reference, panda_run):
    controller = ComputedTorque.tuned(panda)
    np.testing.assert_allclose(controller.kp, (2 * np.pi * 10) ** 2)
    np.testing.assert_allclose(controller.kd, 2 * 2 * np.pi * 10)
    rec = panda_run(panda, panda_reference, controller, MeasurementNoise(), jax.random.key(0))
    assert int(rec.status) == Status.SUCCESS
    error = float(jnp.max(jnp.abs(rec.q - rec.q_reference)))
    velocity_error = float(jnp.max(jnp.abs(rec.qd - rec.qd_reference)))
    assert error < 1e-8 and velocity_error < 1e-7, (error, velocity_error)
    np.testing.assert_allclose(rec.q_reference, panda_reference.q(rec.t), rtol=0, atol=1e-15)
    assert np.max(np.abs(np.asarray(rec.tau_command))) > 1.0  # it does work against gravity


def _one_joint_arm(inertia: float) -> SerialArm:
    # A single revolute joint about the vertical: gravity does no work, M = inertia, no friction.
    inertial = np.zeros((1, 10))
    inertial[0, 0] = 2.0
    inertial[0, 4] = inertial[0, 7] = inertial[0, 9] = inertia
    return SerialArm(["revolute"], [[0.0, 0.0, 1.0]], [np.eye(3)], [[0.0, 0.0, 0.0]], inertial)


def test_pd_error_decays_with_the_stated_poles():
    arm = _one_joint_arm(0.4)
    moving = FourierTrajectory([0.3], [[0.5, -0.2, 0.1]], [[0.2, 0.1, -0.3]], 4.0)
    controller = PDController.tuned(arm, moving)  # feed-forward with the true model
    omega = 2 * np.pi * 10.0
    np.testing.assert_allclose(controller.kp, 0.4 * omega**2, rtol=1e-14)
    np.testing.assert_allclose(controller.kd, 0.4 * 2 * omega, rtol=1e-14)
    e0, ed0 = 0.02, -0.3
    start = moving.initial_state() - jnp.asarray([[e0], [ed0]])

    # Controller per stage: J e'' + kd e' + kp e = 0, a double pole at −ω:
    # e(t) = (e0 + (e0' + ω e0) t) exp(−ω t).
    rec = simulate_closed_loop(
        arm, moving, controller, duration=0.3, sample_step=STEP, substeps=4, control="stage", initial_state=start
    )
    t = np.asarray(rec.t)
    analytic = (e0 + (ed0 + omega * e0) * t) * np.exp(-omega * t)
    error = np.asarray(rec.q_reference - rec.q)[:, 0]
    np.testing.assert_allclose(error, analytic, rtol=0, atol=1e-9 * e0)

    # Zero-order hold at 1 kHz, constant reference: the error obeys x_{k+1} = (Φ − Γ K) x_k exactly
    # (RK4 integrates a double integrator under a constant torque exactly).
    still = FourierTrajectory([0.3], [[0.0]], [[0.0]], 4.0)
    held = PDController(controller.kp, controller.kd, arm)
    rec = simulate_closed_loop(arm, still, held, duration=0.3, sample_step=STEP, initial_state=[[0.3 - e0], [-ed0]])
    kp, kd, inertia = float(controller.kp[0]), float(controller.kd[0]), 0.4
    phi = np.array([[1.0, STEP], [0.0, 1.0]])
    gamma = np.array([[STEP**2 / (2 * inertia)], [STEP / inertia]])
    closed = phi - gamma @ np.array([[kp, kd]])
    x = np.array([e0, ed0])
    expected = []
    for _ in range(t.size):
        expected.append(x[0])
        x = closed @ x
    error = np.asarray(0.3 - rec.q)[:, 0]
    np.testing.assert_allclose(error, expected, rtol=0, atol=1e-13)
    # Its poles: real, stable, and their product exp(tr(A) Δ) = exp(−2 ζ ω Δ) of the continuous design
    # within the hold's delay (0.6 % at ω Δ = 0.063).
    poles = np.linalg.eigvals(closed)
    assert np.all(np.isreal(poles)) and np.all((poles.real > 0) & (poles.real < 1)), poles
    np.testing.assert_allclose(np.prod(poles.real), np.exp(-2 * omega * STEP), rtol=0.01)


def test_energy_is_conserved_with_the_controller_off(panda, panda_reference, panda_run):
    n = panda.dof
    frictionless = panda.with_parameters([f"fv{i + 1}" for i in range(n)], np.zeros(n))
    # Zero gains on a massless, gravity-free model: the controller applies no torque at all (and
    # runs through the same compiled program as the other Panda checks).
    massless = eqx.tree_at(lambda a: (a.inertial, a.gravity), frictionless, (jnp.zeros((n, 10)), jnp.zeros(3)))
    off = ComputedTorque(jnp.zeros(n), jnp.zeros(n), massless)
    rec = panda_run(frictionless, panda_reference, off, MeasurementNoise(), jax.random.key(0))
    assert int(rec.status) == Status.SUCCESS
    np.testing.assert_array_equal(rec.tau_command, 0.0)
    energy = np.asarray(frictionless.kinetic_energy(rec.q, rec.qd) + frictionless.potential_energy(rec.q))
    kinetic = np.asarray(frictionless.kinetic_energy(rec.q, rec.qd))
    assert kinetic.max() - kinetic.min() > 1.0  # the arm falls: energy moves between the two forms [J]
    assert np.max(np.abs(energy - energy[0])) < 1e-8, np.max(np.abs(energy - energy[0]))


def test_logged_torque_is_the_torque_that_drove_the_arm(panda, panda_reference, panda_run):
    noise = MeasurementNoise(angle_std=1e-4, velocity_std=1e-3, torque_std=0.3)
    key = jax.random.key(11)
    rec = panda_run(panda, panda_reference, ComputedTorque.tuned(panda), noise, key)
    samples, n = rec.q.shape
    noise_q, noise_qd, noise_tau = measurement_noise(noise, key, samples, n)
    assert float(jnp.std(noise_tau)) > 0.2  # the noise is there
    np.testing.assert_allclose(rec.tau - noise_tau, rec.tau_command, rtol=0, atol=1e-13)
    q, qd = np.asarray(rec.q - noise_q), np.asarray(rec.qd - noise_qd)  # the true state
    # The acceleration from the simulated velocities (fourth-order central differences) ...
    qdd = (qd[:-4] - 8 * qd[1:-3] + 8 * qd[3:-1] - qd[4:]) / (12 * STEP)
    inverse = np.asarray(panda.inverse_dynamics(q[2:-2], qd[2:-2], qdd))
    tau = np.asarray(rec.tau_command)[2:-2]
    scale = np.max(np.abs(tau))
    # (to the O(h⁴) of RK4 in the 10 Hz loop and of the stencil: 1.5e-6 rad/s², 1e-7 of the torque scale)
    np.testing.assert_allclose(inverse, tau, rtol=0, atol=5e-7 * scale)
    # ... and one sample late or early it is far off (the log is aligned with the motion).
    late = np.asarray(panda.inverse_dynamics(q[3:-1], qd[3:-1], qdd))
    assert np.max(np.abs(late - tau)) > 1e-4 * scale


# -- batches ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_link_setup(two_link):
    reference = random_fourier_trajectory(two_link, 3, 2.0, key=jax.random.key(5))
    controller = PDController.tuned(two_link, reference)
    noise = MeasurementNoise(angle_std=1e-3, velocity_std=1e-2, torque_std=0.1)
    theta = two_link.standard_parameters()
    rng = np.random.default_rng(2)
    factors = np.ones((3, theta.size))
    factors[:, :20] = rng.uniform(0.9, 1.1, (3, 20))
    factors[1, :20] = 1e-4  # a light arm: the nominal gains drive it unstable at 1 kHz
    arms = two_link.with_standard_parameters(theta * factors)
    arms = eqx.tree_at(lambda a: a.gravity, arms, jnp.broadcast_to(arms.gravity, (3, 3)))  # every leaf batched
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(9), i))(jnp.arange(3))
    return reference, controller, noise, arms, keys


@pytest.fixture(scope="module")
def two_link_vmapped():
    """``vmap`` of one trial, compiled once for every use in this file (asserted)."""

    def one(arm, reference, controller, noise, key):
        return simulate_closed_loop(arm, reference, controller, duration=0.25, key=key, noise=noise)

    return jax.jit(eqx.debug.assert_max_traces(jax.vmap(one, in_axes=(0, None, None, None, 0)), max_traces=1))


def _trial(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_batch_equals_single_calls_and_a_divergence_is_a_status(two_link_setup, two_link_vmapped):
    reference, controller, noise, arms, keys = two_link_setup
    batched = two_link_vmapped(arms, reference, controller, noise, keys)
    np.testing.assert_array_equal(batched.status, [Status.SUCCESS, Status.DIVERGED, Status.SUCCESS])
    for i in (0, 2):
        single = simulate_closed_loop(_trial(arms, i), reference, controller, duration=0.25, key=keys[i], noise=noise)
        assert int(single.status) == Status.SUCCESS
        for name in ("q", "qd", "tau_command", "tau", "q_reference"):
            ours, theirs = getattr(batched, name)[i], getattr(single, name)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * np.max(np.abs(theirs)), err_msg=name)
        assert np.all(np.isfinite(batched.q[i]))
        error = float(jnp.max(jnp.abs(batched.q[i] - batched.q_reference[i])))
        assert error < 0.02, error  # tracking within noise-driven wander
    # Runner: chunks of 2 (one chunk, then the remainder alone); the same answers as one vmap of 3,
    # per trial, whatever the order.
    run = simulate_closed_loop_batch(arms, reference, controller, duration=0.25, keys=keys, noise=noise, chunk_size=2)
    np.testing.assert_array_equal(run.status, batched.status)
    for name in ("q", "tau"):
        ours, theirs = np.asarray(getattr(run, name))[[0, 2]], np.asarray(getattr(batched, name))[[0, 2]]
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * np.max(np.abs(theirs)), err_msg=name)
    flipped = simulate_closed_loop_batch(
        _trial(arms, jnp.array([2, 1, 0])),
        reference,
        controller,
        duration=0.25,
        keys=keys[::-1],
        noise=noise,
        chunk_size=2,
    )
    np.testing.assert_array_equal(flipped.status, run.status[::-1])
    np.testing.assert_allclose(flipped.q[0], run.q[2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(flipped.tau[2], run.tau[0], rtol=0, atol=1e-12)


def test_a_sweep_compiles_once_and_noise_follows_the_key(two_link_setup, two_link_vmapped):
    reference, controller, noise, arms, keys = two_link_setup
    quiet = MeasurementNoise()
    clean = two_link_vmapped(arms, reference, controller, quiet, keys)  # new values, same program
    louder = MeasurementNoise(angle_std=2e-3, velocity_std=1e-2, torque_std=0.1)
    noisy = two_link_vmapped(arms, reference, controller, louder, keys)
    samples, n = clean.q.shape[1:]
    noise_q, _, noise_tau = measurement_noise(louder, keys[0], samples, n)
    np.testing.assert_allclose(noisy.tau[0] - noise_tau, noisy.tau_command[0], rtol=0, atol=1e-13)
    # Angle noise enters the loop under a zero-order hold (the controller reads the measured angles).
    assert float(jnp.max(jnp.abs(noisy.tau_command[0] - clean.tau_command[0]))) > 1.0
    np.testing.assert_array_equal(noise_q[0], measurement_noise(louder, keys[0], samples, n)[0][0])


def test_saturation_clips_at_the_effort_limit_and_counts(two_link_setup):
    reference, controller, noise, arms, keys = two_link_setup
    limits = eqx.tree_at(lambda lim: lim.effort, joint_limits(arms), jnp.asarray([40.0, 12.0]))
    arm, key = _trial(arms, 0), keys[0]
    rec = simulate_closed_loop(
        arm, reference, controller, duration=0.25, key=key, noise=noise, saturate=True, limits=limits
    )
    tau = np.asarray(rec.tau_command)
    assert np.all(np.abs(tau) <= np.asarray(limits.effort))
    on_limit = np.sum(np.abs(tau) == np.asarray(limits.effort), axis=0)
    np.testing.assert_array_equal(rec.saturated, on_limit)
    assert np.all(on_limit > 0)
    # Without saturation the same limits clip nothing (and it is the same compiled program).
    free = simulate_closed_loop(arm, reference, controller, duration=0.25, key=key, noise=noise, limits=limits)
    np.testing.assert_array_equal(free.saturated, 0)
    assert np.all(np.max(np.abs(np.asarray(free.tau_command)), axis=0) > np.asarray(limits.effort))


def test_open_loop_replays_a_torque_table(two_link_setup, two_link_vmapped):
    # Replaying the commanded torques of a noise-free closed-loop run (hold) reproduces it.
    reference, controller, _, arms, keys = two_link_setup
    quiet = MeasurementNoise()
    closed = _trial(two_link_vmapped(arms, reference, controller, quiet, keys), 0)
    replay = simulate_closed_loop(
        _trial(arms, 0), reference, OpenLoop(closed.tau_command, STEP), duration=0.25, key=keys[0], noise=quiet
    )
    np.testing.assert_allclose(replay.q, closed.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(replay.tau_command, closed.tau_command, rtol=0, atol=1e-12)


def test_errors_before_compiling(two_link, panda, panda_reference, two_link_setup):
    reference, controller = two_link_setup[:2]
    with pytest.raises(ValueError, match="whole number of samples"):
        simulate_closed_loop(two_link, reference, controller, duration=0.2505)
    with pytest.raises(ValueError, match="noise needs a key"):
        simulate_closed_loop(two_link, reference, controller, duration=0.1, noise=MeasurementNoise(0.1))
    with pytest.raises(ValueError, match="controller must be"):
        simulate_closed_loop(panda, panda_reference, controller, duration=0.1)
    with pytest.raises(ValueError, match="reference must be"):
        simulate_closed_loop(panda, reference, ComputedTorque.tuned(panda), duration=0.1)
    with package_errors():
        with pytest.raises(ValueError, match="control must be"):
            simulate_closed_loop(two_link, reference, controller, duration=0.1, control="continuous")
        with pytest.raises(ValueError, match="one batch size"):
            simulate_closed_loop_batch(two_link, reference, controller, duration=0.1)
        with pytest.raises(ValueError, match="margin"):
            random_fourier_trajectory(two_link, 3, 2.0, key=jax.random.key(0), margin=1.5)
    with pytest.raises(ValueError, match="limits are for"):
        simulate_closed_loop(two_link, reference, controller, duration=0.1, limits=joint_limits(panda))
    assert isinstance(joint_limits(two_link), JointLimits)
