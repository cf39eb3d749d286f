"""Output error's covariance with the torque reading's noise as an error in the input (``covariance="inputs"``).

``jaxid.estimate.logs.shooting_inputs`` propagates the raw torque's noise through the simulation to the
estimate, to first order: ``δθ = −S⁻¹ Σ_t K[t] δτ[t]``. Checked here against independent answers:

- **the estimator itself**: the raw torque changed by a noise-sized ``±δτ`` and refiltered, the fit rerun
  (scipy's trust region, converged): the central difference of the two estimates equals ``−S⁻¹ K δτ`` to
  a few hundredths of a standard deviation, on a change that moves parameters by up to ~3 of them;
- **the dense Jacobian**: without torque noise the covariance is ``[H⁻¹ J_aᵀJ_a H⁻¹]_θθ`` (``H = JᵀJ`` over
  ``θ`` and every state, ``J_a`` the angle rows) from ``jax.jacfwd`` of the whole residual vector;
- **a white noise of known std**: ``torque_noise_std`` recovers it from a log's part above the cut-off.

Bad options are refused in one line before any pass.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from _simulated_log import filtered_two_link
from test_output_error_streaming import dense_problem

import jaxid
from jaxid.estimate.logs import output_error, shooting_passes
from jaxid.estimate.logs.data import FilteredLog, angle_noise_std, torque_noise_std
from jaxid.estimate.logs.output_error import output_error_fit
from jaxid.estimate.logs.shooting import MISFIT_NOTE, covariance_envelope, sandwich
from jaxid.estimate.logs.shooting_inputs import input_noise_covariance, torque_response
from jaxid.estimate.logs.shooting_solvers import solve

TRF = "trust_region"


@pytest.fixture(scope="module")
def two_link(tmp_path_factory):
    return filtered_two_link(tmp_path_factory.mktemp("inputs"))


def _solution(logs, regressor, names, start):
    """``output_error``'s set-up and solver run by hand: ``(problem, solution)`` (trust region, 100 passes)."""
    fit = output_error_fit(
        logs=logs, regressor=regressor, names=names, start=start, segment_s=0.5, stride=5, continuity_weight=100.0,
        max_iterations=100, known=None, parametrisation=None, start_z=None, return_z=False, chunk_segments=64,
        substeps=None, lags=0, covariance="sandwich", torque_std=None, solver=TRF, damping=1e-6,
        parameter_tolerance=None,
    )  # fmt: skip
    return fit.problem, solve(fit.steps, fit.problem.linearise, fit.problem.evaluate)


def test_a_torque_change_moves_the_estimate_as_predicted(two_link):
    regressor, names, logs, ls = two_link
    problem, sol = _solution(logs, regressor, names, ls)
    request = problem.request(sol.par, sol.states)
    response, factor, _ = torque_response(problem, logs, sol.normal, request)
    # From the last pass's own angle rows (what the estimator does): the same K to round-off.
    blocks = sol.extra[0]
    assert blocks.rows is not None
    from_pass = torque_response(problem, logs, sol.normal, request, blocks)[0]
    for a, b in zip(response, from_pass, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-10 * np.abs(a).max())
    inverse = sandwich(factor, np.zeros((len(names), len(names))))[1]
    log = logs[0]
    delta = 0.01 * np.random.default_rng(1).standard_normal(log.tau_raw.shape)  # the log's own noise level
    predicted = -inverse @ np.einsum("tpj,tj->p", response[0], delta)

    def refit(sign):
        raw = np.asarray(log.tau_raw) + sign * delta
        changed = eqx.tree_at(lambda d: (d.tau, d.tau_raw), log, (jnp.asarray(log.band(raw)), jnp.asarray(raw)))
        est = output_error([changed], regressor, names, start=ls, solver=TRF, max_iterations=100)
        assert est.status == "ok"
        return est.value

    moved = 0.5 * (refit(1.0) - refit(-1.0))
    est = output_error(logs, regressor, names, start=ls, solver=TRF, covariance="inputs", torque_std=0.01)
    std = est.std
    assert np.max(np.abs(predicted) / std) > 1.0  # a change the check can see
    np.testing.assert_array_less(np.abs(moved - predicted), 0.08 * std)
    np.testing.assert_array_equal(est.value, output_error(logs, regressor, names, start=ls, solver=TRF).value)


