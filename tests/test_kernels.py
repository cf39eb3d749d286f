"""The shared numeric kernels against exact answers: RK4 step, torque grid, phasors, small linear
algebra, status codes, the derivative filter, per-trial transient lengths."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid import linalg
from jaxid.excitation.phasors import respond, synthesise
from jaxid.measure.derivatives import derivative_filter, periodic_derivatives
from jaxid.simulation.integrate import applied_offset, rk4_step, sincos, torque_grid
from jaxid.types import Status, require_float64


def test_rk4_step_on_linear_ode_is_the_taylor_polynomial():
    # y' = A y: one RK4 step is exactly (I + hA + (hA)²/2 + (hA)³/6 + (hA)⁴/24) y.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    y0 = rng.standard_normal(4)
    h = 0.05
    ha = h * a
    poly = np.eye(4) + ha + ha @ ha / 2 + ha @ ha @ ha / 6 + ha @ ha @ ha @ ha / 24
    y1 = rk4_step(lambda y, tau: jnp.asarray(a) @ y, jnp.asarray(y0), jnp.zeros((3, 2)), h)
    np.testing.assert_allclose(np.asarray(y1), poly @ y0, rtol=1e-14, atol=1e-15)


def test_rk4_step_uses_the_stage_torques_and_pytrees():
    # y' = A y + B u(t): the stages see u(t), u(t + h/2), u(t + h/2), u(t + h); written out in NumPy.
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 2))
    y0, u = rng.standard_normal(4), rng.standard_normal((3, 2))
    h = 0.1
    k1 = a @ y0 + b @ u[0]
    k2 = a @ (y0 + h / 2 * k1) + b @ u[1]
    k3 = a @ (y0 + h / 2 * k2) + b @ u[1]
    k4 = a @ (y0 + h * k3) + b @ u[2]
    expected = y0 + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def rates(y, tau):  # the state as a tuple of scalars, as the fast simulator carries it
        dy = jnp.asarray(a) @ jnp.stack(y) + jnp.asarray(b) @ tau
        return tuple(dy[i] for i in range(4))

    y1 = rk4_step(rates, tuple(jnp.asarray(y0)), jnp.asarray(u), h)
    np.testing.assert_allclose(np.asarray(jnp.stack(y1)), expected, rtol=1e-13)


def test_torque_grid_is_the_multisine_at_the_stage_times():
    ex = jaxid.table2("split", scale=2.0, fundamental=2 * math.pi * 0.1)
    h, steps = 0.01, 1000
    grid = np.asarray(torque_grid(ex, h, steps))
    assert grid.shape == (steps, 3, 2)
    unit = ex.replace(scale=1.0)
    n = np.arange(steps)
    for stage, c in enumerate((0.0, 0.5, 1.0)):
        np.testing.assert_allclose(grid[:, stage], np.asarray(unit.torque((n + c) * h)), rtol=0, atol=1e-13)


def test_applied_offset_recovers_the_holding_torque():
    arm = jaxid.point_mass()
    ex = jaxid.table2("split", scale=0.2, fundamental=2 * math.pi * 0.1)
    q0 = jnp.array([0.3, -0.2])
    rec = jaxid.simulate(arm, ex, q0=q0, discard_periods=0, measured_periods=1, steady_tolerance=1e9)
    np.testing.assert_allclose(
        np.asarray(applied_offset(rec, ex)), np.asarray(jaxid.model.holding_torque(arm, q0)), atol=1e-12
    )


def test_applied_offset_is_the_sample_mean_of_tau_minus_u():
    """Whole periods (the mean of tau, u summing to zero) and a line at a multiple of the samples
    per period (u's samples do not sum to zero: the sample-wise formula): both return tau0 of a
    hand-built record tau = tau0 + u(t), starting mid-period."""
    tau0 = jnp.array([0.7, -0.3])
    ex = jaxid.table2("split", scale=0.5)
    aliased = jaxid.Multisine(((1, 8), (2, 8)), [[1.0, 0.5], [1.0, 0.5]], [[0.0, 0.3], [0.1, 0.2]], fundamental=1.0)
    for excitation, n_per, periods in ((ex, 10_000, 1), (ex, 10_000, 3), (aliased, 8, 2)):
        step = excitation.period / n_per
        t = 13 * step + step * jnp.arange(periods * n_per)
        tau = tau0 + excitation.torque(t)
        rec = jaxid.Record(
            t, tau, jnp.zeros_like(tau), jnp.asarray(0), jnp.asarray(0.0), step, excitation.period, periods
        )
        if excitation is aliased:  # u does not average out here: mean(tau) alone would be 0.48 off
            assert float(jnp.min(jnp.abs(jnp.mean(excitation.torque(t), axis=0)))) > 0.4
        np.testing.assert_allclose(np.asarray(applied_offset(rec, excitation)), np.asarray(tau0), rtol=0, atol=1e-13)


def test_sincos_matches_libm():
    x = jnp.linspace(-1e3, 1e3, 20001)
    s, c = sincos(x)
    np.testing.assert_allclose(np.asarray(s), np.sin(np.asarray(x)), rtol=0, atol=3e-16 * 1e3)
    np.testing.assert_allclose(np.asarray(c), np.cos(np.asarray(x)), rtol=0, atol=3e-16 * 1e3)


def test_synthesise_is_the_direct_sum():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, 2)) + 1j * rng.standard_normal((3, 5, 2))  # batch 3, 5 lines, 2 channels
    omega = rng.uniform(0.1, 3.0, 5)
    t = np.linspace(0, 7, 50)
    direct = np.real(np.einsum("blc,nl->bnc", x, np.exp(1j * omega[None, :] * t[:, None])))
    np.testing.assert_allclose(np.asarray(synthesise(x, omega, t)), direct, rtol=1e-12, atol=1e-12)
    rate = np.real(np.einsum("blc,nl->bnc", 1j * omega[None, :, None] * x, np.exp(1j * omega[None, :] * t[:, None])))
    np.testing.assert_allclose(np.asarray(synthesise(x, omega, t, derivative=1)), rate, rtol=1e-12, atol=1e-11)
    # Convention: X = C − jD is C cos ωt + D sin ωt.
    one = synthesise(np.array([[2.0 - 3.0j]]), np.array([1.5]), t)[:, 0]
    np.testing.assert_allclose(np.asarray(one), 2 * np.cos(1.5 * t) + 3 * np.sin(1.5 * t), atol=1e-14)
    h = rng.standard_normal((5, 2, 2)) + 1j * rng.standard_normal((5, 2, 2))
    np.testing.assert_allclose(np.asarray(respond(h, x[0])), np.einsum("kij,kj->ki", h, x[0]), rtol=1e-14)


def test_small_linear_algebra_against_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 2, 2))
    b = rng.standard_normal((7, 2))
    np.testing.assert_allclose(np.asarray(linalg.solve_2x2(a, b)), np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-12)
    z = a + 1j * rng.standard_normal((7, 2, 2))
    np.testing.assert_allclose(np.asarray(linalg.inverse_2x2(z)), np.linalg.inv(z), rtol=1e-12)
    m = rng.standard_normal((40, 5))
    y = rng.standard_normal(40)
    theta, pinv, singular = jax.jit(linalg.lstsq)(jnp.asarray(m), jnp.asarray(y))
    np.testing.assert_allclose(np.asarray(theta), np.linalg.lstsq(m, y, rcond=None)[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(pinv), np.linalg.pinv(m), rtol=1e-11, atol=1e-13)
    assert not bool(singular)
    q, r = jax.jit(linalg.small_qr)(jnp.asarray(m))
    np.testing.assert_allclose(np.asarray(q @ r), m, atol=1e-13)
    np.testing.assert_allclose(np.asarray(q.T @ q), np.eye(5), atol=1e-14)
    np.testing.assert_allclose(np.asarray(linalg.upper_triangular_inverse(r) @ r), np.eye(5), atol=1e-13)
    # A duplicated column is singular under the one policy.
    dup = np.concatenate([m[:, :2], m[:, :1]], axis=1)
    assert bool(jax.jit(linalg.lstsq)(jnp.asarray(dup), jnp.asarray(y))[2])


def test_frequency_response_closed_form_against_numpy():
    lin = jaxid.linearise(jaxid.table1(), (0.1, -0.2))
    omega = np.linspace(0.05, 30, 17)
    z = np.asarray(lin.impedance(omega))
    np.testing.assert_allclose(np.asarray(lin.frequency_response(omega)), np.linalg.inv(z), rtol=1e-12)


def test_status_codes_labels_and_float64_guard():
    assert Status.CONVERGED is Status.SUCCESS
    codes = [int(s) for s in Status]
    assert len(codes) == len(set(codes))
    assert Status.label(Status.SINGULAR) == "singular" and Status.label(Status.NOT_STEADY) == "not_steady"
    assert Status.label(99) == "99"
    assert jaxid.STATUS_NAMES == {0: "ok", 1: "diverged", 2: "max_steps", 3: "not_steady"}
    assert set(jaxid.ESTIMATOR_STATUS.values()) == {"ok", "failed", "max_iterations", "singular"}
    for s in Status:
        assert Status.message(s)
    require_float64("test")  # the tests run in float64
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            require_float64("simulate")
    finally:
        jax.config.update("jax_enable_x64", True)


def test_derivative_filter_frozen_equals_periodic_derivatives():
    ex = jaxid.table2("split", fundamental=2 * math.pi * 0.1)
    rec = jaxid.simulate(jaxid.point_mass(), ex, discard_periods=2, measured_periods=2, steady_tolerance=1e9)
    noisy = jaxid.add_noise(rec, key=jax.random.key(0), kind="gaussian", level=1e-3)
    opts = dict(keep="detected", cutoff=100, lines=ex.lines)
    direct = periodic_derivatives(noisy.q, 0.01, ex.period, **opts)
    frozen = derivative_filter(noisy.q, 0.01, ex.period, **opts)
    for a, b in zip(direct, frozen(noisy.q), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Frozen: the bins decided on the noisy angles are applied unchanged to another signal.
    other = frozen(rec.q)[0]
    assert other.shape == rec.q.shape


def test_batch_trial_depends_only_on_its_own_parameters():
    # A slowly decaying arm in the batch must not change the other trials (their transient counts).
    ex = jaxid.table2("split", scale=0.3, fundamental=2 * math.pi * 0.1)
    fast = jaxid.point_mass()
    slow = jaxid.point_mass(friction=(0.5, 0.2))

    def batch(*arms):
        return jax.tree.map(lambda *x: jnp.stack(x), *arms)

    counts = jaxid.simulation.transient_periods_each(batch(fast, slow), ex)
    assert counts[1] > counts[0]
    # Δ = 0.05 s (the study tests' step): the slow arm's long transient is 5x fewer RK4 steps.
    alone = jaxid.simulate_batch(batch(fast, fast), ex, chunk_size=2, sample_step=0.05)
    mixed = jaxid.simulate_batch(batch(fast, slow), ex, chunk_size=2, sample_step=0.05)
    np.testing.assert_array_equal(np.asarray(alone.q[0]), np.asarray(mixed.q[0]))
    np.testing.assert_array_equal(np.asarray(alone.t[0]), np.asarray(mixed.t[0]))
    one = jaxid.simulate(fast, ex, sample_step=0.05)  # another compiled program: equal to rounding
    np.testing.assert_allclose(np.asarray(one.q), np.asarray(mixed.q[0]), rtol=0, atol=1e-15)
    assert float(mixed.t[1, 0]) == counts[1] * ex.period


def test_one_singularity_policy_for_regressors_and_information_matrices():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((50, 4)) * np.array([1.0, 10.0, 0.1, 3.0])
    r = jax.jit(linalg.small_qr)(jnp.asarray(a / np.linalg.norm(a, axis=0)))[1]
    info = float(jax.jit(linalg.information_rcond)(jnp.asarray(a.T @ a)))
    np.testing.assert_allclose(info, float(linalg.triangular_rcond(r)) ** 2, rtol=1e-10)
    assert linalg.INFORMATION_RCOND == linalg.RCOND**2
    near = a.copy()
    near[:, 3] = near[:, 0] + 1e-9 * rng.standard_normal(50)  # relative 1e-9 < RCOND
    assert bool(jax.jit(linalg.lstsq)(jnp.asarray(near), jnp.zeros(50))[2])
    assert bool(jax.jit(linalg.is_singular_information)(jnp.asarray(near.T @ near)))
    assert not bool(jax.jit(linalg.is_singular_information)(jnp.asarray(a.T @ a)))


def test_small_solves_against_numpy():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 6))
    b = rng.standard_normal((6, 3))
    np.testing.assert_allclose(np.asarray(jax.jit(linalg.solve)(a, b)), np.linalg.solve(a, b), rtol=1e-11)
    np.testing.assert_allclose(np.asarray(jax.jit(linalg.inverse)(a)), np.linalg.inv(a), rtol=1e-11, atol=1e-13)
    s = a @ a.T + np.eye(6)
    low = np.asarray(jax.jit(linalg.cholesky)(s))
    np.testing.assert_allclose(low, np.linalg.cholesky(s), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(linalg.solve_triangular(jnp.asarray(low), jnp.asarray(b), lower=True)), np.linalg.solve(low, b)
    )
