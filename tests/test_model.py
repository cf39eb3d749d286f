"""The arm model against independent answers: the Lagrangian by autodiff, and MuJoCo."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mujoco_api import dense_inertia, mujoco

import jaxid
from jaxid.simulation.linearisation import corrected_point_mass_state_matrices, paper_state_matrices

# -- an independent derivation: L = T - V from the link kinematics ------------------------------


def _kinematics(arm, q, qd):
    """Centre-of-mass positions (x right, y up) and velocities, link angular velocities."""
    m = arm
    l1, r1, r2 = m.lengths[0], m.com[0], m.com[1]

    def positions(q):
        # Angles from the downward vertical, counter-clockwise positive, q2 relative to link 1.
        p1 = r1 * jnp.array([jnp.sin(q[0]), -jnp.cos(q[0])])
        joint2 = l1 * jnp.array([jnp.sin(q[0]), -jnp.cos(q[0])])
        p2 = joint2 + r2 * jnp.array([jnp.sin(q[0] + q[1]), -jnp.cos(q[0] + q[1])])
        return p1, p2

    p1, p2 = positions(q)
    v1, v2 = jax.jvp(positions, (q,), (qd,))[1]
    return p1, p2, v1, v2, qd[0], qd[0] + qd[1]


def _kinetic(arm, q, qd):
    _, _, v1, v2, w1, w2 = _kinematics(arm, q, qd)
    m1, m2 = arm.masses
    j1, j2 = arm.inertias
    return 0.5 * (m1 * v1 @ v1 + m2 * v2 @ v2 + j1 * w1**2 + j2 * w2**2)


def _potential(arm, q):
    p1, p2, *_ = _kinematics(arm, q, jnp.zeros(2))
    return arm.gravity * (arm.masses[0] * p1[1] + arm.masses[1] * p2[1])


def _lagrangian_terms(arm, q, qd):
    """Mass matrix, velocity terms ``C q'`` and gravity from Euler–Lagrange by autodiff."""
    mass = jax.hessian(_kinetic, argnums=2)(arm, q, qd)
    dt_dqd = jax.grad(_kinetic, argnums=2)
    # d/dt ∂T/∂q' = M q'' + (∂²T/∂q'∂q) q'; the velocity terms are that minus ∂T/∂q.
    mixed = jax.jacfwd(dt_dqd, argnums=1)(arm, q, qd)
    velocity_terms = mixed @ qd - jax.grad(_kinetic, argnums=1)(arm, q, qd)
    gravity = jax.grad(_potential, argnums=1)(arm, q)
    return mass, velocity_terms, gravity


def _random_arm(rng):
    return jaxid.TwoLinkArm(
        masses=rng.uniform(0.5, 5, 2),
        lengths=rng.uniform(0.3, 1.5, 2),
        com=rng.uniform(0.1, 1.0, 2),
        inertias=rng.uniform(0.0, 3.0, 2),
        friction=rng.uniform(0.1, 5, 2),
    )


ARMS = {"point_mass": jaxid.point_mass, "table1": jaxid.table1, "random": lambda: _random_arm(np.random.default_rng(7))}


@jax.jit
def _reference_terms(arm, q, qd):
    """The independent derivation, compiled (one program, not one kernel per eager operation)."""
    return (*_lagrangian_terms(arm, q, qd), _kinetic(arm, q, qd) + _potential(arm, q))


@jax.jit
def _package_terms(arm, q, qd, tau, qdd):
    """The package's dynamics functions at one state, compiled together."""
    return (
        jaxid.mass_matrix(arm, q),
        jaxid.coriolis_forces(arm, q, qd),
        jaxid.gravity_torque(arm, q),
        jaxid.forward_dynamics(arm, q, qd, tau),
        jaxid.inverse_dynamics(arm, q, qd, qdd),
        jaxid.energy(arm, q, qd),
    )


