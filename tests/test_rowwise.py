"""Per-sample functions over logs of any length (``jaxid.estimate.logs.data.rowwise``) and each compared
model's own RK4 substeps in a fit's free simulations (``jaxid.fit.tables.simulation_substeps``)."""

import types

import jax.numpy as jnp
import numpy as np
import pytest
from test_substeps import POLES, THETA, H, _log, exact, regressor

from jaxid.estimate.logs.data import ROW_BLOCK, _rows_block, model_torque, rowwise
from jaxid.estimate.logs.validation import free_simulation, torque_prediction
from jaxid.fit.tables import simulation_substeps


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 1)), rng.normal(size=(n, 1)), rng.normal(size=(n, 1))


@pytest.mark.parametrize("n", [1, ROW_BLOCK - 1, ROW_BLOCK, ROW_BLOCK + 1, 2 * ROW_BLOCK + 300])
def test_rowwise_equals_the_whole_evaluation_at_every_length(n):
    q, qd, qdd = _rows(n, seed=n)
    whole = np.asarray(regressor(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
    blocks = rowwise(regressor, q, qd, qdd)
    assert blocks.shape == whole.shape == (n, 1, 3)
    np.testing.assert_array_equal(blocks, whole)  # row-independent: the padding never leaks into a row
    torque = rowwise(model_torque, q, qd, qdd, static=(regressor,), args=(THETA,))
    np.testing.assert_allclose(torque, whole @ np.asarray(THETA), rtol=1e-15, atol=1e-14)


def test_rowwise_compiles_once_for_every_length():
    rowwise(regressor, *_rows(7))  # compiled for this regressor and trailing shapes
    before = _rows_block._cache_size()
    for n in (5, 333, ROW_BLOCK + 17, 3 * ROW_BLOCK):
        rowwise(regressor, *_rows(n))
    assert _rows_block._cache_size() == before


def test_each_model_simulated_with_its_own_substeps():
    # The stiff joint needs ⌈h |s₂| / 2.5⌉ = 3 substeps; the same joint 100 times less damped needs 1.
    soft = THETA.at[1].set(THETA[1] / 100)
    log = _log()
    model = types.SimpleNamespace(regressor=regressor)
    substeps = simulation_substeps(model, {"stiff": THETA, "soft": soft}, {"run": log})
    assert substeps == {"stiff": int(np.ceil(H * np.abs(POLES).max() / 2.5)), "soft": 1}
    # With its own count the stiff model follows its exact solution once the fast mode (|s₂| = 598/s) has
    # decayed, which RK4 at its stability limit damps inexactly for a few samples; one step per sample diverges.
    steps = 100
    states = free_simulation(log, regressor, THETA, np.array([0]), steps, substeps["stiff"])[0]
    q, v = exact(H * np.arange(steps + 1), 0.3, -2.0)
    np.testing.assert_allclose(states[:, 0], q, atol=1e-4)
    np.testing.assert_allclose(states[5:, 0], q[5:], atol=1e-7)
    diverged = free_simulation(log, regressor, THETA, np.array([0]), steps, 1)[0]
    assert not np.all(np.abs(diverged[:, 0] - q) < 1e-3)
    # The torque prediction is the same through the blocks as the model's torque on the whole log.
    whole = np.asarray(model_torque(regressor, THETA, log.q, log.qd, log.qdd))
    np.testing.assert_allclose(torque_prediction(log, regressor, THETA, band=False), whole, rtol=1e-14, atol=1e-12)


@pytest.mark.parametrize("kind", ["ekf", "ukf"])
def test_padded_filter_steps_leave_the_kalman_filter_as_it_was(kind):
    # A damped oscillator observed in noise: the filter over T samples, and over T + 13 with the last 13
    # masked (wild values in them), end in the same state, covariance and likelihood.
    from jaxid.estimate.kalman.filters import extended_kalman_filter, unscented_kalman_filter

    run = extended_kalman_filter if kind == "ekf" else unscented_kalman_filter
    a = jnp.asarray([[1.0, 0.01], [-0.05, 0.99]])
    rng = np.random.default_rng(4)
    T, pad = 60, 13
    ys = jnp.asarray(np.sin(0.2 * np.arange(T))[:, None] + 0.1 * rng.normal(size=(T, 1)))
    args = (lambda x, u: a @ x + u, lambda x: x[:1], 1e-4 * jnp.eye(2), 0.01 * jnp.eye(1), jnp.zeros(2), jnp.eye(2))
    inputs = jnp.asarray(0.01 * rng.normal(size=(T, 2)))
    plain = run(*args, ys, inputs)
    padded_y = jnp.concatenate([ys, 1e6 * jnp.ones((pad, 1))])
    padded_u = jnp.concatenate([inputs, 1e6 * jnp.ones((pad, 2))])
    masked = run(*args, padded_y, padded_u, valid=jnp.arange(T + pad) < T)
    np.testing.assert_allclose(masked.final_mean, plain.final_mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(masked.final_covariance, plain.final_covariance, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(masked.log_likelihood, plain.log_likelihood, rtol=1e-13)
    np.testing.assert_allclose(masked.filtered_means[:T], plain.filtered_means, rtol=1e-13, atol=1e-15)
