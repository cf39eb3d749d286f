"""ML by closed-form Gauss–Newton (``solver="gauss_newton"`` on affine unknowns): the same estimate
as the generic optimiser, an exact Jacobian, the truth on noise-free data, honest statuses, and a
trial's result independent of its batch."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate import CONVERGED, FAILED, MAX_ITERATIONS, equation_error_fit, ml_fit, parameter_values
from jaxid.estimate.equation_error import line_variance
from jaxid.estimate.ml import (
    _normal_equations,
    gauss_newton_affine,
    gauss_newton_covariance,
    levenberg_marquardt,
    output_error_residual,
)
from jaxid.linalg import inverse_2x2
from jaxid.measure.noise import add_line_noise
from jaxid.measure.spectrum import fourier_coefficients
from jaxid.simulation.linearisation import affine_impedance, impedance_model

UNKNOWNS = ("m1", "m2", "fv1", "fv2")
TRIALS = 64  # one batch shape throughout: the compiled fits are shared by the tests


@pytest.fixture(scope="module")
def setup():
    arm = jaxid.point_mass()
    exc = jaxid.table2("split", scale=0.25)
    rec = jaxid.simulate(arm, exc, sample_step=0.05, measured_periods=1, discard_periods=2)
    return arm, jax.jit(lambda r: fourier_coefficients(r, exc))(rec)


@pytest.fixture(scope="module")
def fast(setup):
    return _fast(setup[0])


def _noisy(clean, level, trials, seed=1):
    keys = jax.random.split(jax.random.key(seed), trials)
    return jax.jit(jax.vmap(lambda k: add_line_noise(clean, key=k, level=level)))(keys)


_GAUSS_NEWTON = jax.jit(gauss_newton_affine)  # max_steps traced: one compile for every value


def _fast(arm, **kw):
    """The closed-form route, ``(spectra, noise std) -> Estimate`` (σ traced: one compile for all levels)."""
    fit = lambda s, level: ml_fit(s, arm, unknowns=UNKNOWNS, noise_std=level, solver="gauss_newton", **kw)  # noqa: E731
    return jax.jit(jax.vmap(fit, in_axes=(0, None)))


def _generic(arm, **kw):
    """The generic route: optimistix Gauss–Newton on ``output_error_residual`` (autodiff Jacobian),
    ``(spectra, noise std) -> (θ̂, (JᵀJ)⁻¹, equation-error start)``."""

    def one(s, level):
        residual = output_error_residual(s, arm, UNKNOWNS, line_variance(s, level))
        start = equation_error_fit(s, arm, unknowns=UNKNOWNS, noise_std=level).value
        theta, _ = levenberg_marquardt(residual, start, solver="gauss_newton", **kw)
        return theta, gauss_newton_covariance(residual, theta)[0], start

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_same_estimate_as_the_generic_optimiser(setup, fast):
    """Against optimistix run to the optimum (rtol 1e-14): the closed-form route stops within 1e-10
    relative of it (its tolerance), on 64 trials per level from well inside the bound to 0.1 rad
    at N = 2000 (5 to 20 steps)."""
    arm, clean = setup
    generic = _generic(arm, rtol=1e-14, atol=1e-16, max_steps=300)
    for seed, level in enumerate((0.003, 0.03, 0.1)):
        spectra = _noisy(clean, level, TRIALS, seed=seed)
        estimate = fast(spectra, level)
        optimum, covariance, start = generic(spectra, level)
        assert np.all(np.asarray(estimate.status) == CONVERGED)
        np.testing.assert_allclose(estimate.value, optimum, rtol=1e-10, atol=0)
        # (JᵀJ)⁻¹ at the estimate: QR of the autodiff Jacobian against Cholesky of the closed form.
        np.testing.assert_allclose(estimate.covariance, covariance, rtol=1e-8, atol=1e-10 * np.max(covariance))
        # The fit moved from its start by far more than the tolerance (returning the start fails).
        moved = np.max(np.abs(np.asarray(optimum) - np.asarray(start)) / np.asarray(optimum), axis=1)
        assert np.min(moved) > 1e-6


def test_normal_equations_match_autodiff(setup):
    """``JᵀJ`` and ``Jᵀr`` of the closed-form Jacobian against ``jacfwd`` of the whitened residual."""
    arm, clean = setup
    spectrum = jax.tree.map(lambda x: x[0], _noisy(clean, 0.03, 1))
    truth = parameter_values(arm, UNKNOWNS)

    @jax.jit
    def both(theta):
        variance = line_variance(spectrum, 0.03)
        z0, zi = affine_impedance(arm, UNKNOWNS, spectrum.omega)
        closed = _normal_equations(spectrum, jnp.sqrt(2.0 / variance), z0, jnp.moveaxis(zi, -1, 0), theta)
        residual = output_error_residual(spectrum, arm, UNKNOWNS, variance)
        j = jax.jacfwd(residual)(theta)
        return closed, (j.T @ j, j.T @ residual(theta), jnp.linalg.norm(residual(theta)))

    for theta in (truth, truth * jnp.array([1.3, 0.8, 1.1, 0.7])):
        (gram, gradient), (gram_ad, gradient_ad, norm) = both(theta)
        d = np.sqrt(np.diag(gram_ad))
        np.testing.assert_allclose(gram / np.outer(d, d), gram_ad / np.outer(d, d), rtol=0, atol=1e-13)
        np.testing.assert_allclose(gradient / d, gradient_ad / d, rtol=0, atol=1e-12 * norm)


def test_affine_impedance_is_the_impedance(setup):
    arm, clean = setup
    z0, zi = affine_impedance(arm, UNKNOWNS, clean.omega)
    theta = parameter_values(arm, UNKNOWNS) * jnp.array([1.2, 0.9, 1.5, 0.5])
    full = impedance_model(arm, ("m1", "m2", "fv1", "fv2", "l1"), clean.omega)  # re-linearised (not affine)
    expect = full(jnp.concatenate([theta, parameter_values(arm, ("l1",))]))
    np.testing.assert_allclose(z0 + zi @ theta.astype(zi.dtype), expect, rtol=1e-13)
    with pytest.raises(ValueError, match="not affine"):
        affine_impedance(arm, ("m1", "l1"), clean.omega)


def _linear_spectrum(arm, clean):
    """Angle phasors made exactly by the linear model at θ* (and θ*)."""
    truth = parameter_values(arm, UNKNOWNS) * jnp.array([1.1, 0.95, 1.2, 0.9])
    z0, zi = affine_impedance(arm, UNKNOWNS, clean.omega)
    q = jnp.einsum("kij,kj->ki", inverse_2x2(z0 + zi @ truth.astype(zi.dtype)), clean.U)
    return eqx.tree_at(lambda s: s.Q, clean, q), z0, zi, truth


def test_noise_free_linear_data_give_the_truth(setup):
    """Noise-free phasors of the linear model at θ*: the fit from a start 30% off returns θ*; with
    one step allowed it stops with ``MAX_ITERATIONS`` (the status, not a silently wrong value)."""
    arm, clean = setup
    spectrum, z0, zi, truth = _linear_spectrum(arm, clean)
    variance = jnp.full(spectrum.Q.shape, 1e-8)
    theta, _, status, steps = _GAUSS_NEWTON(spectrum, variance, z0, zi, truth * 1.3, max_steps=100)
    assert int(status) == CONVERGED and 2 < int(steps) < 20
    np.testing.assert_allclose(theta, truth, rtol=1e-12)
    theta, _, status, steps = _GAUSS_NEWTON(spectrum, variance, z0, zi, truth * 1.3, max_steps=1)
    assert int(status) == MAX_ITERATIONS and int(steps) == 1
    assert np.max(np.abs(theta / truth - 1)) > 1e-3


def test_failed_trial_is_a_status_and_does_not_hold_up_its_batch(setup, fast):
    arm, clean = setup
    spectra = _noisy(clean, 0.03, TRIALS)
    bad = eqx.tree_at(lambda s: s.Q, spectra, spectra.Q.at[2, 3, 0].set(jnp.nan))
    out = fast(bad, 0.03)
    status = np.asarray(out.status)
    assert status[2] == FAILED and np.all(np.delete(status, 2) == CONVERGED)
    np.testing.assert_array_equal(
        np.delete(np.asarray(out.value), 2, 0), np.delete(np.asarray(fast(spectra, 0.03).value), 2, 0)
    )


def test_a_trial_does_not_depend_on_its_batch(setup, fast):
    """A batch of mixed trials (it iterates until its slowest trial stops) against batches made of
    one trial repeated (they stop with that trial): every stopped trial keeps its value."""
    arm, clean = setup
    spectra = _noisy(clean, 0.1, TRIALS, seed=5)
    batch = fast(spectra, 0.1)
    for i in (0, 7, TRIALS - 1):
        alone = fast(jax.tree.map(lambda x, i=i: jnp.repeat(x[i : i + 1], TRIALS, axis=0), spectra), 0.1)
        np.testing.assert_array_equal(alone.value[0], batch.value[i])
        assert int(alone.status[0]) == int(batch.status[i])
