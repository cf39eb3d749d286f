"""The batched standard regressor (``spatial.rnea_regressor_batched`` behind
``SerialArm.standard_regressor``) is exact: equal, to 1e-12 relative, to the forward-mode Jacobian of
the inverse dynamics in the standard vector and to the per-state recursion ``spatial.rnea_regressor``
(vmapped), on the UR5, the Panda and a revolute–prismatic–revolute arm with tilted frames, for a
batch of states and a single one; broadcasting over a batch of arms and tracing (``jit``, ``vmap``)
keep the shapes. Its speed is measured by ``scripts/bench_regressor.py``, not here."""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _arms import tilted_prismatic

from jaxid.model import serial_dynamics, spatial
from jaxid.model.urdf import load_arm

ROBOTS = Path(__file__).resolve().parents[1] / "data" / "robots"
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
B = 16


def _relative(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))


@pytest.fixture(scope="module", params=["ur5", "panda", "prismatic"])
def arm(request):
    if request.param == "ur5":
        return load_arm(ROBOTS / "ur5_robot.urdf")
    if request.param == "panda":
        return load_arm(ROBOTS / "panda.urdf", fixed_joints=PANDA_FINGERS)
    return tilted_prismatic()


def _states(arm, seed, batch=(B,)):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.uniform(-s, s, (*batch, arm.dof))) for s in (3.0, 3.0, 10.0))


@eqx.filter_jit
def _jacobian(arm, q, qd, qdd):
    # The arm is an argument, not a closed-over constant: the arms that differ only in their
    # gravity below share one program (three compiles per arm before).
    def torque(standard, q, qd, qdd):
        return arm.with_standard_parameters(standard).inverse_dynamics(q, qd, qdd)

    jac = jax.jacfwd(torque)
    for _ in range(q.ndim - 1):
        jac = jax.vmap(jac, in_axes=(None, 0, 0, 0))
    return jac(arm.standard_parameters(), q, qd, qdd)


def _per_state_recursion(arm, q, qd, qdd):
    """The rigid columns by the per-state recursion ``spatial.rnea_regressor``, vmapped."""

    def one(q, qd, qdd):
        joints, xs = serial_dynamics._transforms(arm, q, None)
        return spatial.rnea_regressor(joints, xs, arm.gravity, qd, qdd)

    return jax.jit(jnp.vectorize(one, signature="(n),(n),(n)->(n,s)"))(q, qd, qdd)


@pytest.mark.parametrize("batch", [(B,), ()], ids=["batch", "single"])
def test_batched_regressor_is_the_jacobian_and_the_per_state_recursion(arm, batch):
    q, qd, qdd = _states(arm, 11, batch)
    y = arm.standard_regressor(q, qd, qdd)
    assert y.shape == (*batch, arm.dof, 14 * arm.dof)
    assert _relative(y, _jacobian(arm, q, qd, qdd)) < 1e-12
    rigid = _per_state_recursion(arm, q, qd, qdd)
    assert _relative(y[..., : 10 * arm.dof], rigid) < 1e-12
    assert _relative(y @ arm.standard_parameters(), arm.inverse_dynamics(q, qd, qdd)) < 1e-12


def test_batched_regressor_broadcasts_over_arms_and_traces(arm):
    q, qd, qdd = _states(arm, 12, (2, 5))
    y = arm.standard_regressor(q, qd, qdd)
    assert y.shape == (2, 5, arm.dof, 14 * arm.dof)
    # a batch of arms (gravity per arm) against a batch of states: (3 arms, 1, 5 states)
    gravities = jnp.array([[0.0, 0.0, -9.81], [0.0, -9.81, 0.0], [1.0, 2.0, -3.0]])
    arms = eqx.tree_at(lambda a: a.gravity, arm, gravities[:, None])
    batched = arms.standard_regressor(q[0], qd[0], qdd[0])
    assert batched.shape == (3, 5, arm.dof, 14 * arm.dof)
    for k in range(3):
        one = eqx.tree_at(lambda a: a.gravity, arm, gravities[k])
        assert _relative(batched[k], _jacobian(one, q[0], qd[0], qdd[0])) < 1e-12
    # traced: under jit and vmap the same numbers
    jitted = jax.jit(lambda q, qd, qdd: arm.standard_regressor(q, qd, qdd))(q, qd, qdd)
    mapped = jax.jit(jax.vmap(arm.standard_regressor))(q[0], qd[0], qdd[0])  # vmap traced, one program
    assert _relative(jitted, y) < 1e-14
    assert _relative(mapped, y[0]) < 1e-14
