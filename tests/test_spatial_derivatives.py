"""The analytic derivatives of a ``SerialArm``'s inverse dynamics (``jaxid.model.spatial_derivatives``) against
``jax.jacfwd`` of ``SerialArm.inverse_dynamics`` (an independent route: autodiff of the primal recursion), on the
two-link URDF, the UR5, the Panda and a revolute–prismatic–revolute arm with tilted frames, armature, viscous and
Coulomb friction, offsets and a tilted gravity, at random states; and the log side's accelerations, whose
sensitivities now use them, against differentiating the mass-matrix solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_unrolled import _arm, _relative, _with_joint_terms

from jaxid.model.serial_dynamics import _joints
from jaxid.model.spatial_derivatives import inverse_dynamics_derivatives, rnea_tangents

B = 8


@pytest.mark.parametrize("name", ["two_link", "ur5", "panda", "prismatic"])
def test_derivatives_equal_autodiff_of_the_inverse_dynamics(name):
    arm = _with_joint_terms(_arm(name), seed=len(name) + 1)
    n = arm.dof
    rng = np.random.default_rng(2)
    q, qd, qdd = (jnp.asarray(rng.uniform(-s, s, (B, n))) for s in (3.0, 2.0, 5.0))
    standard = arm.standard_parameters()

    def ours(q, qd, qdd):
        return inverse_dynamics_derivatives(arm, standard, q, qd, qdd, ("q", "qd", "qdd"))

    def autodiff(q, qd, qdd):
        return arm.inverse_dynamics(q, qd, qdd), jax.jacfwd(arm.inverse_dynamics, argnums=(0, 1, 2))(q, qd, qdd)

    (tau, blocks), (tau_ref, blocks_ref) = jax.jit(jax.vmap(ours))(q, qd, qdd), jax.vmap(autodiff)(q, qd, qdd)
    assert _relative(tau, tau_ref) < 1e-12
    for ours_block, ref_block in zip(blocks, blocks_ref, strict=True):
        assert _relative(ours_block, ref_block) < 1e-12
    # the mass matrix is ∂τ/∂q'' (the composite rigid body algorithm's, an independent recursion)
    assert _relative(blocks[2], arm.mass_matrix(q)) < 1e-12


def test_tangents_take_any_subset_of_directions_and_refuse_unknown_ones():
    arm = _arm("ur5")
    n = arm.dof
    rng = np.random.default_rng(3)
    q, qd, qdd = (jnp.asarray(rng.uniform(-1, 1, (n, B))) for _ in range(3))
    inertial = arm.inertial
    joints = _joints(arm)
    _, every = rnea_tangents(joints, q, inertial, arm.gravity, qd, qdd, ("q", "qd", "qdd"))
    _, some = rnea_tangents(joints, q, inertial, arm.gravity, qd, qdd, ("qdd", "q"))
    np.testing.assert_allclose(some[:, :n], every[:, 2 * n :], rtol=0, atol=1e-12 * float(jnp.abs(every).max()))
    np.testing.assert_allclose(some[:, n:], every[:, :n], rtol=0, atol=1e-12 * float(jnp.abs(every).max()))
    with pytest.raises(ValueError, match="unknown direction"):
        rnea_tangents(joints, q, inertial, arm.gravity, qd, qdd, ("qddd",))


def test_log_accelerations_derivatives_take_the_analytic_path_and_equal_autodiff_of_the_solve():
    """``accelerations``' custom JVP, on a base-parameter model of the UR5 holding a third of its parameters
    (``BaseColumns`` + ``HeldTorque``: ``data.standard_vector``'s fast path), equals ``jax.jacfwd`` of the
    plain solve ``D⁻¹ (τ − b)`` built from the model torque (mass matrix by autodiff, ``jnp.linalg.solve``)
    to 1e-10; the same model with the held torque as a plain function takes the generic path."""
    from jaxid.estimate.logs import data
    from jaxid.fit.model import BaseColumns, HeldTorque
    from jaxid.model import base_parameters

    arm = _with_joint_terms(_arm("ur5"), seed=7)
    base = base_parameters(arm)
    values = np.asarray(base.values(arm.standard_parameters()))
    held = tuple(range(0, len(values), 3))
    free = tuple(i for i in range(len(values)) if i not in held)
    regressor = BaseColumns(arm, base, free)
    known = HeldTorque(BaseColumns(arm, base, held), values[list(held)])
    plain = lambda q, qd, qdd: known(q, qd, qdd)  # noqa: E731 (no standard vector)
    assert data.standard_vector(regressor, known) is not None and data.standard_vector(regressor, plain) is None
    theta = jnp.asarray(values[list(free)])
    rng = np.random.default_rng(4)
    n = arm.dof
    q, qd, tau = (jnp.asarray(rng.uniform(-s, s, n)) for s in (2.0, 1.5, 20.0))

    def solve(th, q, qd, tau):
        def torque(qdd):
            return data.model_torque(regressor, th, q, qd, qdd, known)

        zero = jnp.zeros_like(q)
        return jnp.linalg.solve(jax.jacfwd(torque)(zero), tau - torque(zero))

    args = (theta, q, qd, tau)
    reference = jax.jacfwd(solve, argnums=(0, 1, 2, 3))(*args)
    for model in (known, plain):
        ours = jax.jacfwd(lambda *a, k=model: data.accelerations(regressor, *a, k), argnums=(0, 1, 2, 3))(*args)
        for a, b in zip(ours, reference, strict=True):
            assert _relative(a, b) < 1e-10
