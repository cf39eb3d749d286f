"""Measurement noise: statistics, keyed determinism, draws without re-simulating, the spectral path."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.simulation import Record


def _record(m=20_000):
    t = jnp.arange(m) * 0.01
    q = jnp.stack([jnp.sin(t), jnp.cos(t)], -1)
    return Record(t, jnp.zeros((m, 2)), q, jnp.int32(0), jnp.zeros(()), 0.01, float(m) * 0.01, 1)


def test_uniform_noise_statistics():
    rec = _record()
    noise = np.asarray(jaxid.add_noise(rec, key=jax.random.key(0), kind="uniform", level=0.1).q - rec.q)
    n = noise.size
    assert noise.min() >= 0 and noise.max() < 0.1
    # Mean level/2 and std level/sqrt(12), within 5 standard errors.
    assert abs(noise.mean() - 0.05) < 5 * 0.1 / np.sqrt(12 * n)
    assert abs(noise.std() - 0.1 / np.sqrt(12)) < 5 * 0.1 / np.sqrt(12) / np.sqrt(2 * n) * 1.2
    assert jaxid.noise_mean("uniform", 0.1) == pytest.approx(0.05)
    assert jaxid.noise_std("uniform", 0.1) == pytest.approx(0.1 / np.sqrt(12))


def test_gaussian_noise_statistics():
    rec = _record()
    noise = np.asarray(jaxid.add_noise(rec, key=jax.random.key(1), kind="gaussian", level=0.02).q - rec.q)
    n = noise.size
    assert abs(noise.mean()) < 5 * 0.02 / np.sqrt(n)
    assert abs(noise.std() - 0.02) < 5 * 0.02 / np.sqrt(2 * n)
    # Gaussian tails: fraction beyond 2 sigma near 4.55 %.
    assert abs(np.mean(np.abs(noise) > 0.04) - 0.0455) < 0.005
    assert jaxid.noise_std("gaussian", 0.02) == 0.02 and jaxid.noise_mean("gaussian", 0.02) == 0.0


def test_noise_is_keyed_and_draws_are_independent():
    rec = _record(500)
    a = jaxid.add_noise(rec, key=jax.random.key(3))
    b = jaxid.add_noise(rec, key=jax.random.key(3))
    c = jaxid.add_noise(rec, key=jax.random.key(4))
    np.testing.assert_array_equal(a.q, b.q)
    assert not np.allclose(a.q, c.q)
    draws = jaxid.noise_draws(rec, key=jax.random.key(5), draws=7, kind="gaussian", level=0.1)
    assert draws.q.shape == (7, 500, 2)
    assert not np.allclose(draws.q[0], draws.q[1])
    # The record itself (times, torques) is shared; only q changes.
    np.testing.assert_array_equal(draws.t[3], rec.t)
    # A draw equals add_noise with the corresponding split key.
    keys = jax.random.split(jax.random.key(5), 7)
    np.testing.assert_array_equal(draws.q[2], jaxid.add_noise(rec, key=keys[2], kind="gaussian", level=0.1).q)


def test_noise_level_sweep_compiles_once():
    rec = _record(100)
    traces = []

    @jax.jit
    def noisy(level):
        traces.append(1)
        return jaxid.add_noise(rec, key=jax.random.key(0), level=level).q

    for level in (0.01, 0.1, 0.3):
        noisy(level)
    assert len(traces) == 1


def test_bad_noise_options_raise():
    rec = _record(10)
    with pytest.raises(ValueError, match="Unknown noise kind 'normal'"):
        jaxid.add_noise(rec, key=jax.random.key(0), kind="normal")
    with pytest.raises(ValueError, match="positive integer"):
        jaxid.noise_draws(rec, key=jax.random.key(0), draws=0)


# -- the spectral noise path -------------------------------------------------------------------


@pytest.fixture(scope="module")
def nonlinear_two_periods():
    # The nonlinear arm at the paper's amplitude: distortion at the non-excited harmonics, so the
    # non-central parts of the residual and distortion statistics are exercised. N = 2000, P = 2.
    ex = jaxid.table2("split", 1.0)
    rec = jaxid.simulate(jaxid.point_mass(), ex, sample_step=0.05, measured_periods=2, discard_periods=2)
    return ex, rec


def _flat(tree_field, draws):
    a = np.asarray(tree_field).reshape(draws, -1)
    return np.concatenate([a.real, a.imag], 1) if np.iscomplexobj(a) else a.astype(float)


@pytest.mark.slow
@pytest.mark.parametrize("periods", [1, 2])
def test_line_noise_has_the_time_domain_distribution(nonlinear_two_periods, periods):
    """Every statistic of the spectrum: same distribution from add_line_noise as from add_noise + FFT."""
    import scipy.stats

    from jaxid.measure.noise import add_line_noise
    from jaxid.measure.spectrum import fourier_coefficients

    ex, rec = nonlinear_two_periods
    n = rec.samples_per_period
    m = periods * n
    rec = Record(rec.t[:m], rec.tau[:m], rec.q[:m], rec.status, rec.steady_change, rec.sample_step, rec.period, periods)
    clean = jax.jit(lambda r: fourier_coefficients(r, ex))(rec)
    assert float(jnp.max(clean.distortion)) > 0.01  # the clean record is distorted
    sigma, draws = 0.01, 2000
    keys = jax.random.split(jax.random.key(0), draws)
    time_path = jax.jit(
        jax.vmap(lambda k: fourier_coefficients(jaxid.add_noise(rec, key=k, kind="gaussian", level=sigma), ex))
    )(keys)
    line_path = jax.jit(jax.vmap(lambda k: add_line_noise(clean, key=k, level=sigma)))(jax.random.split(keys[0], draws))
    fields = ["Q", "noise_std", "residual_std", "q_mean", "distortion", "distortion_floor", "noise_variance"]
    if periods >= 2:
        fields.append("drift")
    for field in fields:
        a, b = _flat(getattr(time_path, field), draws), _flat(getattr(line_path, field), draws)
        pvalues = [scipy.stats.ks_2samp(a[:, i], b[:, i]).pvalue for i in range(a.shape[1])]
        # Bonferroni over the components: a correct path fails this about once in 10^4 runs.
        assert min(pvalues) > 1e-4 / len(pvalues), (field, min(pvalues))
    # The exact line variance: Re and Im of the averaged phasor noise have variance 2σ²/(N P) each.
    dq = np.asarray(line_path.Q - clean.Q)
    for part in (dq.real, dq.imag):
        ratio = part.var(axis=0).mean() / (2 * sigma**2 / (n * periods))
        assert abs(ratio - 1) < 0.03  # 80 components x 2000 draws: standard error ~0.4 %
    assert np.all(np.asarray(line_path.steady)) == np.all(np.asarray(time_path.steady))
    np.testing.assert_array_equal(line_path.U, jnp.broadcast_to(clean.U, line_path.U.shape))


def test_line_noise_refuses_what_it_cannot_do_exactly(nonlinear_two_periods):
    from jaxid.measure.noise import add_line_noise, line_noise_draws
    from jaxid.measure.spectrum import fourier_coefficients

    ex, rec = nonlinear_two_periods
    clean = jax.jit(lambda r: fourier_coefficients(r, ex))(rec)
    with pytest.raises(ValueError, match="Gaussian noise only"):
        add_line_noise(clean, key=jax.random.key(0), kind="uniform", level=0.1)
    with pytest.raises(ValueError, match="whole periods by projection"):
        add_line_noise(dataclasses.replace(clean, method="lstsq"), key=jax.random.key(0), level=0.1)
    draws = jax.jit(lambda k: line_noise_draws(clean, key=k, draws=3, level=0.01))(jax.random.key(1))
    assert draws.Q.shape == (3, *clean.Q.shape)
    # Zero noise gives the clean lines back.
    still = jax.jit(lambda k: add_line_noise(clean, key=k, level=0.0))(jax.random.key(2))
    np.testing.assert_allclose(still.Q, clean.Q, rtol=0, atol=0)
    np.testing.assert_allclose(still.residual_std, clean.residual_std, rtol=1e-12)
