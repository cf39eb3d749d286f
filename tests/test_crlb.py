"""Cramér–Rao bound: autodiff Fisher information against finite differences and closed forms."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate import crlb, parameter_values

DT = 0.1
UNKNOWNS = ("m1", "m2", "fv1", "fv2")


@pytest.fixture(scope="module")
def split():
    return jaxid.table2("split", scale=0.25)


def test_sinusoid_closed_form():
    # y = a cos ωt + b sin ωt on N samples per period, P periods: F = (P N / 2σ²) I.
    n, periods, sigma = 64, 3, 0.2
    t = jnp.arange(n) * (2 * np.pi / n)

    def response(theta):
        return (theta[0] * jnp.cos(5 * t) + theta[1] * jnp.sin(5 * t))[:, None]

    f = jax.jit(lambda th: crlb.fisher_information(response, th, noise_std=sigma, periods=periods))(
        jnp.array([0.3, -1.0])
    )
    np.testing.assert_allclose(f, periods * n / (2 * sigma**2) * np.eye(2), atol=1e-9)
    np.testing.assert_allclose(
        crlb.cramer_rao_bound(f), 2 * sigma**2 / (periods * n) * np.eye(2), rtol=1e-12, atol=1e-18
    )


def test_time_domain_equals_spectral(arm, split):
    theta = arm.parameter_vector(UNKNOWNS)

    @eqx.filter_jit  # one program, not op by op
    def routes(arm, split, theta):
        f_time = crlb.fisher_information(
            crlb.linear_response(arm, split, UNKNOWNS, sample_step=DT), theta, noise_std=(0.01, 0.02), periods=2
        )
        f_freq = crlb.linear_fisher_information(
            arm, split, UNKNOWNS, noise_std=jnp.array([0.01, 0.02]), sample_step=DT, periods=2
        )
        return f_time, f_freq

    f_time, f_freq = routes(arm, split, theta)
    np.testing.assert_allclose(f_time, f_freq, rtol=1e-10, atol=1e-12 * float(jnp.max(f_freq)))


@pytest.mark.parametrize(
    "model, unknowns",
    [
        ("point_mass", UNKNOWNS),
        ("table1", ("m1", "m2", "J1", "J2", "fv1", "fv2")),
        ("table1", ("d11", "d12", "k22", "fv2")),
    ],
)
def test_fisher_matches_finite_differences(model, unknowns, split):
    arm = getattr(jaxid, model)()
    sigma, periods = 0.01, 2
    theta = parameter_values(arm, unknowns)
    response = jax.jit(crlb.linear_response(arm, split, unknowns, sample_step=DT))  # one program, not op by op
    f_ad = jax.jit(lambda th: crlb.fisher_information(response, th, noise_std=sigma, periods=periods))(theta)
    h = 1e-6 * jnp.maximum(jnp.abs(theta), 1.0)
    cols = [
        (response(theta + h[i] * e) - response(theta - h[i] * e)) / (2 * h[i])
        for i, e in enumerate(jnp.eye(len(theta)))
    ]
    jac = jnp.stack(cols, -1).reshape(-1, len(theta))
    f_fd = periods * jac.T @ jac / sigma**2
    np.testing.assert_allclose(f_ad, f_fd, rtol=1e-6, atol=1e-8 * float(jnp.max(jnp.abs(f_ad))))


def test_bound_scales_with_noise_and_periods(arm, split):
    c1 = crlb.linear_crlb(arm, split, UNKNOWNS, noise_std=0.01, sample_step=DT, periods=1)
    c2 = crlb.linear_crlb(arm, split, UNKNOWNS, noise_std=0.03, sample_step=DT, periods=4)
    np.testing.assert_allclose(c2, c1 * 9 / 4, rtol=1e-10)
    assert np.all(np.linalg.eigvalsh(np.asarray(c1)) > 0)


def test_bound_is_jittable_in_noise_level(arm, split):
    f = jax.jit(lambda s: crlb.linear_crlb(arm, split, UNKNOWNS, noise_std=s, sample_step=DT))
    np.testing.assert_allclose(
        f(0.02), crlb.linear_crlb(arm, split, UNKNOWNS, noise_std=0.02, sample_step=DT), rtol=1e-12
    )
    with pytest.raises(ValueError, match="Nyquist"):
        crlb.linear_crlb(arm, split, UNKNOWNS, noise_std=0.01, sample_step=2.0)


# -- any AbstractArm: the same maths on an arm from a URDF ------------------------------------

ROBOTS = __import__("pathlib").Path(__file__).resolve().parent.parent / "data" / "robots"


def test_the_two_link_urdf_has_the_two_link_arms_bound():
    """``table1()`` written as a URDF (``SerialArm``) gives the same linearisation and bound: ``J1``
    (about the centre of mass) and ``Iyy1`` (about the joint) differ by a constant ``m r²``."""
    urdf = jaxid.load_arm(ROBOTS / "two_link.urdf")
    arm = jaxid.table1()
    a, b = eqx.filter_jit(jaxid.linearise)(urdf), eqx.filter_jit(jaxid.linearise)(arm)  # not op by op
    for field in ("mass", "stiffness", "damping"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=0, atol=1e-13)
    exc = jaxid.table2(lines="split", scale=0.25)
    expected = crlb.linear_crlb(arm, exc, ("J1", "J2", "fv1", "fv2"), noise_std=0.01)
    got = crlb.linear_crlb(urdf, exc, ("Iyy1", "Iyy2", "fv1", "fv2"), noise_std=0.01)
    np.testing.assert_allclose(got, expected, rtol=1e-10)


@pytest.fixture(scope="module")
def ur5_hanging():
    """The UR5 with joint friction, linearised where its links hang (shoulder and elbow down)."""
    arm = jaxid.load_arm(ROBOTS / "ur5_robot.urdf")
    arm = arm.with_parameters([f"fv{j}" for j in range(1, 7)], jnp.asarray([20.0, 20.0, 10.0, 2.0, 2.0, 1.0]))
    return arm, jnp.asarray([0.0, -np.pi / 2, 0.0, -np.pi / 2, 0.0, 0.0])


def test_linearise_any_arm_by_its_own_dynamics(ur5_hanging):
    arm, q0 = ur5_hanging
    omega = jnp.asarray([0.5, 3.0, 20.0])

    # One compiled program (op by op, the UR5's Jacobians compiled ~150 small kernels: 12-24 s cold).
    @eqx.filter_jit
    def routes(arm, q0):
        lin = jaxid.linearise(arm, q0)
        mass = jaxid.mass_matrix(arm, q0)
        stiffness = jax.jacfwd(lambda q: jaxid.gravity_torque(arm, q))(q0)
        return lin, mass, stiffness, lin.impedance(omega), lin.frequency_response(omega)

    lin, mass, stiffness, impedance, response = routes(arm, q0)
    np.testing.assert_allclose(lin.mass, mass, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(lin.stiffness, stiffness, atol=1e-12)
    np.testing.assert_allclose(lin.damping, np.diag([20.0, 20.0, 10.0, 2.0, 2.0, 1.0]), atol=1e-12)
    expected = np.linalg.inv(np.asarray(impedance))  # LAPACK here, as an independent route
    np.testing.assert_allclose(response, expected, rtol=1e-10, atol=1e-14)


def test_bound_of_a_six_joint_arm_time_domain_equals_spectral(ur5_hanging):
    """Parseval on six joints: the bound's two routes agree (the independent time-domain sum)."""
    arm, q0 = ur5_hanging
    harmonics = [[j + 1, j + 8] for j in range(6)]  # disjoint lines per joint
    exc = jaxid.Multisine(harmonics, 0.5 * jnp.ones((6, 2)), fundamental=2 * np.pi * 0.1)
    unknowns = ("fv1", "fv2", "fv3", "mx2", "Izz1")
    theta = arm.parameter_vector(unknowns)

    # Both routes as one compiled program each (op by op they compiled ~400 small kernels: 35-65 s cold).
    @eqx.filter_jit
    def routes(arm, exc, q0, theta):
        spectral = crlb.linear_fisher_information(arm, exc, unknowns, noise_std=0.01, sample_step=0.05, q0=q0)
        response = crlb.linear_response(arm, exc, unknowns, sample_step=0.05, q0=q0)
        return spectral, response(theta), crlb.fisher_information(response, theta, noise_std=0.01)

    spectral, samples, time_domain = routes(arm, exc, q0, theta)
    assert samples.shape == (200, 6)
    np.testing.assert_allclose(spectral, time_domain, rtol=1e-9, atol=1e-12 * np.abs(time_domain).max())
    with pytest.raises(ValueError, match="drives 2 joints but the arm has 6"):
        crlb.linear_crlb(arm, jaxid.table2(), unknowns, noise_std=0.01)
