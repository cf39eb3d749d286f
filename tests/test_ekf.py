"""EKF/UKF cores and the arm filters (jaxid.estimate.kalman.records)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chi2

import jaxid
from jaxid.estimate import ekf as ekf_mod
from jaxid.estimate.base import CONVERGED
from jaxid.estimate.kalman import filters

UNKNOWNS = ("m1", "m2", "fv1", "fv2")
TRUTH = np.array([5.0, 1.5, 5.0, 2.0])


def _kalman_filter(A, B, C, Q, R, m0, P0, ys, us, factors=None):
    """Textbook Kalman filter in NumPy: condition on y_t, then predict with u_t. ``factors``: the
    gain's rows scaled by them, the covariance by the Joseph form of that gain."""
    m, P = np.array(m0), np.array(P0)
    means, covs, ll = [], [], 0.0
    for y, u in zip(ys, us, strict=True):
        S = C @ P @ C.T + R
        K = P @ C.T @ np.linalg.inv(S)
        r = y - C @ m
        ll += -0.5 * r @ np.linalg.solve(S, r) - 0.5 * np.log(np.linalg.det(2 * np.pi * S))
        if factors is None:
            m = m + K @ r
            P = P - K @ S @ K.T
        else:
            K = np.asarray(factors)[:, None] * K
            m = m + K @ r
            a = np.eye(len(m)) - K @ C
            P = a @ P @ a.T + K @ R @ K.T
        means.append(m)
        covs.append(P)
        m = A @ m + B @ u
        P = A @ P @ A.T + Q
    return np.array(means), np.array(covs), ll


@pytest.fixture(scope="module")
def linear_model():
    rng = np.random.default_rng(0)
    n, d, k, steps = 4, 2, 1, 60
    A = np.eye(n) + 0.1 * rng.standard_normal((n, n))
    A /= 1.05 * np.max(np.abs(np.linalg.eigvals(A)))
    B = rng.standard_normal((n, k))
    C = rng.standard_normal((d, n))
    Q = 0.01 * np.eye(n) + 0.002
    R = np.diag([0.05, 0.1])
    m0 = rng.standard_normal(n)
    P0 = np.eye(n)
    us = rng.standard_normal((steps, k))
    ys = rng.standard_normal((steps, d))
    return A, B, C, Q, R, m0, P0, ys, us


@pytest.mark.parametrize("core", ["ekf", "ukf"])
def test_filter_on_linear_gaussian_model_is_exact_kalman(linear_model, core):
    A, B, C, Q, R, m0, P0, ys, us = linear_model
    means, covs, ll = _kalman_filter(*linear_model)
    run = ekf_mod.extended_kalman_filter if core == "ekf" else ekf_mod.unscented_kalman_filter
    out = jax.jit(
        lambda ys, us: run(
            lambda x, u: jnp.asarray(A) @ x + jnp.asarray(B) @ u,
            lambda x: jnp.asarray(C) @ x,
            jnp.asarray(Q),
            jnp.asarray(R),
            jnp.asarray(m0),
            jnp.asarray(P0),
            ys,
            us,
            return_covariances=True,
        )
    )(jnp.asarray(ys), jnp.asarray(us))
    np.testing.assert_allclose(out.filtered_means, means, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.filtered_covariances, covs, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.final_mean, means[-1], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.log_likelihood, ll, rtol=1e-10)