@pytest.mark.parametrize("name", list(ARMS))
def test_dynamics_match_lagrangian(name):
    arm = ARMS[name]()
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, qd, tau = rng.uniform(-3, 3, 2), rng.uniform(-2, 2, 2), rng.uniform(-10, 10, 2)
        mass, velocity_terms, gravity, total = (np.asarray(x) for x in _reference_terms(arm, q, qd))
        friction = arm.friction * qd
        qdd = np.linalg.solve(mass, tau - velocity_terms - gravity - friction)
        got = _package_terms(arm, q, qd, tau, qdd)
        np.testing.assert_allclose(got[0], mass, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(got[1], velocity_terms, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[2], gravity, rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(got[3], qdd, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[4], tau, rtol=1e-12, atol=1e-11)
        np.testing.assert_allclose(got[5], total, rtol=1e-13, atol=1e-12)


def test_dynamics_batch_and_jit(arm):
    rng = np.random.default_rng(1)
    q, qd, tau = (rng.normal(size=(6, 2)) for _ in range(3))
    batched = jaxid.forward_dynamics(arm, q, qd, tau)
    looped = np.stack([jax.jit(jaxid.forward_dynamics)(arm, q[i], qd[i], tau[i]) for i in range(6)])
    np.testing.assert_allclose(batched, looped, rtol=1e-14, atol=1e-14)


def test_arm_rejects_bad_values():
    with pytest.raises(ValueError, match="masses must be positive"):
        jaxid.point_mass(masses=(-1.0, 1.5))
    with pytest.raises(ValueError, match="friction must be non-negative"):
        jaxid.point_mass(friction=(-1.0, 1.0))
    with pytest.raises(ValueError, match="trailing axis of length 2"):
        jaxid.point_mass(masses=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="NaN or inf"):
        jaxid.point_mass(masses=(np.nan, 1.0))
    with pytest.raises(ValueError, match="Did you mean 'm2'"):
        jaxid.point_mass().get("M2")


# -- regressor ---------------------------------------------------------------------------------


@pytest.mark.parametrize("unknowns", [("m1", "m2", "fv1", "fv2"), ("m2", "J1", "J2"), ("fv2",)])
def test_regressor_is_exact_and_linear(arm_table1, unknowns):
    rng = np.random.default_rng(2)
    q, qd, qdd = (rng.normal(size=(5, 2)) for _ in range(3))
    y, tau_known = jaxid.regressor(arm_table1, q, qd, qdd, unknowns)
    assert y.shape == (5, 2, len(unknowns))
    theta = arm_table1.parameter_vector(unknowns)
    np.testing.assert_allclose(
        y @ theta + tau_known, jaxid.inverse_dynamics(arm_table1, q, qd, qdd), rtol=1e-12, atol=1e-12
    )
    # Linear in the parameters: any other values use the same Y and tau_known.
    other = theta * rng.uniform(0.5, 2.0, theta.shape)
    arm2 = arm_table1.with_parameters(unknowns, other)
    np.testing.assert_allclose(y @ other + tau_known, jaxid.inverse_dynamics(arm2, q, qd, qdd), rtol=1e-12, atol=1e-12)
    y2, known2 = jaxid.regressor(arm2, q, qd, qdd, unknowns)
    np.testing.assert_allclose(y2, y, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(known2, tau_known, rtol=1e-13, atol=1e-13)


def test_regressor_rejects_nonlinear_parameters(arm):
    with pytest.raises(ValueError, match="Unknown parameter name 'l1'"):
        jaxid.regressor(arm, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), ("m1", "l1"))
    with pytest.raises(ValueError, match="duplicate"):
        jaxid.regressor(arm, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), ("m1", "m1"))


# -- linearisation -------------------------------------------------------------------------------


@pytest.mark.parametrize("q0", [(0.0, 0.0), (0.3, -0.5), (1.0, 2.0)])
def test_linearisation_matches_finite_differences(arm_table1, q0):
    lin = jaxid.linearise(arm_table1, q0)
    q0 = np.asarray(q0)
    eps = 1e-6
    k_fd = np.stack(
        [
            (jaxid.gravity_torque(arm_table1, q0 + eps * e) - jaxid.gravity_torque(arm_table1, q0 - eps * e))
            / (2 * eps)
            for e in np.eye(2)
        ],
        axis=1,
    )
    np.testing.assert_allclose(lin.stiffness, k_fd, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(lin.mass, jaxid.mass_matrix(arm_table1, q0), rtol=1e-14)
    np.testing.assert_allclose(lin.damping, np.diag(arm_table1.friction))
    np.testing.assert_allclose(lin.tau0, jaxid.gravity_torque(arm_table1, q0))
    # The linearised forward dynamics agree with the nonlinear ones to first order.
    dq, dqd, dtau = np.array([1e-6, -2e-6]), np.array([3e-6, 1e-6]), np.array([2e-6, -1e-6])
    qdd = jaxid.forward_dynamics(arm_table1, q0 + dq, dqd, lin.tau0 + dtau)
    qdd_lin = np.linalg.solve(lin.mass, dtau - lin.damping @ dqd - lin.stiffness @ dq)
    np.testing.assert_allclose(qdd, qdd_lin, rtol=1e-4, atol=1e-15)


def test_frequency_response_equals_state_space(arm):
    lin = jaxid.linearise(arm, (0.2, 0.4))
    a, b = lin.state_space()
    omega = np.array([0.1, 1.0, 3.7, 20.0])
    h = lin.frequency_response(omega)
    c = np.hstack([np.eye(2), np.zeros((2, 2))])
    for w, hw in zip(omega, h, strict=True):
        ss = c @ np.linalg.solve(1j * w * np.eye(4) - a, b)
        np.testing.assert_allclose(hw, ss, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(lin.impedance(omega) @ h, np.broadcast_to(np.eye(2), h.shape), atol=1e-12)
    assert bool(jaxid.linearise(arm).is_stable())


def _sorted(z):
    z = np.asarray(z)
    return z[np.lexsort((z.imag, z.real))]


@pytest.mark.parametrize("q0", [(0.0, 0.0), (0.2, 0.4), (0.3, 2.2)])
def test_poles_are_the_roots_of_the_characteristic_polynomial(q0):
    # Independent of the package: M, C, K of the point-mass arm written out by hand at rest at q0
    # (m = 5, 1.5 kg, l = 1, 0.8 m, Fv = diag(5, 2), g = 9.81; K the Hessian of the potential
    # V = −g (m1 l1 cos q1 + m2 (l1 cos q1 + l2 cos(q1 + q2)))), and the poles as the roots of the
    # quartic det(M s² + C s + K).
    m1, m2, l1, l2, g = 5.0, 1.5, 1.0, 0.8, 9.81
    c1, c2, c12 = np.cos(q0[0]), np.cos(q0[1]), np.cos(q0[0] + q0[1])
    mass = np.array(
        [
            [(m1 + m2) * l1**2 + m2 * l2**2 + 2 * m2 * l1 * l2 * c2, m2 * l2**2 + m2 * l1 * l2 * c2],
            [m2 * l2**2 + m2 * l1 * l2 * c2, m2 * l2**2],
        ]
    )
    stiffness = g * np.array([[(m1 + m2) * l1 * c1 + m2 * l2 * c12, m2 * l2 * c12], [m2 * l2 * c12, m2 * l2 * c12]])
    damping = np.diag([5.0, 2.0])

    def entry(i, j):  # the polynomial M_ij s² + C_ij s + K_ij, highest power first
        return np.array([mass[i, j], damping[i, j], stiffness[i, j]])

    char = np.polysub(np.polymul(entry(0, 0), entry(1, 1)), np.polymul(entry(0, 1), entry(1, 0)))
    expected = np.roots(char)
    poles = jaxid.linearise(jaxid.point_mass(), q0).poles()
    assert poles.shape == (4,)
    np.testing.assert_allclose(_sorted(poles), _sorted(expected), rtol=1e-9, atol=1e-12)
    # Stable where gravity restores (hanging, tilted); the inverted second link (q2 = 2.2 rad, past
    # the horizontal) has a real pole in the right half plane.
    assert bool(jaxid.linearise(jaxid.point_mass(), q0).is_stable()) == bool(np.all(expected.real < 0))


def test_paper_eqs_14_15_against_autodiff():
    """Which entries of the printed eqs. 14-15 disagree with autodiff (DESIGN.md §3).

    Both functions take q0 in jaxid's convention (the printed a_ij measure q1 from the
    horizontal; ``paper_state_matrices`` converts). Result, at hanging and tilted postures:

    - a11: misplaced bracket (g multiplies only the m1 term); the misplaced m2 terms cancel at
      q20 = 0, so it is right there and wrong at q20 ≠ 0;
    - a12: right everywhere;
    - a21: misses a term that vanishes at q20 = 0: right there, wrong at q20 ≠ 0;
    - a22: wrong everywhere (no g at all: it equals b22 − b11);
    - b (eq. 15): right everywhere.
    """
    arm = jaxid.point_mass()
    expected_wrong = {
        (0.0, 0.0): [(1, 1)],
        (0.4, 0.0): [(1, 1)],
        (0.3, 0.7): [(0, 0), (1, 0), (1, 1)],
        (-0.5, 1.2): [(0, 0), (1, 0), (1, 1)],
    }
    for q0, wrong in expected_wrong.items():
        a_paper, b_paper = paper_state_matrices(arm, q0)
        a_true, b_true = corrected_point_mass_state_matrices(arm, q0)
        np.testing.assert_allclose(b_paper, b_true, rtol=1e-12)
        disagree = ~np.isclose(a_paper, a_true, rtol=1e-6, atol=1e-9)
        assert sorted(zip(*np.nonzero(disagree), strict=True)) == wrong, (q0, np.asarray(a_paper), np.asarray(a_true))
        np.testing.assert_allclose(a_paper[1, 1], b_paper[1, 1] - b_paper[0, 0], rtol=1e-12)
    # a11 with the bracket repaired, g (2 m1 s10 + m2 s10 − m2 sin(q10 + 2 q20)) / (l1 (…)), is right.
    q10, q20 = 0.3 - np.pi / 2, 0.7
    (m1, m2), l1, g = np.asarray(arm.masses), float(arm.lengths[0]), float(arm.gravity)
    repaired = (
        g
        * (2 * m1 * np.sin(q10) + m2 * np.sin(q10) - m2 * np.sin(q10 + 2 * q20))
        / (l1 * (2 * m1 + m2 - m2 * np.cos(2 * q20)))
    )
    np.testing.assert_allclose(repaired, corrected_point_mass_state_matrices(arm, (0.3, 0.7))[0][0, 0], rtol=1e-12)


# -- MuJoCo, a physics engine nobody here wrote -----------------------------------------------

# MuJoCo needs a positive rotational inertia; the point-mass arm gets this tiny one in both codes.
_TINY_INERTIA = 1e-9


def _mjcf(arm) -> str:
    (m1, m2), (l1, _), (r1, r2), (j1, j2), (f1, f2) = (
        np.asarray(x) for x in (arm.masses, arm.lengths, arm.com, arm.inertias, arm.friction)
    )
    # Hinges about -y, so a positive angle swings the arm from hanging (-z) towards +x:
    # angles from the downward vertical, counter-clockwise in the (x, z) plane seen from -y.
    return f"""
<mujoco>
  <option gravity="0 0 {-float(arm.gravity)}" timestep="0.01" integrator="RK4"/>
  <worldbody>
    <body name="link1">
      <joint name="j1" type="hinge" axis="0 -1 0" damping="{f1}"/>
      <inertial pos="0 0 {-r1}" mass="{m1}" diaginertia="{j1} {j1} {j1}"/>
      <body name="link2" pos="0 0 {-l1}">
        <joint name="j2" type="hinge" axis="0 -1 0" damping="{f2}"/>
        <inertial pos="0 0 {-r2}" mass="{m2}" diaginertia="{j2} {j2} {j2}"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j1"/>
    <motor joint="j2"/>
  </actuator>
</mujoco>
"""


def _mujoco_arm(name):
    arm = jaxid.point_mass() if name == "point_mass" else jaxid.table1()
    if name == "point_mass":
        arm = arm.replace(inertias=jnp.full(2, _TINY_INERTIA))
    return arm


@pytest.mark.parametrize("name", ["point_mass", "table1"])
def test_mass_matrix_and_bias_match_mujoco(name):
    arm = _mujoco_arm(name)
    model = mujoco.MjModel.from_xml_string(_mjcf(arm))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(3)
    for _ in range(10):
        q, qd = rng.uniform(-3, 3, 2), rng.uniform(-3, 3, 2)
        data.qpos[:], data.qvel[:] = q, qd
        mujoco.mj_forward(model, data)
        full = dense_inertia(model, data)
        np.testing.assert_allclose(jaxid.mass_matrix(arm, q), full, rtol=1e-12, atol=1e-12)
        bias = jaxid.coriolis_forces(arm, q, qd) + jaxid.gravity_torque(arm, q)
        np.testing.assert_allclose(bias, data.qfrc_bias, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(-arm.friction * qd, data.qfrc_passive, rtol=1e-12, atol=1e-12)


def test_simulation_matches_mujoco():
    """Same arm, same RK4 at the same step, torque applied at the integrator's stage times.

    MuJoCo holds ``ctrl`` fixed over a step unless it is set by the control callback, which MuJoCo
    calls at every RK4 stage with ``data.time`` at the stage time; there the multisine is
    evaluated. Both codes then run the same method on the same equations, so the trajectories
    agree to round-off (measured 3e-15 rad over 4 s; holding ``ctrl`` over each step instead
    gives 7e-3 rad).
    """
    arm = _mujoco_arm("table1")
    ex = jaxid.table2(lines="split", fundamental=2 * np.pi * 0.25)  # T = 4 s
    y0 = np.array([0.4, -0.3, 0.0, 0.5])
    rec = jaxid.simulate(arm, ex, discard_periods=0, measured_periods=1, initial_state=y0, sample_step=0.01)

    model = mujoco.MjModel.from_xml_string(_mjcf(arm))
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = y0[:2], y0[2:]
    k, amp, phase = np.asarray(ex.harmonics, float), np.asarray(ex.amplitudes), np.asarray(ex.phases)

    def control(m, d):
        d.ctrl[:] = np.sum(amp * np.cos(k * ex.fundamental * d.time + phase), axis=1)

    q = np.zeros((rec.t.shape[0], 2))
    mujoco.set_mjcb_control(control)
    try:
        for n in range(rec.t.shape[0]):
            q[n] = data.qpos
            mujoco.mj_step(model, data)
    finally:
        mujoco.set_mjcb_control(None)
    np.testing.assert_allclose(np.asarray(data.time), 4.0, rtol=1e-12)
    np.testing.assert_allclose(rec.q, q, rtol=0, atol=1e-12)


def test_mujoco_in_the_pinned_range_with_the_signatures_used():
    """The installed MuJoCo satisfies the test extra's pin, and each call the tests make has the
    parameters they pass (read from the binding's signature line, e.g. ``mj_mulM(m: ..., d: ...)``)."""
    import re
    import tomllib
    from pathlib import Path

    from _mujoco_api import SIGNATURES
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    pins = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["test"]]
    (pin,) = [r for r in pins if r.name == "mujoco"]
    assert pin.specifier.contains(mujoco.__version__), (mujoco.__version__, str(pin.specifier))
    for name, leading in SIGNATURES.items():
        first = getattr(mujoco, name).__doc__.splitlines()[0]
        params = re.findall(r"(\w+):", first[first.index("(") :])
        assert tuple(params[: len(leading)]) == leading, (name, first)


def test_runtime_type_checks_are_on():
    # The suite runs jaxid under jaxtyping + beartype (pyproject addopts, tests/_typecheck.py): an
    # argument of the wrong shape is a TypeCheckError naming the parameter, array-likes keep working.
    import jaxtyping

    with pytest.raises(jaxtyping.TypeCheckError, match="q0"):
        jaxid.linearise(jaxid.point_mass(), np.zeros((2, 2)))
    jaxid.linearise(jaxid.point_mass(), (0.1, 0.2))