def test_a_pass_too_large_to_keep_its_rows_gives_the_same_covariance(two_link, monkeypatch):
    """``shooting_passes.ROWS_BYTES``: a fit whose angle rows exceed it keeps none (``Blocks.rows`` is ``None``) and
    its input-noise covariance computes the sensitivities again: the same estimate and stds to round-off."""
    regressor, names, logs, ls = two_link
    options = dict(start=ls, solver=TRF, covariance="inputs", torque_std=0.01)
    kept = output_error(logs, regressor, names, **options)
    monkeypatch.setattr(shooting_passes, "ROWS_BYTES", 0)
    _, sol = _solution(logs, regressor, names, ls)
    assert sol.extra[0].rows is None
    dropped = output_error(logs, regressor, names, **options)
    np.testing.assert_array_equal(dropped.value, kept.value)
    np.testing.assert_allclose(dropped.std, kept.std, rtol=1e-9)


def test_without_torque_noise_it_is_the_dense_angle_covariance(two_link):
    regressor, names, logs, ls = two_link
    p = len(names)
    problem, sol = _solution(logs, regressor, names, ls)
    blocks, theta = sol.extra

    def model(std):
        return input_noise_covariance(
            problem, logs, sol.normal, blocks, problem.request(sol.par, sol.states), np.full(2, std)
        )[0]

    fun, jac, z0, _, angle_rows = dense_problem(logs, regressor, names, ls)
    j = np.asarray(jac(np.concatenate([theta, sol.states.reshape(-1)])))
    inverse = np.linalg.inv(j.T @ j)
    angles = j[:angle_rows]
    reference = (inverse @ angles.T @ angles @ inverse)[:p, :p]
    quiet = model(1e-30)
    np.testing.assert_allclose(quiet, reference, rtol=1e-6, atol=1e-8 * np.abs(reference).max())
    # the torque noise's part is not negligible at the log's own level
    assert np.all(np.diag(model(0.01)) > 2 * np.diag(quiet))


def test_the_estimate_reports_the_envelope_of_model_and_residuals(two_link):
    """``output_error``'s default covariance: at least the model's (``input_noise_covariance``) and at least the
    segment sandwich's (``covariance_envelope``), the larger along each direction of their joint diagonalisation."""
    regressor, names, logs, ls = two_link
    problem, sol = _solution(logs, regressor, names, ls)
    request = problem.request(sol.par, sol.states)
    est = output_error(logs, regressor, names, start=ls, solver=TRF, covariance="inputs", torque_std=0.01)
    assert est.status == "ok" and MISFIT_NOTE not in est.notes  # the misfit is said of a stopped fit only
    model = input_noise_covariance(problem, logs, sol.normal, sol.extra[0], request, np.full(2, 0.01))[0]
    sandwich_ = output_error(logs, regressor, names, start=ls, solver=TRF, covariance="sandwich").covariance
    np.testing.assert_allclose(est.covariance, covariance_envelope(model, sandwich_), rtol=1e-8, atol=0)
    for other in (model, sandwich_):
        assert np.linalg.eigvalsh(est.covariance - other).min() > -1e-9 * np.abs(est.covariance).max()
    assert np.linalg.eigvalsh(sandwich_ - model).max() > 0  # the residuals show more than the model in some direction


