"""Physically consistent output error (``jaxid.estimate.logs.output_error_consistent``) on a short
simulated UR5 log: the constrained Gauss–Newton converges (status ``"ok"``) well inside its budget,
its estimate is a physically consistent arm whose base values are the estimate, and its cost is no
worse than the log-Cholesky route's (``output_error`` over ``θ = to_model(standard_from_unconstrained(z))``,
the estimator before) after the same number of passes."""

import importlib
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate import OutputError
from jaxid.estimate.consistency import is_physically_consistent, project_to_consistent, unconstrained_from_standard
from jaxid.estimate.logs import ConsistentMap, RegressionModel, consistent_estimate, filter_log, idim_ls, output_error
from jaxid.excitation.fourier import random_fourier_trajectory
from jaxid.measure.logs import MeasuredLog

UR5 = Path(__file__).resolve().parent.parent / "data" / "robots" / "ur5_robot.urdf"
CONSISTENT = importlib.import_module("jaxid.estimate.logs.output_error_consistent")
PLAIN = importlib.import_module("jaxid.estimate.logs.output_error")


@pytest.fixture(scope="module")
def ur5_log():
    from jaxid.fit.model import BaseColumns
    from jaxid.model.urdf import load_arm

    nominal = load_arm(UR5, armature=[0.2, 0.2, 0.1, 0.02, 0.02, 0.02])
    arm = eqx.tree_at(lambda a: a.viscous, nominal, nominal.viscous + 0.5)
    base = jaxid.base_parameters(arm)
    regressor = BaseColumns(arm, base, tuple(range(len(base.names))))
    period, step = 1.5, 0.002
    key = jax.random.key(3)
    t = np.arange(int(round(period / step)) + 1) * step
    q, qd, qdd = (np.asarray(x) for x in random_fourier_trajectory(arm, 5, period, key=key, margin=0.8).evaluate(t))
    tau = np.asarray(arm.inverse_dynamics(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
    rng = np.random.default_rng(3)
    q_meas, tau_meas = q + 1e-4 * rng.standard_normal(q.shape), tau + 0.05 * rng.standard_normal(tau.shape)
    log = MeasuredLog(jnp.asarray(t), jnp.asarray(q_meas), jnp.asarray(tau_meas), None, "ur5", step, (), t.size)
    logs = [filter_log(log, 10.0, trim_s=0.1)]

    def standard_regressor(q, qd, qdd):
        return arm.standard_regressor(q, qd, qdd)

    model = RegressionModel(regressor, base.names, consistent=ConsistentMap(arm, standard_regressor, base.values))
    return arm, base, model, logs, idim_ls(logs, regressor, base.names)


def _with_cost(module, call):
    """``(call(), ½ |r|² at its solution)``, read off the ``Solution`` the module's fit ends with."""
    seen = []
    if module is PLAIN:
        original = module.solve

        def spy(*args, **kwargs):
            result = original(*args, **kwargs)
            seen.append(result if hasattr(result, "normal") else result[0])  # the trust region's, Gauss–Newton's
            return result

        module.solve = spy
    else:
        original = module.shooting_identification

        def spy(problem, names, normal, blocks, theta, sol, *args, **kwargs):
            seen.append(sol)
            return original(problem, names, normal, blocks, theta, sol, *args, **kwargs)

        module.shooting_identification = spy
    try:
        out = call()
    finally:
        setattr(module, "solve" if module is PLAIN else "shooting_identification", original)
    return out, seen[-1].normal.cost


@pytest.mark.slow
def test_consistent_output_error_converges_to_a_consistent_arm(ur5_log):
    arm, base, model, logs, ls = ur5_log
    est, cost = _with_cost(
        CONSISTENT, lambda: OutputError(constraint="consistent", max_iterations=100)(logs, model, start=ls)
    )
    assert est.status == "ok", est.notes
    assert est.iterations <= 60, est.notes  # budget 100
    assert "constrained Gauss–Newton" in est.notes
    assert bool(is_physically_consistent(est.standard))
    np.testing.assert_allclose(est.value, np.asarray(base.values(jnp.asarray(est.standard))), rtol=1e-9, atol=1e-12)
    assert np.all(np.isfinite(est.std))
    # The log-Cholesky route (the estimator before) from the same start, with as many passes.
    standard = consistent_estimate(logs, model.consistent, start=ls).standard
    z0 = unconstrained_from_standard(project_to_consistent(standard, floor=1e-2))
    _, old_cost = _with_cost(
        PLAIN,
        lambda: output_error(
            logs,
            model.regressor,
            model.names,
            parametrisation=model.consistent.parametrisation,
            start_z=np.asarray(z0),
            max_iterations=est.iterations + 5,
            solver="trust_region",
        ),
    )
    assert cost <= old_cost * (1 + 1e-9), (cost, old_cost)
