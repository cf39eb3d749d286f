"""The fast RK4 path of ``simulate_batch`` against independent answers.

- the shared fast-rates kernel (``rate_kernels.fast_rates``) against the model's ``forward_dynamics``;
- the split ``sincos`` (``sincos_parts`` + ``sincos_quadrant``) against an independently written
  quadrant rule (``np.choose`` on ``k mod 4``) and against numpy's ``sin``/``cos``;
- the fast path against the tight adaptive reference (≤ 1e-7 rad, the accuracy it is sold with)
  and against the diffrax RK4 path (the same discrete dynamics through diffrax's ``solver.step``:
  equal to rounding, far below the 1e-8 discretisation error that a different step would show),
  also over several measured periods and substeps (the record is written in blocks);
- the recorded torque: the torque the integrator applied (``torque_grid`` rows, bit for bit), equal
  to the analytic multisine at the record's times, whatever the trial's number of discarded periods;
- the CPU compiler options of the batch runner: passed unless ``XLA_FLAGS`` sets them or an outer
  ``jit`` traces the call (where JAX refuses them), with the same record either way.

The workload is the benchmark's: the point-mass arm under the Table 2 multisine (T = 100 s),
Δ = 0.01 s, float64, masses spread so the trials differ.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.model import forward_dynamics, holding_torque
from jaxid.simulation.integrate import sincos, sincos_parts, sincos_quadrant, torque_grid
from jaxid.simulation.rate_kernels import fast_rates

STEP = 0.01


def test_sincos_quadrant_step_matches_an_independent_rule_and_numpy():
    quarter = np.pi / 4 * np.arange(-400, 401)
    x = np.concatenate(
        [np.linspace(-60.0, 60.0, 120_001), quarter, np.nextafter(quarter, np.inf), np.nextafter(quarter, -np.inf)]
    )
    s, c, k = (np.asarray(a) for a in sincos_parts(jnp.asarray(x)))
    quadrant = np.mod(k, 4).astype(int)  # floor mod: 0 … 3 for negative k too
    sin, cos = (np.asarray(a) for a in sincos(jnp.asarray(x)))
    np.testing.assert_array_equal(sin, np.choose(quadrant, [s, c, -s, -c]))
    np.testing.assert_array_equal(cos, np.choose(quadrant, [c, -s, -c, s]))
    assert np.max(np.abs(sin - np.sin(x))) <= 2.3e-16
    assert np.max(np.abs(cos - np.cos(x))) <= 2.3e-16
    # Non-finite input gives NaN, never a finite value from a garbage quadrant.
    bad = jnp.asarray([np.nan, np.inf, -np.inf])
    assert np.all(np.isnan(np.asarray(sincos(bad))))


def test_split_sincos_derivative_is_cos_and_minus_sin():
    x = jnp.linspace(-20.0, 20.0, 4001)

    def split(x):
        return sincos_quadrant(*sincos_parts(x))

    _, (ds, dc) = jax.jvp(split, (x,), (jnp.ones_like(x),))
    np.testing.assert_allclose(ds, np.cos(np.asarray(x)), rtol=0, atol=5e-16)
    np.testing.assert_allclose(dc, -np.sin(np.asarray(x)), rtol=0, atol=5e-16)


def test_fast_rates_equal_the_model_dynamics():
    # The shared fast-rates kernel against forward_dynamics with jnp.sin/cos, batched arms and states
    # over several turns (the sincos range reduction and quadrant step are exercised).
    rng = np.random.default_rng(3)
    masses = np.array([5.0, 1.5]) * rng.uniform(0.5, 1.5, (64, 2))
    arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.asarray(masses))
    y = rng.uniform(-20.0, 20.0, (64, 4))
    tau = rng.uniform(-5.0, 5.0, (64, 2))

    @jax.jit
    @functools.partial(jax.vmap, in_axes=(0, 0, 0, None))
    def fast(arm, y, tau, pred):
        return jnp.stack(fast_rates(arm)(tuple(y[i] for i in range(4)), tau, pred))

    acc = np.asarray(forward_dynamics(arms, jnp.asarray(y[:, :2]), jnp.asarray(y[:, 2:]), jnp.asarray(tau)))
    out = np.asarray(fast(arms, jnp.asarray(y), jnp.asarray(tau), jnp.asarray(True)))
    np.testing.assert_array_equal(out[:, :2], y[:, 2:])
    np.testing.assert_allclose(out[:, 2:], acc, rtol=1e-12, atol=1e-12)
    # A false ``pred`` (a misuse: it must always be true) takes the uncompiled branch: NaN, never a
    # plausible number.
    wrong = np.asarray(fast(arms, jnp.asarray(y), jnp.asarray(tau), jnp.asarray(False)))
    np.testing.assert_array_equal(wrong[:, :2], y[:, 2:])
    assert np.isnan(wrong[:, 2:]).all()


@pytest.fixture(scope="module")
def setting():
    excitation = jaxid.table2("same", scale=1.0)
    masses = np.array([5.0, 1.5]) * np.array([[0.9, 1.08], [1.1, 0.93], [1.0, 1.0]])
    arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.asarray(masses))
    return arms, excitation


@pytest.fixture(scope="module")
def fast(setting):
    arms, excitation = setting
    return jaxid.simulate_batch(arms, excitation, sample_step=STEP, discard_periods=np.array([1, 2, 1]))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_fast_path_is_within_1e_7_rad_of_the_tight_reference(setting, fast):
    arms, excitation = setting
    ref = jaxid.simulate_batch(
        arms,
        excitation,
        solver="adaptive",
        rtol=1e-10,
        atol=1e-12,
        sample_step=STEP,
        discard_periods=np.array([1, 2, 1]),
    )
    assert np.all(np.asarray(fast.status) == jaxid.SUCCESS)
    assert np.all(np.asarray(ref.status) == jaxid.SUCCESS)
    error = np.max(np.abs(np.asarray(fast.q) - np.asarray(ref.q)))
    assert error <= 1e-7
    # The error is RK4's at this step, not zero: the comparison can tell the two paths apart.
    assert error > 1e-11


def test_fast_path_equals_the_diffrax_rk4_path(setting, fast):
    arms, excitation = setting
    other = jaxid.simulate_batch(
        arms, excitation, solver="diffrax-rk4", sample_step=STEP, discard_periods=np.array([1, 2, 1])
    )
    np.testing.assert_allclose(np.asarray(fast.q), np.asarray(other.q), rtol=0, atol=1e-11)
    np.testing.assert_array_equal(np.asarray(fast.tau), np.asarray(other.tau))


def test_recorded_torque_is_the_applied_torque(setting, fast):
    arms, excitation = setting
    n = int(round(excitation.period / STEP))
    offset = np.asarray(holding_torque(arms, jnp.zeros(2)))  # (B, 2)
    grid = np.asarray(torque_grid(excitation, STEP, n))  # unit scale, (N, 3, 2)
    scale = float(excitation.scale)
    applied = offset[:, None, :] + scale * grid[None, :, 0, :]
    # The same multisine on the same grid, to its last bits: bit for bit with jax 0.10; jax 0.12.0.1
    # rounds the sum of cosines inside the simulation's compiled program differently from this
    # eager evaluation, by up to 2 ulp (measured under Python 3.12).
    last_bits = 4 * np.spacing(np.abs(applied).max())
    np.testing.assert_allclose(np.asarray(fast.tau), applied, rtol=0, atol=last_bits)
    # The same torque as the analytic multisine at the record's own times (which differ by trial:
    # one or two discarded periods), to the rounding of the cosines' arguments: 5.8e-13 here, ~80×
    # the tolerance above, which therefore tells the grid's torque from this one.
    analytic = offset[:, None, :] + np.asarray(jax.vmap(excitation.torque)(fast.t))
    np.testing.assert_allclose(np.asarray(fast.tau), analytic, rtol=0, atol=1e-11)
    assert np.max(np.abs(np.asarray(fast.tau) - analytic)) > 10 * last_bits
    np.testing.assert_array_equal(np.asarray(fast.t[1, 0]), 2 * excitation.period)


def test_cpu_compiler_options_yield_to_xla_flags_and_outer_jit(monkeypatch):
    from jaxid.simulation import batch

    x = jnp.ones(2)
    monkeypatch.setattr(batch, "CPU_COMPILER_OPTIONS", {"xla_cpu_prefer_vector_width": "512"})
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    expected = (("xla_cpu_prefer_vector_width", "512"),) if jax.default_backend() == "cpu" else ()
    assert batch.compiler_options(x) == expected
    # The user's XLA_FLAGS win: the option is then not passed at all.
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_cpu_prefer_vector_width=256")
    assert batch.compiler_options(x) == ()
    monkeypatch.setenv("XLA_FLAGS", "")
    # Under an outer jit (compiler options are accepted only at the top level) none are passed, and
    # simulate_batch runs there with the same result as at the top level.
    seen = []
    jax.jit(lambda y: seen.append(batch.compiler_options(y)) or y)(x)
    assert seen == [()]
    excitation = jaxid.table2("split", fundamental=2 * np.pi * 0.1)  # a 10-s period: a cheap record
    arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.array([[5.0, 1.5], [4.5, 1.6]]))
    top = jaxid.simulate_batch(arms, excitation, discard_periods=1)
    inner = jax.jit(lambda a: jaxid.simulate_batch(a, excitation, discard_periods=1).q)(arms)
    np.testing.assert_allclose(np.asarray(inner), np.asarray(top.q), rtol=0, atol=1e-13)


def test_blocked_record_over_periods_and_substeps_equals_the_diffrax_rk4_path():
    # N = 1000 samples per period: the record is written in 4 blocks of 250, over 2 measured
    # periods, with 2 RK4 substeps per sample; the diffrax path stacks its samples one by one.
    excitation = jaxid.table2("split", fundamental=2 * np.pi * 0.1)
    arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.array([[5.0, 1.5], [4.5, 1.6]]))
    options = dict(sample_step=STEP, substeps=2, measured_periods=2, discard_periods=np.array([1, 2]))
    fast = jaxid.simulate_batch(arms, excitation, **options)
    other = jaxid.simulate_batch(arms, excitation, solver="diffrax-rk4", **options)
    assert fast.q.shape == (2, 2000, 2)
    np.testing.assert_allclose(np.asarray(fast.q), np.asarray(other.q), rtol=0, atol=1e-12)
    assert float(np.max(np.abs(np.asarray(fast.q)))) > 1e-3  # a record that moves