@pytest.mark.parametrize("core", ["ekf", "ukf"])
def test_limited_update_has_the_covariance_of_its_gain(linear_model, core):
    # update_limit scales the gain's rows; the filter's covariance must be that of the gain it used
    # (the Joseph form, exact for any gain): against the textbook filter with the scaled gain.
    A, B, C, Q, R, m0, P0, ys, us = linear_model
    factors = np.array([1.0, 0.5, 0.0, 0.25])
    means, covs, _ = _kalman_filter(*linear_model, factors=factors)
    run = ekf_mod.extended_kalman_filter if core == "ekf" else ekf_mod.unscented_kalman_filter
    out = run(
        lambda x, u: jnp.asarray(A) @ x + jnp.asarray(B) @ u,
        lambda x: jnp.asarray(C) @ x,
        jnp.asarray(Q),
        jnp.asarray(R),
        jnp.asarray(m0),
        jnp.asarray(P0),
        jnp.asarray(ys),
        jnp.asarray(us),
        return_covariances=True,
        update_limit=lambda mean, proposed: jnp.asarray(factors),
    )
    np.testing.assert_allclose(out.filtered_means, means, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.filtered_covariances, covs, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("limited", [False, True])
def test_augmented_filter_equals_the_dense_ekf(limited):
    """``augmented_extended_kalman_filter`` (constant parameters, the first ``d`` entries measured, the block
    structure used) against ``extended_kalman_filter`` on the same nonlinear model written densely: filtered
    means, covariances and log-likelihood equal to round-off, with and without a limited update, over padding."""
    rng = np.random.default_rng(11)
    m, p, d, steps = 4, 3, 2, 40
    a = jnp.asarray(0.3 * rng.normal(size=(m, m)))

    def step(x, theta, u):
        return jnp.tanh(a @ x) + theta[: m - 1].sum() * 0.1 * jnp.sin(x) + jnp.concatenate([theta * u[0], x[:1] ** 2])

    qx = jnp.asarray(np.diag(rng.uniform(0.01, 0.1, m)))
    r = jnp.asarray(np.diag(rng.uniform(0.05, 0.2, d)))
    m0 = jnp.asarray(rng.normal(size=m + p))
    g = rng.normal(size=(m + p, m + p))
    p0 = jnp.asarray(g @ g.T / (m + p) + np.eye(m + p))
    ys, us = jnp.asarray(rng.normal(size=(steps, d))), jnp.asarray(rng.normal(size=(steps, 1)))
    valid = jnp.asarray(np.arange(steps) < steps - 5)
    factors = jnp.asarray(np.r_[np.ones(m), 0.5, 0.0, 0.25])
    limit = (lambda mean, proposed: factors) if limited else None
    options = dict(return_covariances=True, update_limit=limit, valid=valid)
    ours = filters.augmented_extended_kalman_filter(step, qx, r, m0, p0, ys, us, **options)
    q = jnp.zeros((m + p, m + p)).at[:m, :m].set(qx)
    dense = filters.extended_kalman_filter(
        lambda z, u: jnp.concatenate([step(z[:m], z[m:], u), z[m:]]), lambda z: z[:d], q, r, m0, p0, ys, us, **options
    )
    np.testing.assert_allclose(ours.filtered_means, dense.filtered_means, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ours.filtered_covariances, dense.filtered_covariances, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ours.log_likelihood, dense.log_likelihood, rtol=1e-12)
    assert float(jnp.abs(ours.final_mean - m0).max()) > 0.1  # the filter moved


def test_mass_limit_keeps_the_mass_matrix_positive_definite():
    # A two-joint model with the constant mass matrix [[θ0, θ2], [θ2, θ1]] (torque linear in θ):
    # smallest eigenvalue (θ0 + θ1)/2 − sqrt(((θ0 − θ1)/2)² + θ2²), so from θ = (1, 1, 0) an update
    # to θ2 = 3 has the eigenvalue 1 − 3α at the fraction α.
    from jaxid.estimate.kalman.mass_floor import _mass_basis, _mass_limit

    def regressor(q, qd, qdd):
        return jnp.array([[qdd[0], 0.0, qdd[1]], [0.0, qdd[1], qdd[0]]])

    basis, constant = _mass_basis(regressor, None, jnp.zeros((4, 2)), 3)  # the same at any angles
    np.testing.assert_array_equal(np.einsum("kpij,p->kij", basis, [1.0, 2.0, 0.5])[0], [[1.0, 0.5], [0.5, 2.0]])
    state = jnp.array([0.1, -0.2, 0.3, 0.4])  # (q, q'): updated in full whatever the limit
    mean = jnp.concatenate([state, jnp.array([1.0, 1.0, 0.0])])
    proposed = jnp.concatenate([state + 0.01, jnp.array([1.0, 1.0, 3.0])])
    # Floor 0.5: 1 − 3α > 0.5 for α < 1/6, so the largest fraction tried (1, 1/2, …, 1/16, 0) is 1/8.
    factors = np.asarray(_mass_limit(basis, constant, 0.5, 2)(mean, proposed))
    np.testing.assert_array_equal(factors, [1, 1, 1, 1, 0.125, 0.125, 0.125])
    # Floor 0.9: α < 1/30, so 0 (θ stays); no floor (-inf): the whole update.
    assert np.asarray(_mass_limit(basis, constant, 0.9, 2)(mean, proposed))[-1] == 0.0
    assert np.asarray(_mass_limit(basis, constant, -jnp.inf, 2)(mean, proposed))[-1] == 1.0
    # Back from θ2 = 3 (indefinite) towards 0: eigenvalue 1 − 3 (1 − α) > 0.5 only at α = 1.
    assert np.asarray(_mass_limit(basis, constant, 0.5, 2)(proposed, mean))[-1] == 1.0


@pytest.fixture(scope="module")
def short():
    """Point-mass arm, Table 2 split lines at scale 2 on a 20-s period (2000 samples)."""
    arm = jaxid.point_mass()
    ex = jaxid.table2("split", 2.0, fundamental=2 * math.pi * 0.05)
    rec = jaxid.simulate(arm, ex)
    assert int(rec.status) == 0
    return arm, ex, rec


@pytest.mark.parametrize("kind", ["ekf", "ukf"])
def test_noise_free_converges_to_truth(short, kind):
    arm, ex, rec = short
    fn = ekf_mod.ekf if kind == "ekf" else ekf_mod.ukf
    est = jax.jit(lambda r: fn(r, ex, arm, unknowns=UNKNOWNS, noise_std=1e-5, velocity_process_std=1e-7))(rec)
    assert int(est.status) == CONVERGED
    # Starts from the 30 %-off guess, ends at the truth.
    assert np.max(np.abs(np.asarray(est.history[0]) / TRUTH - 1)) > 1e-3
    np.testing.assert_allclose(est.value, TRUTH, rtol=2e-4)
    assert est.history.shape == (200, 4)
    np.testing.assert_allclose(est.history[-1], est.value)


CALIBRATION_TRIALS = 100


@pytest.mark.slow  # statistical (100 Monte Carlo trials a filter): the quick tier leaves it out
@pytest.mark.parametrize("kind", ["ekf", "ukf"])
def test_reported_covariance_is_calibrated(short, kind):
    # NEES = (θ̂ − θ)ᵀ P⁻¹ (θ̂ − θ) over independent trials (one jit(vmap) call). For a calibrated
    # filter it is χ²(p) per trial, so K times the mean NEES is χ²(pK): the test is the two-sided
    # 99.9 % interval of that law (p = 4, K = 100: mean NEES in [3.1, 5.0]); a covariance off by
    # 25 % in standard deviation (NEES × 0.64 or × 1.56) falls outside it.
    # Measured with 200 trials at σ = 0.01: EKF 3.78, UKF 3.45 (slightly conservative). At σ = 0.002
    # the EKF's linearisation bias is no longer small against its spread (NEES 5.8), so the test
    # runs at σ = 0.01.
    arm, ex, rec = short
    level = 0.01
    fn = ekf_mod.ekf if kind == "ekf" else ekf_mod.ukf
    keys = jax.random.split(jax.random.key(7), CALIBRATION_TRIALS)

    def one(key):
        noisy = jaxid.add_noise(rec, key=key, kind="gaussian", level=level)
        return fn(noisy, ex, arm, unknowns=UNKNOWNS, noise_std=level, history_points=2)

    out = jax.jit(jax.vmap(one))(keys)
    assert np.all(np.asarray(out.status) == CONVERGED)
    err = np.asarray(out.value) - TRUTH
    nees = np.einsum("ki,kij,kj->k", err, np.linalg.inv(np.asarray(out.covariance)), err)
    p, k = len(UNKNOWNS), CALIBRATION_TRIALS
    low, high = chi2.ppf([0.0005, 0.9995], p * k) / k
    assert low < nees.mean() < high, (nees.mean(), low, high)


def test_vmap_over_trials_equals_loop(short):
    arm, ex, rec = short
    keys = jax.random.split(jax.random.key(1), 2)
    batch = jax.vmap(lambda k: jaxid.add_noise(rec, key=k, kind="gaussian", level=0.002))(keys)

    def one(r):
        return ekf_mod.ekf(r, ex, arm, unknowns=UNKNOWNS, noise_std=0.002, history_points=20)

    fast = jax.jit(jax.vmap(one))(batch)
    single_jit = jax.jit(one)
    for i in range(2):
        single = single_jit(jax.tree.map(lambda x, i=i: x[i], batch))
        np.testing.assert_allclose(fast.value[i], single.value, rtol=1e-9)
        np.testing.assert_allclose(fast.covariance[i], single.covariance, rtol=1e-7)
        np.testing.assert_allclose(fast.history[i], single.history, rtol=1e-9)


def test_failed_status_on_nan(short):
    arm, ex, rec = short
    bad = rec.replace(q=rec.q.at[5, 1].set(jnp.nan))
    assert int(ekf_mod.ekf(bad, ex, arm, unknowns=UNKNOWNS, noise_std=0.01).status) != CONVERGED


def test_bad_initial_guess_shape(short):
    arm, ex, rec = short
    with pytest.raises(ValueError, match="initial_guess"):
        ekf_mod.ekf(rec, ex, arm, unknowns=UNKNOWNS, initial_guess=(1.0, 2.0))


def _lab_regressor():
    from _simulated_log import true_arm

    arm = true_arm()
    base = jaxid.base_parameters(arm)

    def regressor(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)

    return arm, base, regressor


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_kalman_filter_batch_equals_each_trial_alone(tmp_path):
    # Two trials (the simulated lab log with two noise draws) in one call of the batched filter: each
    # equals kalman_filter_fit on its own log, and a trial whose filter diverges (a NaN start) is a
    # ValueError in its slot, the other trials unaffected.
    from _simulated_log import log_frame, simulate

    from jaxid.estimate.kalman.logs import kalman_filter_batch, kalman_filter_fit
    from jaxid.estimate.logs import filter_log, idim_ls

    arm, base, regressor = _lab_regressor()
    run = simulate(arm, duration=1.5)
    logs = []
    for seed in (0, 1):
        path = tmp_path / f"trial{seed}.parquet"
        log_frame(*run, seed=seed).to_parquet(path, index=False)
        logs.append(filter_log(jaxid.load_log(path), 20.0))
    names = base.names
    starts = [idim_ls([d], regressor, names) for d in logs]
    batch = kalman_filter_batch(logs, regressor, names, starts=starts)
    for d, start, got in zip(logs, starts, batch, strict=True):
        alone = kalman_filter_fit([d], regressor, names, start=start)
        np.testing.assert_allclose(got.value, alone.value, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.covariance, alone.covariance, rtol=1e-7, atol=1e-15)
        np.testing.assert_allclose(got.residual_std, alone.residual_std, rtol=1e-7)
    broken = dataclasses.replace(starts[0], value=np.full(len(names), np.nan))
    mixed = kalman_filter_batch(logs, regressor, names, starts=[broken, starts[1]])
    assert isinstance(mixed[0], ValueError) and "diverged" in str(mixed[0])
    np.testing.assert_allclose(mixed[1].value, batch[1].value, rtol=1e-9, atol=1e-12)


def test_velocity_covariance_is_the_torque_noise_through_the_model_step():
    # The filter's velocity process noise from a known torque noise (mass_floor.velocity_covariance) against the
    # model's own RK4 step: a constant torque error e over one sample moves the velocity by J e, J = ∂q'/∂τ from
    # autodiff of model_step, so its covariance is J Σ Jᵀ; the formula h² D⁻¹ Σ D⁻ᵀ, with D the arm's mass matrix,
    # is that to first order in the step (here 1e-3 s). With a velocity_process_std its square is added, and the
    # default without a torque noise is 0.01² I; a non-positive torque noise or a singular mass matrix is refused.
    from jaxid.estimate.kalman.mass_floor import velocity_covariance
    from jaxid.estimate.logs.stepping import model_step

    arm, base, regressor = _lab_regressor()
    theta = jnp.asarray(base.values(arm.standard_parameters()))
    q, qd, h, sigma = jnp.array([0.4, -0.7]), jnp.array([0.3, 0.5]), 1e-3, np.array([0.2, 0.05])
    stages = jnp.tile(jnp.array([[0.5, -0.2]]), (3, 1))

    def velocity(e):
        return model_step(regressor, theta, jnp.concatenate([q, qd]), stages + e, h)[2:]

    jac = np.asarray(jax.jacfwd(velocity)(jnp.zeros(2)))
    expected = jac @ np.diag(sigma**2) @ jac.T
    masses = np.asarray(arm.mass_matrix(q))[None]
    got = velocity_covariance(masses, h, None, sigma, "ekf")
    np.testing.assert_allclose(got, expected, rtol=5e-3)
    np.testing.assert_allclose(velocity_covariance(masses, h, 1e-3, sigma, "ekf"), got + 1e-6 * np.eye(2), rtol=1e-12)
    np.testing.assert_allclose(velocity_covariance(masses, h, None, None, "ekf"), 1e-4 * np.eye(2))
    with pytest.raises(ValueError, match="torque_std must be positive"):
        velocity_covariance(masses, h, None, -0.1, "ekf")
    with pytest.raises(ValueError, match="not positive definite"):
        velocity_covariance(-masses, h, None, sigma, "ekf")
