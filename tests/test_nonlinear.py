"""Nonlinear output-error estimator, its Cramér–Rao bound and the periodic shooting solver."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.crlb import fisher_information
from jaxid.estimators.base import CONVERGED
from jaxid.estimators.nonlinear import nonlinear_crlb, nonlinear_fisher, nonlinear_output_error
from jaxid.steady_state import periodic_steady_state

UNKNOWNS = ("m1", "m2", "fv1", "fv2")
PAPER_STD = 0.1 / math.sqrt(12)


@pytest.fixture(scope="module")
def records(arm):
    """Noise-free nonlinear records at Table 2 amplitudes (scale 1), both line layouts."""
    return {lines: jaxid.simulate(arm, jaxid.table2(lines)) for lines in ("same", "split")}


@pytest.fixture(scope="module")
def wrong_nominal(arm):
    # The nominal's values of the unknowns are the last-resort start: make them wrong (+10 %).
    return arm.with_parameters(UNKNOWNS, arm.parameter_vector(UNKNOWNS) * 1.1)


@pytest.fixture(scope="module")
def fit_one(wrong_nominal):
    """``fit_one(lines)``: the jitted single-record fit from the wrong nominal, compiled once per
    line layout and shared by the tests that need it."""
    fits = {}

    def get(lines):
        if lines not in fits:
            ex = jaxid.table2(lines)
            fits[lines] = jax.jit(
                lambda r: nonlinear_output_error(r, ex, wrong_nominal, unknowns=UNKNOWNS, noise_std=PAPER_STD)
            )
        return fits[lines]

    return get


@pytest.mark.parametrize("lines", ["same", "split"])
def test_shooting_orbit_equals_simulated_steady_state(arm, records, lines):
    orbit = jax.jit(lambda a: periodic_steady_state(a, jaxid.table2(lines)))(arm)
    assert bool(orbit.converged)
    assert float(orbit.defect) < 1e-10
    np.testing.assert_allclose(orbit.q, records[lines].q, atol=1e-9)


def test_one_pass_sensitivities_equal_implicit_differentiation(arm):
    # nonlinear_fisher (one tangent pass, reduced to the periodic orbit) against jax.jacfwd of the
    # Newton shooting solve (implicit function theorem), through the generic crlb.fisher_information.
    ex = jaxid.table2("split")
    theta = arm.parameter_vector(UNKNOWNS)
    f_implicit = jax.jit(
        lambda th: fisher_information(
            lambda t: periodic_steady_state(arm.with_parameters(UNKNOWNS, t), ex).q, th, noise_std=PAPER_STD
        )
    )(theta)
    f_pass = nonlinear_fisher(arm, ex, UNKNOWNS, PAPER_STD, fit_offset=False)
    np.testing.assert_allclose(f_pass, f_implicit, rtol=1e-7)


@pytest.mark.parametrize("lines", ["same", "split"])
def test_noise_free_returns_truth(arm, records, fit_one, lines):
    """Table 2 amplitudes, scale 1: link 2 far from linear; default start (ML / inverse dynamics)."""
    est = fit_one(lines)(records[lines])
    truth = arm.parameter_vector(UNKNOWNS)
    assert int(est.status) == CONVERGED
    np.testing.assert_allclose(est.value, truth, rtol=1e-6)


def test_noise_free_from_perturbed_start(arm, records):
    ex = jaxid.table2("same")
    truth = arm.parameter_vector(UNKNOWNS)
    est = nonlinear_output_error(records["same"], ex, arm, unknowns=UNKNOWNS, initial=truth * 1.05)
    assert int(est.status) == CONVERGED
    np.testing.assert_allclose(est.value, truth, rtol=1e-6)
    assert est.history.shape == (30, 4)


@pytest.mark.slow
def test_noisy_std_within_20_percent_of_crlb(arm, records, wrong_nominal, fit_one):
    """160 Gaussian-noise trials at Table 2 amplitudes (split lines), one compiled vmapped call."""
    ex = jaxid.table2("split")
    trials = 160
    noisy = jaxid.noise_draws(records["split"], key=jax.random.key(6), draws=trials, kind="gaussian", level=PAPER_STD)
    truth = arm.parameter_vector(UNKNOWNS)
    est = jax.jit(
        jax.vmap(lambda r: nonlinear_output_error(r, ex, wrong_nominal, unknowns=UNKNOWNS, noise_std=PAPER_STD))
    )(noisy)
    assert np.all(np.asarray(est.status) == CONVERGED)
    bound = np.sqrt(np.diag(nonlinear_crlb(arm, ex, UNKNOWNS, PAPER_STD)))
    std = np.asarray(est.value).std(axis=0, ddof=1)
    np.testing.assert_allclose(std / bound, 1.0, atol=0.2)
    # Unbiased to within the Monte Carlo error (4 standard errors).
    assert np.all(np.abs(np.asarray(est.value).mean(0) - truth) < 4 * bound / math.sqrt(trials))
    # The reported covariance is the bound evaluated at the estimate.
    np.testing.assert_allclose(np.sqrt(np.diagonal(est.covariance, axis1=1, axis2=2)) / bound, 1.0, atol=0.05)
    # vmap agrees with a single call (the single-record fit compiled for the noise-free test).
    one = fit_one("split")(jax.tree.map(lambda x: x[3], noisy))
    np.testing.assert_allclose(one.value, est.value[3], rtol=1e-9)


def test_failed_fit_has_status_not_silent_nan(arm, records):
    ex = jaxid.table2("split")
    rec = records["split"]
    bad = rec.replace(q=rec.q.at[5].set(jnp.nan))
    truth = arm.parameter_vector(UNKNOWNS)
    est = nonlinear_output_error(bad, ex, arm, unknowns=UNKNOWNS, initial=truth, max_iterations=3)
    assert int(est.status) != CONVERGED


def test_structural_errors_raise(arm, records):
    rec = records["split"]
    with pytest.raises(ValueError, match="Unknown parameter name"):
        nonlinear_output_error(rec, jaxid.table2("split"), arm, unknowns=("m1", "d11"))
    with pytest.raises(ValueError, match="period"):
        nonlinear_output_error(rec, jaxid.table2("split", fundamental=2 * math.pi * 0.1), arm, unknowns=UNKNOWNS)
    with pytest.raises(ValueError, match="initial"):
        nonlinear_output_error(rec, jaxid.table2("split"), arm, unknowns=UNKNOWNS, initial=(1.0, 2.0))


def test_nonlinear_bound_close_to_linear_bound_at_small_amplitude(arm):
    # At small amplitude the nonlinear arm is its linearisation: the two bounds agree.
    from jaxid.crlb import linear_crlb

    ex = jaxid.table2("split", scale=0.02)
    nl = np.sqrt(np.diag(nonlinear_crlb(arm, ex, UNKNOWNS, 1e-3)))
    lin = np.sqrt(np.diag(linear_crlb(arm, ex, UNKNOWNS, noise_std=1e-3)))
    np.testing.assert_allclose(nl, lin, rtol=0.02)


def test_route_options_are_checked(arm, records):
    ex = jaxid.table2("split")
    with pytest.raises(ValueError, match="route"):
        nonlinear_output_error(records["split"], ex, arm, unknowns=UNKNOWNS, route="fast")
    with pytest.raises(ValueError, match="route"):
        nonlinear_output_error(records["split"], ex, arm, unknowns=UNKNOWNS, route="warm")  # removed
