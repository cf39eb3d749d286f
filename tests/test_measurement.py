"""Measurement noise: statistics, keyed determinism, draws without re-simulating."""

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
