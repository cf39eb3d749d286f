"""Frequency-domain estimators: exact on noise-free data, the paper's route, statistics vs the CRLB."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate import (
    CONVERGED,
    ESTIMATORS,
    SINGULAR,
    UNSTRUCTURED_NAMES,
    crlb,
    equation_error,
    get_estimator,
    ml,
    paper,
    paper_fit,
    paper_template_response,
    parameter_values,
)
from jaxid.measure.spectrum import fourier_coefficients

DT = 0.1  # N = 1000 samples per period
POINT = ("m1", "m2", "fv1", "fv2")
TABLE1 = ("m1", "m2", "J1", "J2", "fv1", "fv2")


def make_record(arm, excitation, q_fn, periods):
    n = round(excitation.period / DT)
    t = 300.0 + jnp.arange(periods * n) * DT
    tau = jaxid.gravity_torque(arm, jnp.zeros(2)) + excitation.torque(t)
    return jaxid.Record(t, tau, q_fn(t), jnp.int32(0), jnp.zeros(()), DT, excitation.period, periods)


def linear_record(arm, excitation, periods=2):
    return make_record(arm, excitation, lambda t: jaxid.linear_steady_state(arm, excitation, t), periods)


def test_registered():
    assert {"paper", "equation_error", "ml"} <= set(ESTIMATORS)
    assert get_estimator("ml") is ml
    with pytest.raises(ValueError, match="equation_error"):
        get_estimator("equation_eror")


@pytest.mark.parametrize("name", ["equation_error", "ml"])
@pytest.mark.parametrize(
    "model, lines, unknowns",
    [
        ("point_mass", "split", POINT),
        ("point_mass", "same", POINT),
        ("table1", "split", TABLE1),
        ("table1", "same", UNSTRUCTURED_NAMES),
    ],
)
def test_noise_free_linear_data_gives_the_truth(name, model, lines, unknowns):
    # One period everywhere (the records share shapes), and one compile per case.
    arm = getattr(jaxid, model)()
    exc = jaxid.table2(lines, scale=0.5)
    rec = linear_record(arm, exc, 1)
    est = eqx.filter_jit(get_estimator(name))(rec, exc, arm.replace(masses=(3.0, 3.0)), unknowns=unknowns)
    truth = parameter_values(arm, unknowns)
    assert int(est.status) == CONVERGED
    assert est.names == tuple(unknowns)
    np.testing.assert_allclose(est.value, truth, rtol=1e-8)


def test_least_squares_spectrum_also_exact(arm):
    exc = jaxid.table2("split", scale=0.5)
    rec = linear_record(arm, exc, 1)
    cut = rec.replace(t=rec.t[:-123], q=rec.q[:-123], tau=rec.tau[:-123])
    for est in (equation_error, ml):
        e = eqx.filter_jit(est)(cut, exc, arm, unknowns=POINT, method="lstsq")
        np.testing.assert_allclose(e.value, arm.parameter_vector(POINT), rtol=1e-8)


def test_ml_covariance_is_the_crlb_at_the_truth(arm):
    exc = jaxid.table2("split", scale=0.25)
    rec = linear_record(arm, exc, 2)
    # Compiled (one program each) rather than eager: the same numbers, without ~370 small compiles.
    e = jax.jit(lambda r: ml(r, exc, arm, unknowns=POINT, noise_std=0.01))(rec)
    bound = jax.jit(lambda a: crlb.linear_crlb(a, exc, POINT, noise_std=0.01, sample_step=DT, periods=2))(arm)
    np.testing.assert_allclose(e.covariance, bound, rtol=1e-8)


# -- the paper's route ----------------------------------------------------------------------------


def test_paper_recovers_masses_on_its_own_template(arm):
    exc = jaxid.table2("split", scale=1.0)
    rec = make_record(arm, exc, lambda t: paper_template_response(arm, exc, t), periods=1)
    est = paper(rec, exc, arm)
    assert int(est.status) == CONVERGED
    np.testing.assert_allclose(est.value, [5.0, 1.5], rtol=1e-8)
    # The template's b11, b22 are eq. 15's, and the fitted ω0², σ0 are those of A = −D0⁻¹K0.
    fit = paper_fit(fourier_coefficients(rec, exc), exc)
    params = jaxid.estimate.paper_template_parameters(arm)
    np.testing.assert_allclose(
        fit.joint1, [params["omega0_sq"], params["sigma0"], params["p1"], params["B"][0, 0]], rtol=1e-8
    )
    np.testing.assert_allclose(
        fit.joint2, [params["omega0_sq"], params["sigma0"], params["p4"], params["B"][1, 1]], rtol=1e-8
    )


def _hanging_point_mass_phasors(excitation):
    """Exact steady-state angle phasors ``(L, 2)`` of the linearised point-mass arm (m = 5, 1.5 kg,
    l = 1, 0.8 m, Fv = diag(5, 2), g = 9.81) hanging at q0 = 0, written out by hand in NumPy:
    ``Q(ω) = (K − ω² M + jω C)⁻¹ U(ω)`` with M the mass matrix, K the Hessian of the potential."""
    m1, m2, l1, l2, g = 5.0, 1.5, 1.0, 0.8, 9.81
    mass = np.array([[(m1 + m2) * l1**2 + m2 * l2**2 + 2 * m2 * l1 * l2, m2 * l2**2 + m2 * l1 * l2], [0.0, m2 * l2**2]])
    mass[1, 0] = mass[0, 1]
    stiffness = g * np.array([[(m1 + m2) * l1 + m2 * l2, m2 * l2], [m2 * l2, m2 * l2]])
    damping = np.diag([5.0, 2.0])
    omega = np.asarray(excitation.line_frequencies)
    u = np.asarray(excitation.phasors())
    return (
        np.stack(
            [np.linalg.solve(stiffness - w**2 * mass + 1j * w * damping, uk) for w, uk in zip(omega, u, strict=True)]
        ),
        u,
        omega,
    )


def _template_masses(q, u, omega, joint1_lines, joint2_lines, l1=1.0, l2=0.8):
    """The paper's route in NumPy: fit ``Q (s² − 2σ0 s + ω0²) = (b s + p) U`` at s = jω per joint
    (complex equations, real and imaginary parts stacked), then eq. 15 at q20 = 0 solved for the
    masses: b11 = 1/(l1² m1), b22 = (l1² m1 + (l1 + l2)² m2)/(l1² l2² m1 m2)."""
    b = []
    for j, lines in ((0, joint1_lines), (1, joint2_lines)):
        qj, uj, s = q[lines, j], u[lines, j], 1j * omega[lines]
        # unknowns (ω0², σ0, p, b):  Q ω0² − 2 s Q σ0 − U p − s U b = −s² Q
        a = np.stack([qj, -2 * s * qj, -uj, -s * uj], axis=1)
        theta = np.linalg.lstsq(
            np.vstack([a.real, a.imag]), np.concatenate([(-(s**2) * qj).real, (-(s**2) * qj).imag])
        )[0]
        b.append(theta[3])
    m1 = 1 / (l1**2 * b[0])
    m2 = l1**2 * m1 / (b[1] * l1**2 * l2**2 * m1 - (l1 + l2) ** 2)
    return np.array([m1, m2])


def test_paper_is_wrong_on_the_real_arm(arm):
    # Noise-free steady state of the (linearised) real arm: the first-order template does not hold,
    # so the route returns masses that are far off, even negative. The expected masses are the same
    # fit done independently in NumPy on the exact phasors.
    exc = jaxid.table2("split", scale=0.25)
    q, u, omega = _hanging_point_mass_phasors(exc)
    lines = np.arange(len(omega))
    expected = _template_masses(q, u, omega, lines[np.abs(u[:, 0]) > 0], lines[np.abs(u[:, 1]) > 0])
    est = eqx.filter_jit(paper)(linear_record(arm, exc, 1), exc, arm)
    assert int(est.status) == CONVERGED
    np.testing.assert_allclose(est.value, expected, rtol=1e-8)
    assert np.all(np.abs(np.asarray(est.value) / np.array([5.0, 1.5]) - 1) > 1.0)


def test_paper_needs_split_lines(arm):
    exc = jaxid.table2("same", scale=0.25)
    rec = linear_record(arm, exc, 1)
    with pytest.raises(ValueError, match="split"):
        paper(rec, exc, arm)
    # The shared-lines route (paper.toml's paper_same): each joint fitted at all lines with its own
    # torque, the other joint's torque ignored. Checked against the NumPy fit of the exact phasors.
    q, u, omega = _hanging_point_mass_phasors(exc)
    lines = np.arange(len(omega))
    expected = _template_masses(q, u, omega, lines, lines)
    both = eqx.filter_jit(paper)(rec, exc, arm, allow_shared_lines=True)
    assert int(both.status) == CONVERGED
    np.testing.assert_allclose(both.value, expected, rtol=1e-8)
    est = eqx.filter_jit(paper)(rec, exc, arm, allow_shared_lines=True, unknowns=("m2",))
    assert est.names == ("m2",)
    np.testing.assert_allclose(est.value, expected[1:], rtol=1e-8)
    with pytest.raises(ValueError, match="m1"):
        paper(rec, exc, arm, unknowns=("fv1",))


# -- failures are a status, never a silent NaN -------------------------------------------------------


def test_singular_and_failed_status(arm):
    exc = jaxid.table2("split", scale=0.25)
    rec = linear_record(arm, exc, 1)
    flat = rec.replace(q=jnp.zeros_like(rec.q))  # no response: nothing is identifiable
    assert int(eqx.filter_jit(equation_error)(flat, exc, arm, unknowns=POINT).status) == SINGULAR
    assert int(eqx.filter_jit(paper)(flat, exc, arm).status) == SINGULAR
    bad = rec.replace(q=rec.q.at[5, 0].set(jnp.nan))
    for est in (equation_error, ml, paper):
        assert int(eqx.filter_jit(est)(bad, exc, arm, unknowns=("m1", "m2")).status) != CONVERGED
    with pytest.raises(ValueError, match="nonlinearly"):
        equation_error(rec, exc, arm, unknowns=("m1", "l1"))
    with pytest.raises(ValueError, match="Unknown parameter"):
        ml(rec, exc, arm, unknowns=("m1", "d11"))


def test_jit_vmap_and_one_compile(arm):
    exc = jaxid.table2("split", scale=0.25)
    rec = linear_record(arm, exc, 1)
    keys = jax.random.split(jax.random.key(0), 4)
    batch = jax.vmap(lambda k: jaxid.add_noise(rec, key=k, kind="gaussian", level=0.01))(keys)

    @eqx.debug.assert_max_traces(max_traces=1)
    def run(records, sigma):
        return jax.vmap(lambda r: ml(r, exc, arm, unknowns=POINT, noise_std=sigma))(records)

    run = jax.jit(run)
    out = run(batch, 0.01)
    run(batch, 0.02)  # a new noise level does not recompile
    one = jax.jit(lambda r: ml(r, exc, arm, unknowns=POINT, noise_std=0.01))(jax.tree.map(lambda x: x[2], batch))
    np.testing.assert_allclose(out.value[2], one.value, rtol=1e-10)
    np.testing.assert_allclose(out.covariance[2], one.covariance, rtol=1e-8)


# -- statistics against the Cramér–Rao bound -------------------------------------------------------


@pytest.fixture(scope="module")
def monte_carlo(arm):
    """ML and equation error on noisy linear-model data, at two noise levels, one compiled call."""
    exc = jaxid.table2("split", scale=0.25)
    periods, trials = 2, 500
    rec = linear_record(arm, exc, periods)

    @jax.jit
    def run(keys, sigma):
        def one(key):
            r = jaxid.add_noise(rec, key=key, kind="gaussian", level=sigma)
            return ml(r, exc, arm, unknowns=POINT, noise_std=sigma), equation_error(r, exc, arm, unknowns=POINT)

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(2024), trials)
    out = {}
    for sigma in (0.01, 0.1):
        bound = crlb.linear_crlb(arm, exc, POINT, noise_std=sigma, sample_step=DT, periods=periods)
        out[sigma] = (*run(keys, sigma), np.sqrt(np.diag(bound)))
    return out, arm.parameter_vector(POINT), trials


@pytest.mark.slow
def test_ml_std_reaches_the_crlb(monte_carlo):
    out, truth, trials = monte_carlo
    for sigma, (m, _, bound_std) in out.items():
        assert np.all(np.asarray(m.status) == CONVERGED)
        std = np.std(np.asarray(m.value), axis=0, ddof=1)
        # 500 trials: the sample std is within ~3 % (1 s.e.) of the true std.
        np.testing.assert_allclose(std / bound_std, 1.0, atol=0.10, err_msg=f"sigma={sigma}")
        # The reported covariance is the bound evaluated at the estimate.
        reported = np.sqrt(np.diagonal(np.asarray(m.covariance), axis1=1, axis2=2)).mean(0)
        np.testing.assert_allclose(reported / bound_std, 1.0, atol=0.05)


@pytest.mark.slow
def test_equation_error_biased_at_low_snr_and_ml_not(monte_carlo):
    out, truth, trials = monte_carlo
    m, e, bound_std = out[0.1]
    ml_bias = np.mean(np.asarray(m.value), 0) - truth
    ml_se = np.std(np.asarray(m.value), 0, ddof=1) / np.sqrt(trials)
    ee_bias = np.mean(np.asarray(e.value), 0) - truth
    ee_se = np.std(np.asarray(e.value), 0, ddof=1) / np.sqrt(trials)
    assert np.all(np.abs(ml_bias) < 4 * ml_se), ml_bias / ml_se
    # Errors in variables: the masses are pulled down by several standard deviations of the estimator.
    assert np.all(ee_bias[:2] < -5 * ee_se[:2]), ee_bias / ee_se
    assert np.all(np.abs(ee_bias[:2]) > 3 * bound_std[:2])


def test_concrete_call_runs_compiled_and_traced_call_is_the_function(arm, split_small, noisy_small):
    """An estimator called on concrete inputs runs as one compiled program (``register``), whose
    numbers are those of the function compiled by hand; called under a transformation it is the
    function itself (the same jaxpr as ``__wrapped__``)."""
    kwargs = dict(unknowns=POINT, noise_std=0.01)
    for name in ("equation_error", "idim_ls"):
        estimator = get_estimator(name)
        raw = estimator.__wrapped__
        eager = estimator(noisy_small, split_small, arm, **kwargs)
        # (σ traced, as the wrapper passes a number σ: a new σ reuses the program)
        by_hand = jax.jit(lambda r, e, a, s, raw=raw: raw(r, e, a, unknowns=POINT, noise_std=s))(
            noisy_small, split_small, arm, 0.01
        )
        for field in ("value", "covariance", "status"):
            np.testing.assert_array_equal(getattr(eager, field), getattr(by_hand, field), err_msg=f"{name}.{field}")
        traced = jax.make_jaxpr(lambda r, e=estimator: e(r, split_small, arm, **kwargs))(noisy_small)
        plain = jax.make_jaxpr(lambda r, raw=raw: raw(r, split_small, arm, **kwargs))(noisy_small)
        assert str(traced) == str(plain), name


def test_concrete_call_with_a_new_noise_std_reuses_the_program(arm, split_small, noisy_small, caplog):
    estimator = get_estimator("equation_error")
    estimator(noisy_small, split_small, arm, unknowns=POINT, noise_std=0.01)  # compiled (or reused)
    with jax.log_compiles(), caplog.at_level("WARNING"):
        est = estimator(noisy_small, split_small, arm, unknowns=POINT, noise_std=0.02)
    compiled = [r.getMessage() for r in caplog.records if "equation_error" in r.getMessage()]
    assert not compiled, compiled
    # and σ reached the computation: the covariance scales with σ²
    ref = estimator(noisy_small, split_small, arm, unknowns=POINT, noise_std=0.01)
    np.testing.assert_allclose(est.covariance, 4 * ref.covariance, rtol=1e-12)