def test_a_fit_stopped_at_its_limit_reports_the_sandwich(two_link):
    """Away from an optimum the first-order propagation does not hold: the segment sandwich, said in the notes."""
    regressor, names, logs, ls = two_link
    stopped = output_error(logs, regressor, names, start=ls, solver=TRF, max_iterations=3, torque_std=0.01)
    sandwich_ = output_error(logs, regressor, names, start=ls, solver=TRF, max_iterations=3, covariance="sandwich")
    assert stopped.status == "max_iterations" and "covariance: the segment sandwich" in stopped.notes
    np.testing.assert_array_equal(stopped.covariance, sandwich_.covariance)
    # Its notes give the angle residuals' RMS in angle-noise stds: the per-joint residual stds [rad] over the
    # logs' angle noise, pooled (every joint has the same rows).
    said = float(stopped.notes.split(MISFIT_NOTE)[1].split("×")[0])
    pooled = np.sqrt(np.mean((np.asarray(stopped.residual_std) / angle_noise_std(logs)) ** 2))
    np.testing.assert_allclose(said, pooled, rtol=5e-3)


def test_covariance_envelope_is_the_larger_of_two():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 5))
    a = x @ x.T
    np.testing.assert_allclose(covariance_envelope(a, 0.3 * a), a, rtol=1e-12)
    np.testing.assert_allclose(covariance_envelope(a, 3.0 * a), 3.0 * a, rtol=1e-12)
    y = rng.standard_normal((5, 2))
    b = 5.0 * y @ y.T  # larger than a in at most two directions
    c = covariance_envelope(a, b)
    assert min(np.linalg.eigvalsh(c - a).min(), np.linalg.eigvalsh(c - b).min()) > -1e-12 * np.abs(c).max()
    assert np.linalg.matrix_rank(c - a, tol=1e-9 * np.abs(c).max()) == 2


def test_a_parametrised_fit_has_the_covariance_of_its_theta(two_link):
    """``θ = 2 z`` (a parametrisation, started at the same ``θ``): the estimate and covariance of plain output error."""
    regressor, names, logs, ls = two_link
    plain = output_error(logs, regressor, names, start=ls, solver=TRF, torque_std=0.01)
    doubled = output_error(
        logs, regressor, names, parametrisation=lambda z: 2.0 * z, start_z=ls.value / 2, solver=TRF, torque_std=0.01
    )
    np.testing.assert_allclose(doubled.value, plain.value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        doubled.covariance, plain.covariance, rtol=1e-6, atol=1e-9 * np.abs(plain.covariance).max()
    )


def test_torque_noise_std_recovers_a_white_noise():
    """A smooth torque plus white noise of 0.05 and 0.2 N m on a 500-Hz grid, filtered at 10 Hz."""
    h, n = 0.002, 5000
    t = np.arange(n) * h
    smooth = np.stack([np.sin(2 * np.pi * 0.7 * t), 3 * np.cos(2 * np.pi * 1.3 * t)], axis=1)
    noisy = smooth + np.random.default_rng(0).standard_normal((n, 2)) * np.array([0.05, 0.2])
    zeros = jnp.zeros((n, 2))
    log = FilteredLog(
        jnp.asarray(t), zeros, zeros, zeros, zeros, jnp.asarray(noisy), jnp.asarray(noisy), "white", h, 10.0,
        "butterworth", 100,
    )  # fmt: skip
    log = eqx.tree_at(lambda d: d.tau, log, jnp.asarray(log.band(noisy)))
    np.testing.assert_allclose(torque_noise_std([log]), [0.05, 0.2], rtol=0.03)


def test_bad_covariance_options_are_refused(two_link):
    regressor, names, logs, ls = two_link
    with pytest.raises(ValueError, match="covariance must be 'sandwich' or 'inputs', got 'input'"):
        output_error(logs, regressor, names, start=ls, covariance="input")
    with pytest.raises(ValueError, match="torque_std must be one positive number or 2"):
        output_error(logs, regressor, names, start=ls, covariance="inputs", torque_std=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="torque_std must be one positive number or 2"):
        output_error(logs, regressor, names, start=ls, covariance="inputs", torque_std=-0.1)
    with pytest.raises(ValueError, match="option 'covariance'"):
        jaxid.make_estimator("output_error", {"covariance": "white"})
