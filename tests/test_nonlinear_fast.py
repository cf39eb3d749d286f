"""``nonlinear_oe``'s coarse route (``route="coarse"``) and its parts, against independent answers.

The route fits on a coarse RK4 grid (Jacobian by forward differences, Hermite-interpolated to the
samples), then takes the Gauss-Newton step of the exact full-resolution residual. Checked here: the
state integrator against ``period_map`` and the Newton-shooting orbit, the interpolation on
cubics, the coarse Jacobian through the covariance it returns against the forward-mode Cramér–Rao
bound, exact recovery from noise-free data, and the optimum of the default route on noisy records.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _typecheck import package_errors

import jaxid
from jaxid.estimate.base import CONVERGED, ESTIMATORS
from jaxid.estimate.nonlinear import _coarsening, _hermite, nonlinear_crlb, nonlinear_output_error
from jaxid.simulation.steady_state import period_map, period_states, periodic_steady_state, torque_table

UNKNOWNS = ("m1", "m2", "fv1", "fv2")
PAPER_STD = 0.1 / math.sqrt(12)
N = 10_000  # samples per period: Table 2 (T = 100 s) at Δ = 0.01 s


@pytest.fixture(scope="module")
def split():
    return jaxid.table2("split")


@pytest.fixture(scope="module")
def large(arm):
    """Split lines at ×1.5 (the amplitude sweep's largest): link 2 swings past horizontal."""
    return jaxid.table2("split", 1.5)


@pytest.fixture(scope="module")
def clean(arm, split):
    """The noise-free record at Table 2 amplitudes (split lines, ×1, Δ = 0.01 s)."""
    return jaxid.simulate(arm, split)


@pytest.fixture(scope="module")
def noisy(clean):
    """160 Gaussian-noise records (σ = the paper's noise std) of ``clean``."""
    return jaxid.noise_draws(clean, key=jax.random.key(6), draws=160, kind="gaussian", level=PAPER_STD)


@pytest.fixture(scope="module")
def batch(arm, split, clean, noisy, large):
    """Clean record, the first three noisy records, one with a NaN sample (split lines, ×1), and a
    record at ×1.5 with the paper's noise; with each record's excitation (the scale is traced: one
    compile)."""
    noisy = jax.tree.map(lambda x: x[:3], noisy)
    bad = clean.replace(q=clean.q.at[17].set(jnp.nan))
    big = jax.tree.map(
        lambda x: x[0], jaxid.noise_draws(jaxid.simulate(arm, large), key=jax.random.key(0), draws=1, kind="uniform")
    )
    records = jax.tree.map(lambda c, n, b, g: jnp.concatenate([c[None], n, b[None], g[None]]), clean, noisy, bad, big)
    excitations = jax.tree.map(lambda *xs: jnp.stack(xs), *([split] * 5 + [large]))
    return records, excitations


@pytest.fixture(scope="module")
def bound(arm, split):
    """The forward-mode Cramér–Rao bound (``p x p`` covariance) at the truth."""
    return np.asarray(jax.jit(lambda a: nonlinear_crlb(a, split, UNKNOWNS, PAPER_STD))(arm))


def _fit(nominal, route, records, excitations):
    return jax.jit(
        jax.vmap(
            lambda r, e: nonlinear_output_error(r, e, nominal, unknowns=UNKNOWNS, noise_std=PAPER_STD, route=route)
        )
    )(records, excitations)


@pytest.fixture(scope="module")
def nominal(arm):
    """The nominal arm, its unknowns 10 % off (the start is ``ml``'s estimate)."""
    return arm.with_parameters(UNKNOWNS, arm.parameter_vector(UNKNOWNS) * 1.1)


@pytest.fixture(scope="module")
def fits(nominal, batch):
    """Both routes on the batch."""
    return {route: _fit(nominal, route, *batch) for route in ("coarse", "shooting")}


def test_period_states_equal_the_period_map(arm, split):
    table = torque_table(split)
    x0 = jnp.array([0.1, -0.2, 0.3, 0.05])  # off the orbit: the transient is in the samples
    x_end, q = jax.jit(lambda x: period_map(arm, table, x, samples_per_period=N))(x0)
    states, end = jax.jit(lambda x: period_states(arm, table, x, samples_per_period=N))(x0)
    np.testing.assert_allclose(states[:, :2], q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(end, x_end, rtol=0, atol=1e-12)


def test_lead_in_from_the_orbit_reproduces_the_orbit(arm, split):
    # Start a quarter period early from the Newton-shooting orbit's state there: the recorded
    # window is the orbit itself (the lead-in's torque indexing wraps the period correctly).
    orbit = jax.jit(lambda a: periodic_steady_state(a, split))(arm)
    table = torque_table(split)
    lead = N // 4
    run = jax.jit(lambda x, lead: period_states(arm, table, x, samples_per_period=N, lead_in=lead), static_argnums=1)
    on_orbit, _ = run(orbit.initial_state, 0)
    states, end = run(on_orbit[N - lead], lead)
    np.testing.assert_allclose(states[:, :2], orbit.q, rtol=0, atol=1e-10)
    np.testing.assert_allclose(states[0], orbit.initial_state, rtol=0, atol=1e-10)
    np.testing.assert_allclose(end, orbit.initial_state, rtol=0, atol=1e-10)


def test_hermite_interpolation_is_exact_for_cubics():
    t = np.linspace(0.0, 2.0, 9)  # 8 intervals of 0.25 s
    coeffs = np.array([[0.3, -1.2, 0.7, 2.0], [-0.5, 0.1, 1.5, -0.8]])  # two channels, cubic in t
    value = np.stack([np.polyval(c, t) for c in coeffs], -1)
    slope = np.stack([np.polyval(np.polyder(c), t) for c in coeffs], -1)
    out = _hermite(jnp.asarray(value), jnp.asarray(slope), 0.25, 5)
    fine = np.arange(40) * 0.05
    np.testing.assert_allclose(out, np.stack([np.polyval(c, fine) for c in coeffs], -1), rtol=0, atol=1e-13)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_noise_free_returns_truth(arm, fits):
    """Table 2 amplitudes, split lines: link 2 far from linear. Shared lines: ``test_nonlinear.py``."""
    est = fits["coarse"]
    assert int(est.status[0]) == CONVERGED
    np.testing.assert_allclose(est.value[0], arm.parameter_vector(UNKNOWNS), rtol=1e-9)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_covariance_is_the_forward_mode_bound(fits, bound):
    # At the noise-free estimate the covariance is σ² (JᵀJ)⁻¹ with the route's coarse
    # finite-difference Jacobian; the bound uses forward-mode tangents at full resolution.
    np.testing.assert_allclose(fits["coarse"].covariance[0], bound, rtol=1e-4)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_noisy_records_reach_the_default_routes_optimum(fits, bound):
    coarse, shooting = fits["coarse"], fits["shooting"]
    assert np.all(np.asarray(coarse.status[:4]) == CONVERGED)
    assert np.all(np.asarray(shooting.status[:4]) == CONVERGED)
    std = np.sqrt(np.diag(bound))
    diff = np.abs(np.asarray(coarse.value[1:4]) - np.asarray(shooting.value[1:4]))
    # The coarse Jacobian (relative error ~1e-5) moves the optimum by about that fraction of a
    # standard error; measured ~1e-4 of the bound.
    assert np.all(diff <= 2e-3 * std), diff / std


@pytest.mark.slow
def test_noisy_std_within_20_percent_of_crlb(arm, split, noisy, nominal, fits, bound):
    """The default route on the 160 noisy records, one compiled vmapped call."""
    trials = 160
    excitations = jax.tree.map(lambda x: jnp.broadcast_to(x, (trials, *jnp.shape(x))), split)
    est = _fit(nominal, "coarse", noisy, excitations)
    assert np.all(np.asarray(est.status) == CONVERGED)
    std_bound = np.sqrt(np.diag(bound))
    values = np.asarray(est.value)
    np.testing.assert_allclose(values.std(axis=0, ddof=1) / std_bound, 1.0, atol=0.2)
    # Unbiased to within the Monte Carlo error (4 standard errors).
    assert np.all(np.abs(values.mean(0) - arm.parameter_vector(UNKNOWNS)) < 4 * std_bound / math.sqrt(trials))
    # The reported covariance is the bound evaluated at the estimate.
    np.testing.assert_allclose(np.sqrt(np.diagonal(est.covariance, axis1=1, axis2=2)) / std_bound, 1.0, atol=0.05)
    # A trial depends on its own record only: the same three records in the 6-record batch (with
    # a NaN record and a ×1.5 record beside them) give the same estimates.
    np.testing.assert_allclose(values[:3], np.asarray(fits["coarse"].value[1:4]), rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(est.status[:3]), np.asarray(fits["coarse"].status[1:4]))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_failed_record_has_a_status(fits):
    assert int(fits["coarse"].status[4]) != CONVERGED


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_start_over_the_top_is_replaced_by_the_segment_fit(arm, large, batch, nominal, fits):
    # At ×1.5 with the paper's noise the start (ml's estimate: linearisation bias, m2 ~12 % low)
    # puts link 2 over the top once a period: from the true orbit's state, its orbit slips 2π a
    # period. The coarse route must detect that and reach the default route's optimum.
    record = jax.tree.map(lambda x: x[5], batch[0])
    start = jax.jit(lambda r: ESTIMATORS["ml"](r, large, nominal, unknowns=UNKNOWNS).value)(record)
    orbit = jax.jit(lambda a: periodic_steady_state(a, large))(arm)
    assert bool(orbit.converged)
    table = torque_table(large)
    relax = jax.jit(lambda a, x: period_map(a, table, x, samples_per_period=N)[0])
    x1 = relax(arm.with_parameters(UNKNOWNS, start), orbit.initial_state)
    x2 = relax(arm.with_parameters(UNKNOWNS, start), x1)
    assert abs(abs(float(x2[1] - x1[1])) - 2 * math.pi) < 1e-6  # link 2: one turn a period
    coarse, shooting = fits["coarse"], fits["shooting"]
    assert int(coarse.status[5]) == CONVERGED and int(shooting.status[5]) == CONVERGED
    std = np.sqrt(np.diag(np.asarray(shooting.covariance[5])))
    diff = np.abs(np.asarray(coarse.value[5]) - np.asarray(shooting.value[5]))
    assert np.all(diff <= 2e-2 * std), diff / std


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_coarse_step_is_checked_and_divides_the_period(arm, split, batch):
    assert _coarsening(0.04, 0.01, 10_000) == 4
    assert _coarsening(0.04, 0.05, 2_000) == 1
    assert _coarsening(0.07, 0.01, 10_000) == 5  # 7 does not divide 10 000
    record = jax.tree.map(lambda x: x[0], batch[0])
    for bad in (0.0, -0.04, "0.04", True):
        with package_errors(), pytest.raises(ValueError, match="coarse_step"):
            nonlinear_output_error(record, split, arm, unknowns=UNKNOWNS, route="coarse", coarse_step=bad)
    with pytest.raises(ValueError, match="route"):
        nonlinear_output_error(record, split, arm, unknowns=UNKNOWNS, route="fastest")
