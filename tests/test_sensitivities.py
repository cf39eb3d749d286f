"""Forward sensitivities of a simulated segment (``jaxid.estimate.logs.sensitivities``) against
``jax.jacfwd`` of the plain simulation (``stepping.simulate_segments``) — autodiff of the same discrete
map, an independent route — on a three-joint arm with a prismatic joint, friction, offsets and fixed (``known``)
parameters, and on the two-link arm (the ``2 × 2`` Cramer path); one and two RK4 substeps."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _arms import tilted_prismatic

import jaxid
from jaxid.estimate.logs.sensitivities import (
    _unrolled_rates_and_sensitivities,
    model_step_jacobian,
    segment_sensitivities,
)
from jaxid.estimate.logs.stepping import model_step, simulate_segments, stage_torques
from jaxid.fit.model import BaseColumns, HeldTorque
from jaxid.model import SerialArm, base_parameters, standard_parameters

STEPS, H = 12, 0.01


def _model(arm, held_torque: bool = False):
    """``(regressor, known, θ)``: the base parameters, the last two held fixed (their torque ``known``: a plain
    function, or with ``held_torque`` the fit's ``HeldTorque``, which gives its standard vector)."""
    base = base_parameters(arm)
    values = np.asarray(base.values(standard_parameters(arm)))
    p = len(values)
    free, held = tuple(range(p - 2)), (p - 2, p - 1)
    if held_torque:
        regressor = BaseColumns(arm, base, free)
        return regressor, HeldTorque(BaseColumns(arm, base, held), values[list(held)]), jnp.asarray(values[:-2]) * 1.1
    if isinstance(arm, SerialArm):
        regressor, held_cols = BaseColumns(arm, base, free), BaseColumns(arm, base, held)
    else:  # the two-link arm: its base regressor's columns

        def regressor(q, qd, qdd):
            return jaxid.model.base_regressor(arm, q, qd, qdd, base)[..., list(free)]

        def held_cols(q, qd, qdd):
            return jaxid.model.base_regressor(arm, q, qd, qdd, base)[..., list(held)]

        held_cols.torque = lambda th, q, qd, qdd: held_cols(q, qd, qdd) @ th
    theta_held = jnp.asarray(values[list(held)])

    def known(q, qd, qdd):
        return held_cols.torque(theta_held, q, qd, qdd)

    return regressor, known, jnp.asarray(values[list(free)]) * 1.1


@pytest.mark.parametrize("substeps", [1, 2])
@pytest.mark.parametrize("which", ["three_joint_unrolled", "three_joint", "two_link"])
def test_sensitivities_equal_jacfwd_of_the_simulation(which, substeps):
    """``three_joint_unrolled``: the held parameters as the fit holds them (``HeldTorque``), so both the
    sensitivities (reverse mode through the unrolled inverse dynamics) and the simulation differentiated by
    ``jacfwd`` (forward mode through the unrolled forward dynamics) take the arm's unrolled path; the other
    two the generic one (``accelerations``' custom JVP against ``acceleration_sensitivities``)."""
    arm = jaxid.double_pendulum() if which == "two_link" else tilted_prismatic()
    regressor, known, theta = _model(arm, held_torque=which == "three_joint_unrolled")
    unrolled = _unrolled_rates_and_sensitivities(regressor, theta, known)
    assert (unrolled is not None) == (which == "three_joint_unrolled")  # the path taken
    n = arm.dof
    rng = np.random.default_rng(1)
    y0 = jnp.asarray(np.concatenate([rng.uniform(-1, 1, n) * 0.3, rng.uniform(-1, 1, n)]))
    torques = stage_torques(jnp.asarray(rng.normal(0, 2.0, (STEPS + 1, n))))

    def simulate(th, y):
        return simulate_segments(regressor, th, y[None], torques[None], H, known, substeps)[0]

    states_ref = jax.jit(simulate)(theta, y0)
    d_theta, d_y0 = jax.jit(jax.jacfwd(simulate, argnums=(0, 1)))(theta, y0)
    run = jax.jit(functools.partial(segment_sensitivities, regressor), static_argnums=(3, 4, 5))
    states, sens_q, sens_end = run(theta, y0, torques, H, known, substeps)
    np.testing.assert_allclose(states, states_ref, rtol=1e-12, atol=1e-14)
    reference = np.concatenate([d_theta, d_y0], axis=-1)  # (L + 1, 2 n, p + 2 n)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(sens_q, reference[:, :n], rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(sens_end, reference[-1], rtol=0, atol=1e-11 * scale)
    assert np.abs(reference[-1, :, : theta.size]).max() > 1e-3  # the parameters move the end state


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
@pytest.mark.parametrize("substeps", [1, "traced"])
def test_the_ekf_s_step_jacobian_equals_jacfwd_of_the_step(substeps):
    """``model_step_jacobian`` on the unrolled path (a ``lax.scan`` over samples under ``vmap`` over two models,
    the step index the barrier's predicate, as the log-side EKF runs it) against ``jax.jacfwd`` of ``model_step``,
    which differentiates the generic dynamics (``accelerations``' custom JVP); columns ``(y, θ)``. Substeps static
    and traced (the EKF's batch traces them)."""
    arm = tilted_prismatic()
    regressor, known, theta = _model(arm, held_torque=True)
    assert _unrolled_rates_and_sensitivities(regressor, theta, known) is not None
    n, rng = arm.dof, np.random.default_rng(2)
    thetas = jnp.stack([theta, theta * 0.9])
    ys = jnp.asarray(np.concatenate([rng.uniform(-0.3, 0.3, (2, 4, n)), rng.uniform(-1, 1, (2, 4, n))], axis=-1))
    stages = jnp.asarray(rng.normal(0, 2.0, (2, 4, 3, n)))
    count = 2 if substeps == "traced" else substeps

    def run(th, y, u):
        def body(_, data):
            yk, uk, k = data
            sub = jnp.asarray(count) if substeps == "traced" else count
            return None, model_step_jacobian(regressor, th, yk, uk, H, known, sub, k >= 0)

        return jax.lax.scan(body, None, (y, u, jnp.arange(y.shape[0])))[1]

    value, jac = jax.jit(jax.vmap(run))(thetas, ys, stages)

    def reference(th, y, u):
        def step(z):
            return model_step(regressor, z[2 * n :], z[: 2 * n], u, H, known, count)

        z = jnp.concatenate([y, th])
        return step(z), jax.jacfwd(step)(z)

    ref_value, ref_jac = jax.jit(jax.vmap(jax.vmap(reference, in_axes=(None, 0, 0))))(thetas, ys, stages)
    np.testing.assert_allclose(value, ref_value, rtol=1e-13, atol=1e-13)
    scale = np.abs(ref_jac).max()
    np.testing.assert_allclose(jac, ref_jac, rtol=0, atol=1e-11 * scale)
    assert np.abs(ref_jac[..., 2 * n :]).max() > 1e-4  # the parameters move the step
    # Off the unrolled path (no predicate) it is jacfwd of the step itself.
    value0, jac0 = jax.jit(lambda th, y, u: model_step_jacobian(regressor, th, y, u, H, known, count))(
        thetas[0], ys[0, 0], stages[0, 0]
    )
    np.testing.assert_allclose(jac0, ref_jac[0, 0], rtol=0, atol=1e-13 * scale)
