"""Spectrum: phasor convention, projection vs least squares, noise, distortion, steady state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.measure.spectrum import fourier_coefficients

DT = 0.1  # N = 1000 samples per 100-s period: fast, and far above Nyquist for harmonic 43


def make_record(q_fn, excitation, periods, t0=200.0, arm=None):
    n = round(excitation.period / DT)
    t = t0 + jnp.arange(periods * n) * DT
    tau0 = jnp.zeros(2) if arm is None else jaxid.gravity_torque(arm, jnp.zeros(2))
    return jaxid.Record(
        t, tau0 + excitation.torque(t), q_fn(t), jnp.int32(0), jnp.zeros(()), DT, excitation.period, periods
    )


@pytest.fixture(scope="module")
def split():
    return jaxid.table2("split", scale=0.25)


@pytest.fixture(scope="module")
def linear_record(arm, split):
    return make_record(lambda t: jaxid.linear_steady_state(arm, split, t), split, periods=3, arm=arm)


def exact_phasors(arm, excitation):
    lin = jaxid.linearise(arm)
    h = lin.frequency_response(excitation.line_frequencies)
    return jnp.einsum("kij,kj->ki", h, excitation.phasors())


def test_phasor_convention():
    # x(t) = C cos ωt + D sin ωt  ->  X = C − jD, on any whole-period window (here starting at t0 = 37 s).
    exc = jaxid.Multisine(((2, 5), (3, 7)), jnp.ones((2, 2)))
    c, d = 0.3, -0.7
    w2, w3 = 2 * exc.fundamental, 3 * exc.fundamental

    def q(t):
        return jnp.stack([c * jnp.cos(w2 * t) + d * jnp.sin(w2 * t) + 0.1, 0.5 * jnp.cos(w3 * t + 0.4)], -1)

    rec = make_record(q, exc, periods=1, t0=37.0)
    for method in ("projection", "lstsq"):
        s = fourier_coefficients(rec, exc, method=method)
        assert s.lines == (2, 3, 5, 7)
        np.testing.assert_allclose(s.Q[0, 0], c - 1j * d, atol=1e-13)
        np.testing.assert_allclose(s.Q[1, 1], 0.5 * np.exp(0.4j), atol=1e-13)
        np.testing.assert_allclose(s.q_mean, [0.1, 0.0], atol=1e-13)
        # The torque phasors are the excitation's (amplitude d e^{jφ}).
        np.testing.assert_allclose(s.U, exc.phasors(), atol=1e-13)


def test_pure_multisine_recovered_exactly(arm, split, linear_record):
    s = fourier_coefficients(linear_record, split)
    np.testing.assert_allclose(s.Q, exact_phasors(arm, split), rtol=0, atol=1e-13)
    np.testing.assert_allclose(s.U, split.phasors(), rtol=0, atol=1e-13)
    assert bool(s.steady)
    assert np.all(np.asarray(s.distortion) < 1e-10)


def test_projection_equals_least_squares_on_whole_periods(split, linear_record):
    noisy = jaxid.add_noise(linear_record, key=jax.random.key(3), kind="gaussian", level=0.02)
    p = fourier_coefficients(noisy, split, method="projection")
    q = fourier_coefficients(noisy, split, method="lstsq")
    for a, b in [(p.Q, q.Q), (p.U, q.U), (p.noise_variance, q.noise_variance), (p.q_mean, q.q_mean)]:
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def test_projection_refuses_partial_periods(arm, split, linear_record):
    cut = linear_record.replace(t=linear_record.t[:-37], q=linear_record.q[:-37], tau=linear_record.tau[:-37])
    with pytest.raises(ValueError, match="lstsq"):
        fourier_coefficients(cut, split)
    s = fourier_coefficients(cut, split, method="lstsq")
    np.testing.assert_allclose(s.Q, exact_phasors(arm, split), atol=1e-13)
    assert s.periods == pytest.approx(cut.q.shape[0] / 1000)


def test_line_and_period_checks(split, linear_record):
    with pytest.raises(ValueError, match="Nyquist"):
        fourier_coefficients(linear_record, [3, 600])
    other = jaxid.table2("split", fundamental=2 * np.pi * 0.02)
    with pytest.raises(ValueError, match="period"):
        fourier_coefficients(linear_record, other)
    with pytest.raises(ValueError, match="method"):
        fourier_coefficients(linear_record, split, method="fft")


def test_noise_level_from_period_spread_and_residual(split, linear_record):
    sigma = 0.05
    noisy = jaxid.add_noise(linear_record, key=jax.random.key(0), kind="gaussian", level=sigma)
    s = fourier_coefficients(noisy, split)
    np.testing.assert_allclose(s.noise_std, sigma, rtol=0.05)  # 2000 dof
    np.testing.assert_allclose(s.residual_std, sigma, rtol=0.05)
    # The period-spread variance E|Q̂ − Q|² = 4σ²/(N P) is checked in test_line_variance_is_unbiased.
    # Uniform noise: the mean goes to the DC line only; the std is level/sqrt(12).
    uni = jaxid.add_noise(linear_record, key=jax.random.key(1), kind="uniform", level=0.1)
    su = fourier_coefficients(uni, split)
    np.testing.assert_allclose(su.q_mean, 0.05, atol=0.005)
    np.testing.assert_allclose(su.noise_std, 0.1 / np.sqrt(12), rtol=0.05)
    # One period: the residual at non-excited harmonics is the noise estimate.
    first = noisy.replace(t=noisy.t[:1000], q=noisy.q[:1000], tau=noisy.tau[:1000])
    one = fourier_coefficients(first, split)  # the window (M = N) sets P, not the static field
    assert one.periods == 1.0
    np.testing.assert_allclose(one.noise_std, sigma, rtol=0.1)


DRAWS = 400


def _line_variance_draws(arm, split, linear_record, periods):
    """``DRAWS`` noisy copies of the first ``periods`` periods (σ = 0.05), one compiled call.

    Returns the spectra and the exact phasors: 400 draws x 20 lines x 2 joints make 16 000 phasor
    errors (32 000 real degrees of freedom), so a mean variance is known to ±0.8 % (1 s.d.).
    """
    n = 1000 * periods
    rec = linear_record.replace(t=linear_record.t[:n], q=linear_record.q[:n], tau=linear_record.tau[:n])
    keys = jax.random.split(jax.random.key(11 + periods), DRAWS)
    spectra = jax.jit(
        jax.vmap(lambda k: fourier_coefficients(jaxid.add_noise(rec, key=k, kind="gaussian", level=0.05), split))
    )(keys)
    return spectra, np.asarray(exact_phasors(arm, split))


@pytest.mark.parametrize("periods", [1, 3])
def test_line_variance_is_unbiased(arm, split, linear_record, periods):
    # For white noise of std σ on N samples per period, the projection X̂ = (2/(N P)) Σ x_n e^{−jωt_n}
    # has E|X̂ − X|² = 4σ²/(N P) (written out here, not taken from the package). Two checks of the
    # reported variance per line: its mean over the draws against that value (P = 3 estimates it
    # from the spread of the P per-period phasors: a divisor P instead of P − 1 is 33 % low; P = 1
    # from the residual), and the empirical mean squared error of Q̂ over the draws.
    spectra, exact = _line_variance_draws(arm, split, linear_record, periods)
    sigma, n = 0.05, 1000
    theory = 4 * sigma**2 / (n * periods)
    reported = float(np.mean(np.asarray(spectra.noise_variance)))
    empirical = float(np.mean(np.abs(np.asarray(spectra.Q) - exact[None]) ** 2))
    np.testing.assert_allclose(reported, theory, rtol=0.03)
    np.testing.assert_allclose(empirical, theory, rtol=0.03)


def test_distortion_flags_nonlinearity(arm):
    exc = jaxid.table2("split", scale=1.0)
    rec = jaxid.simulate(arm, exc, sample_step=DT, measured_periods=2, discard_periods=3)
    s = fourier_coefficients(rec, exc)
    lin = fourier_coefficients(make_record(lambda t: jaxid.linear_steady_state(arm, exc, t), exc, periods=2), exc)
    assert np.all(np.asarray(lin.distortion) < 1e-10)
    # The nonlinear arm at scale 1 puts a few per cent of its response on other harmonics.
    assert np.all(np.asarray(s.distortion) > 1e-2)
    assert np.all(np.asarray(s.distortion) > 100 * np.asarray(s.distortion_floor))
    assert bool(s.steady)


def test_steady_state_test_sees_a_transient(arm, split):
    rec = jaxid.simulate(arm, split, sample_step=DT, measured_periods=2, discard_periods=0, model="linear")
    s = fourier_coefficients(rec, split)
    assert not bool(s.steady)
    assert np.all(np.asarray(s.drift) > 1e-3)


def test_jit_and_vmap(split, linear_record):
    keys = jax.random.split(jax.random.key(5), 3)
    batch = jax.vmap(lambda k: jaxid.add_noise(linear_record, key=k, kind="gaussian", level=0.01))(keys)
    f = jax.jit(jax.vmap(lambda r: fourier_coefficients(r, split)))
    out = f(batch)
    one = fourier_coefficients(jax.tree.map(lambda x: x[1], batch), split)
    np.testing.assert_allclose(out.Q[1], one.Q, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out.noise_std[1], one.noise_std, rtol=1e-12)
