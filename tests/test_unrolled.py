"""The unrolled scalar dynamics (``jaxid.model.unrolled``) against ``SerialArm``'s generic methods, and
the closed-loop simulator's fast path (selected for every ``SerialArm``) against its generic path.

- forward and inverse dynamics of the two-link URDF, the UR5, the Panda and a revolute–prismatic–
  revolute arm with tilted frames, with armature, viscous and Coulomb friction, offsets and a tilted
  gravity, at random states, under ``vmap``: equal to 1e-12 relative;
- ``simulate_closed_loop`` on the Panda (PD with feed-forward at zero-order hold with measurement
  noise; computed torque per RK4 stage) takes the fast path and equals the generic path to 1e-12
  (``tests/test_closed_loop.py`` runs the batch runner, on the same path, against ``vmap``).
- the log side's segment simulations (``stepping.simulate_segments``) of a base-parameter model on the
  unrolled path (``split_standard``, ``LDLᵀ``) against the generic path, and ``ldl_solve`` against numpy.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.excitation.fourier import joint_limits, random_fourier_trajectory
from jaxid.model import arm_preset, unrolled
from jaxid.model.scalar_algebra import ldl_solve
from jaxid.model.serial import SerialArm
from jaxid.model.urdf import load_arm
from jaxid.simulation.closed_loop import simulate_closed_loop
from jaxid.simulation.closed_loop_kernel import _closed_loop, fast_path
from jaxid.simulation.closed_loop_record import MeasurementNoise
from jaxid.simulation.controllers import ComputedTorque, PDController

ROBOTS = Path(__file__).resolve().parent.parent / "data" / "robots"
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
B = 16


def _rotation(rpy):
    r, p, y = rpy
    rx = np.array([[1, 0, 0], [0, np.cos(r), -np.sin(r)], [0, np.sin(r), np.cos(r)]])
    ry = np.array([[np.cos(p), 0, np.sin(p)], [0, 1, 0], [-np.sin(p), 0, np.cos(p)]])
    rz = np.array([[np.cos(y), -np.sin(y), 0], [np.sin(y), np.cos(y), 0], [0, 0, 1]])
    return rz @ ry @ rx


def _prismatic_arm():
    rng = np.random.default_rng(5)
    inertial = []
    for _ in range(3):
        m, c = rng.uniform(0.5, 2.0), rng.uniform(-0.1, 0.1, 3)
        a = rng.normal(size=(3, 3))
        inertia = 0.05 * (a @ a.T + np.eye(3)) + m * (c @ c * np.eye(3) - np.outer(c, c))
        inertial.append([m, *(m * c), *inertia[np.triu_indices(3)]])
    return SerialArm(
        ("revolute", "prismatic", "revolute"),
        [(0, 0, 1), (1, 0.5, 0), (0.2, 1, 0.3)],
        [_rotation((0, 0, 0)), _rotation((0.3, -0.5, 0.2)), _rotation((-1.2, 0.4, 0.9))],
        [(0, 0, 0.3), (0.1, 0, 0.4), (0, 0.2, 0.1)],
        np.asarray(inertial),
    )


def _arm(name):
    if name == "two_link":
        return load_arm(ROBOTS / "two_link.urdf")
    if name == "ur5":
        return load_arm(ROBOTS / "ur5_robot.urdf")
    if name == "panda":
        return load_arm(ROBOTS / "panda.urdf", fixed_joints=PANDA_FINGERS)
    return _prismatic_arm()


def _with_joint_terms(arm, seed):
    rng = np.random.default_rng(seed)
    n = arm.dof
    names = [f"{p}{i + 1}" for p in ("Ia", "fv", "fc", "off") for i in range(n)]
    values = np.concatenate(
        [rng.uniform(0.01, 0.2, n), rng.uniform(0.1, 2, n), rng.uniform(0.1, 1, n), rng.normal(size=n)]
    )
    arm = arm.with_parameters(names, values)
    return SerialArm(
        arm.joint_types,
        arm.axes,
        arm.parent_rotations,
        arm.parent_translations,
        arm.inertial,
        viscous=arm.viscous,
        coulomb=arm.coulomb,
        armature=arm.armature,
        offset=arm.offset,
        gravity=(0.5, -1.0, -9.7),
        coulomb_slope=20.0,
    )


def _relative(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))


@pytest.mark.parametrize("name", ["two_link", "ur5", "panda", "prismatic"])
def test_unrolled_dynamics_equal_the_generic_ones(name):
    arm = _with_joint_terms(_arm(name), seed=len(name))
    n = arm.dof
    geometry = unrolled.joint_geometry(arm)
    rng = np.random.default_rng(1)
    q, qd, x = (jnp.asarray(rng.uniform(-s, s, (B, n))) for s in (3.0, 2.0, 5.0))

    def one(q, qd, x):
        params = unrolled.split_parameters(arm)
        qs, qds, xs = ([v[i] for i in range(n)] for v in (q, qd, x))
        sin, cos = [jnp.sin(a) for a in qs], [jnp.cos(a) for a in qs]
        fd = unrolled.forward_dynamics(geometry, params, arm.coulomb_slope, qs, qds, xs, sin, cos)
        inv = unrolled.inverse_dynamics(geometry, params, arm.coulomb_slope, qs, qds, xs, sin, cos)
        return jnp.stack(fd), jnp.stack(inv)

    fd, inv = jax.jit(jax.vmap(one))(q, qd, x)
    assert _relative(fd, arm.forward_dynamics(q, qd, x)) < 1e-12
    assert _relative(inv, arm.inverse_dynamics(q, qd, x)) < 1e-12


@pytest.fixture(scope="module")
def panda_setup():
    arm = _with_joint_terms(_arm("panda"), seed=2)
    reference = random_fourier_trajectory(arm, 3, 2.0, key=jax.random.key(0))
    return arm, reference, joint_limits(arm)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
@pytest.mark.parametrize("control", ["hold", "stage"])
def test_closed_loop_fast_path_equals_the_generic_path(panda_setup, control):
    arm, reference, limits = panda_setup
    if control == "hold":
        controller, noise = PDController.tuned(arm, reference), MeasurementNoise(1e-4, 1e-3, 0.1)
    else:
        controller, noise = ComputedTorque.tuned(arm), MeasurementNoise(1e-4)
    key = jax.random.key(3)
    y0 = reference.initial_state() + 1e-3

    generic = jax.jit(
        lambda arm, y0: _closed_loop(
            arm,
            reference,
            controller,
            noise,
            limits,
            key,
            y0,
            samples=40,
            sample_step=1e-3,
            substeps=2,
            control=control,
            unrolled=False,
        )
    )(arm, y0)
    # The public entry point selects the fast path by itself.
    assert fast_path(arm) and not fast_path(arm_preset("table1"))
    fast = simulate_closed_loop(
        arm,
        reference,
        controller,
        duration=0.04,
        substeps=2,
        key=key,
        noise=noise,
        control=control,
        initial_state=y0,
        limits=limits,
    )
    for field in ("q", "qd", "tau_command"):
        assert _relative(getattr(fast, field), getattr(generic, field)) < 1e-12, field


class _Generic:
    """A regressor without ``standard``: ``simulate_segments`` takes its generic path."""

    def __init__(self, regressor):
        self.regressor = regressor

    def __call__(self, q, qd, qdd):
        return self.regressor(q, qd, qdd)

    def torque(self, theta, q, qd, qdd):
        return self.regressor.torque(theta, q, qd, qdd)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_log_simulations_take_the_unrolled_path_and_equal_the_generic_one():
    """``stepping.simulate_segments`` of a base-parameter model (``BaseColumns`` of the UR5 with armature,
    friction, offsets and a tilted gravity): the unrolled path (``unrolled.split_standard`` of the standard
    vector with the dependent parameters at 0) equals the generic one (mass matrix by forward mode,
    elimination) to 1e-12, at traced counts 1 and 3 per lane under ``vmap``."""
    from jaxid.estimate.logs.stepping import simulate_segments
    from jaxid.fit.model import BaseColumns
    from jaxid.model import base_parameters

    arm = _with_joint_terms(_arm("ur5"), seed=4)
    standard = arm.standard_parameters()
    for got, want in zip(
        jax.tree.leaves(unrolled.split_standard(arm, standard)),
        jax.tree.leaves(unrolled.split_parameters(arm)),
        strict=True,
    ):
        assert got == want
    base = base_parameters(arm)
    regressor = BaseColumns(arm, base, tuple(range(len(base.names))))
    theta = jnp.asarray(base.values(standard))
    rng = np.random.default_rng(2)
    n, segments, steps = arm.dof, 3, 40
    y0 = jnp.asarray(np.concatenate([rng.uniform(-1, 1, (2, segments, n)), rng.normal(size=(2, segments, n))], -1))
    torques = jnp.asarray(rng.normal(scale=5.0, size=(2, segments, steps, 3, n)))

    counts = jnp.asarray([1, 3], jnp.int32)

    def run(model):
        return jax.jit(jax.vmap(lambda y, u, c: simulate_segments(model, theta, y, u, 2e-3, None, c)))(
            y0, torques, counts
        )

    fast, generic = run(regressor), run(_Generic(regressor))
    assert np.all(np.isfinite(generic)) and np.max(np.abs(generic[:, :, -1] - y0)) > 0.1
    assert _relative(fast, generic) < 1e-12


def test_a_fit_s_held_parameters_keep_the_unrolled_path(monkeypatch):
    """A fit that holds some base parameters (``jaxid.fit.model.HeldTorque``: the held columns' torque,
    and their standard vector) simulates ``free.standard(θ) + held.standard()`` on the unrolled dynamics
    (taken: counted), equal to the generic path (the free columns' model plus the held torque as a plain
    function) to 1e-12; a known torque without a standard vector keeps the generic path."""
    from jaxid.estimate.logs import stepping
    from jaxid.fit.model import BaseColumns, HeldTorque
    from jaxid.model import base_parameters

    arm = _with_joint_terms(_arm("ur5"), seed=5)
    base = base_parameters(arm)
    values = np.asarray(base.values(arm.standard_parameters()))
    held = tuple(range(0, len(values), 3))
    free = tuple(i for i in range(len(values)) if i not in held)
    regressor = BaseColumns(arm, base, free)
    known = HeldTorque(BaseColumns(arm, base, held), values[list(held)])
    theta = jnp.asarray(values[list(free)])
    rng = np.random.default_rng(3)
    n, segments, steps = arm.dof, 2, 30
    y0 = jnp.asarray(np.concatenate([rng.uniform(-1, 1, (segments, n)), rng.normal(size=(segments, n))], -1))
    torques = jnp.asarray(rng.normal(scale=5.0, size=(segments, steps, 3, n)))
    built = []
    original = stepping.unrolled_dynamics
    monkeypatch.setattr(stepping, "unrolled_dynamics", lambda *a: built.append(a) or original(*a))

    def run(model, torque):
        return jax.jit(lambda y, u: stepping.simulate_segments(model, theta, y, u, 2e-3, torque, 2))(y0, torques)

    fast = run(regressor, known)
    assert len(built) == 1
    generic = run(regressor, lambda q, qd, qdd: known(q, qd, qdd))
    assert len(built) == 1  # the same free model, but a known torque without a standard vector: generic
    assert np.all(np.isfinite(generic)) and np.max(np.abs(generic[:, -1] - y0)) > 0.1
    assert _relative(fast, generic) < 1e-12


@pytest.mark.parametrize("shift", [1.0, -3.0])
def test_ldl_solve_equals_numpy_for_definite_and_indefinite_matrices(shift):
    """The log side's solve (``jaxid.model.scalar_algebra.ldl_solve``: an identified model's mass matrix need not be positive
    definite) against ``numpy.linalg.solve``, on a positive definite and an indefinite 7 × 7 matrix."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 7))
    h, b = a @ a.T + shift * np.eye(7), rng.normal(size=7)
    assert (np.linalg.eigvalsh(h).min() > 0) == (shift > 0)
    got = ldl_solve([[jnp.asarray(v) for v in row] for row in h], [jnp.asarray(v) for v in b])
    assert _relative(jnp.stack(got), np.linalg.solve(h, b)) < 1e-13
