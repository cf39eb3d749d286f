"""Nonlinear output-error estimator, its Cramér–Rao bound and the periodic shooting solver."""

import math

import jax
import numpy as np
import pytest

import jaxid
from jaxid.estimate.base import CONVERGED
from jaxid.estimate.crlb import fisher_information
from jaxid.estimate.nonlinear import nonlinear_crlb, nonlinear_fisher, nonlinear_output_error
from jaxid.simulation.steady_state import periodic_steady_state

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


@pytest.mark.parametrize("lines", ["same", "split"])
def test_shooting_orbit_equals_simulated_steady_state(arm, records, lines):
    orbit = jax.jit(lambda a: periodic_steady_state(a, jaxid.table2(lines)))(arm)
    assert bool(orbit.converged)
    assert float(orbit.defect) < 1e-10
    np.testing.assert_allclose(orbit.q, records[lines].q, atol=1e-9)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_one_pass_sensitivities_equal_implicit_differentiation(arm):
    # nonlinear_fisher (one tangent pass, reduced to the periodic orbit) against jax.jacfwd of the
    # Newton shooting solve (implicit function theorem), through the generic crlb.fisher_information.
    # Both on the same grid, Δ = 0.05 s (an identity between two derivatives of one discretised
    # orbit holds at any step; Table 2 amplitudes keep link 2 far from linear).
    ex = jaxid.table2("split")
    theta = arm.parameter_vector(UNKNOWNS)
    dt = 0.05
    f_implicit = jax.jit(
        lambda th: fisher_information(
            lambda t: periodic_steady_state(arm.with_parameters(UNKNOWNS, t), ex, sample_step=dt).q,
            th,
            noise_std=PAPER_STD,
        )
    )(theta)
    f_pass = jax.jit(lambda a: nonlinear_fisher(a, ex, UNKNOWNS, PAPER_STD, sample_step=dt, fit_offset=False))(arm)
    np.testing.assert_allclose(f_pass, f_implicit, rtol=1e-7)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_noise_free_returns_truth_on_shared_lines(arm, records, wrong_nominal):
    """Table 2 amplitudes, scale 1, the same lines on both joints: link 2 far from linear; default
    start (ML / inverse dynamics). Split lines: ``test_nonlinear_fast.py``, whose batch holds the
    same record with the same nominal and also checks noisy records, a failed record and the
    over-the-top start."""
    ex = jaxid.table2("same")
    est = jax.jit(lambda r: nonlinear_output_error(r, ex, wrong_nominal, unknowns=UNKNOWNS, noise_std=PAPER_STD))(
        records["same"]
    )
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
    from jaxid.estimate.crlb import linear_crlb

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
