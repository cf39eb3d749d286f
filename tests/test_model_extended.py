"""The extended arm (Coulomb friction, rotor inertia, torque offsets), standard and base parameters.

Independent answers: autodiff of a Lagrangian that includes the rotors, the DFKI lab's equations
written out literally, MuJoCo (``damping``, ``armature``, ``frictionloss``), and the numerical rank
of the stacked regressor.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mujoco_api import dense_inertia, mujoco
from _typecheck import package_errors

import jaxid
from jaxid.model import DOUBLE_PENDULUM_PARAMETERS, REGRESSOR_PARAMETERS, STANDARD_NAMES

ALL_TERMS = ("coulomb", "rotor", "offset")


def _extended_arm(rng, **overrides):
    kwargs = dict(
        masses=rng.uniform(0.5, 3, 2),
        lengths=rng.uniform(0.2, 1.0, 2),
        com=rng.uniform(0.1, 0.6, 2),
        inertias=rng.uniform(0.01, 0.5, 2),
        friction=rng.uniform(0.01, 1, 2),
        coulomb=rng.uniform(0.05, 0.5, 2),
        rotor_inertia=rng.uniform(1e-4, 1e-2),
        gear_ratio=rng.uniform(1, 10),
        torque_offset=rng.uniform(-0.3, 0.3, 2),
        coulomb_slope=rng.uniform(20, 200),
    )
    kwargs.update(overrides)
    return jaxid.TwoLinkArm(**kwargs)


# -- the Lagrangian, with the rotors ---------------------------------------------------------


def _lagrangian(arm, q, qd):
    l1, r1, r2 = arm.lengths[0], arm.com[0], arm.com[1]
    (m1, m2), (j1, j2) = arm.masses, arm.inertias
    ir, gr = arm.rotor_inertia, arm.gear_ratio

    def positions(q):
        p1 = r1 * jnp.array([jnp.sin(q[0]), -jnp.cos(q[0])])
        joint2 = l1 * jnp.array([jnp.sin(q[0]), -jnp.cos(q[0])])
        return p1, joint2 + r2 * jnp.array([jnp.sin(q[0] + q[1]), -jnp.cos(q[0] + q[1])])

    (p1, p2), (v1, v2) = jax.jvp(positions, (q,), (qd,))
    links = 0.5 * (m1 * v1 @ v1 + m2 * v2 @ v2 + j1 * qd[0] ** 2 + j2 * (qd[0] + qd[1]) ** 2)
    # The rotor kinetic energy that gives the lab model's reflected inertias.
    rotors = 0.5 * ir * (gr * qd[0]) ** 2 + 0.5 * ir * (qd[0] - gr * qd[1]) ** 2
    potential = arm.gravity * (m1 * p1[1] + m2 * p2[1])
    return links + rotors - potential


def _euler_lagrange(arm, q, qd):
    """``M`` and the remaining terms ``b = d/dt ∂L/∂q' − M q'' − ∂L/∂q`` by autodiff."""
    mass = jax.hessian(_lagrangian, argnums=2)(arm, q, qd)
    mixed = jax.jacfwd(jax.grad(_lagrangian, argnums=2), argnums=1)(arm, q, qd)
    return mass, mixed @ qd - jax.grad(_lagrangian, argnums=1)(arm, q, qd)


def _generalised_friction(arm, qd):
    fv, fc, slope = np.asarray(arm.friction), np.asarray(arm.coulomb), arm.coulomb_slope
    return fv * qd + fc * (2 / np.pi) * np.arctan(slope * qd)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
@pytest.mark.parametrize("seed", [0, 1])
def test_extended_dynamics_match_lagrangian(seed):
    rng = np.random.default_rng(seed)
    arm = _extended_arm(rng)
    assert arm.active_terms == ALL_TERMS
    for _ in range(4):
        q, qd, tau = rng.uniform(-3, 3, 2), rng.uniform(-2, 2, 2), rng.uniform(-5, 5, 2)
        mass, bias = _euler_lagrange(arm, jnp.asarray(q), jnp.asarray(qd))
        np.testing.assert_allclose(jaxid.mass_matrix(arm, q), mass, rtol=1e-13, atol=1e-14)
        bias = np.asarray(bias)
        np.testing.assert_allclose(
            jaxid.coriolis_forces(arm, q, qd) + jaxid.gravity_torque(arm, q), bias, rtol=1e-12, atol=1e-12
        )
        # Coulomb friction and the offset are generalised forces: tau − F(q') − offset.
        rest = bias + _generalised_friction(arm, qd) + np.asarray(arm.torque_offset)
        qdd = np.linalg.solve(mass, tau - rest)
        np.testing.assert_allclose(jaxid.forward_dynamics(arm, q, qd, tau), qdd, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(jaxid.inverse_dynamics(arm, q, qd, qdd), tau, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            jaxid.energy(arm, q, qd), 0.5 * qd @ mass @ qd + jaxid.potential_energy(arm, q), rtol=1e-13
        )
    np.testing.assert_allclose(
        jaxid.holding_torque(arm, (0.4, -1.0)),
        jaxid.gravity_torque(arm, (0.4, -1.0)) + arm.torque_offset,
        rtol=1e-14,
        atol=1e-15,
    )


def test_sincos_hook_and_batching():
    rng = np.random.default_rng(2)
    arm = _extended_arm(rng)
    q, qd, tau = (rng.normal(size=(5, 2)) for _ in range(3))
    calls = []

    def sincos(x):
        calls.append(x.shape)
        return jnp.sin(x), jnp.cos(x)

    plain = jaxid.forward_dynamics(arm, q, qd, tau)
    np.testing.assert_array_equal(jaxid.forward_dynamics(arm, q, qd, tau, sincos=sincos), plain)
    assert calls == [(5, 2)]
    looped = np.stack([jax.jit(jaxid.forward_dynamics)(arm, q[i], qd[i], tau[i]) for i in range(5)])
    np.testing.assert_allclose(plain, looped, rtol=1e-14, atol=1e-14)
    arms = jax.tree.map(lambda x: jnp.stack([x] * 5), arm)
    np.testing.assert_allclose(jaxid.forward_dynamics(arms, q, qd, tau), plain, rtol=1e-15, atol=1e-15)


def test_inactive_terms_are_exact_zeros():
    """With zero values, switching the optional terms on changes nothing (eager: bit for bit);
    the default arms have none switched on (so they run the rigid-body arithmetic unchanged)."""
    for rigid in (jaxid.point_mass(), jaxid.table1()):
        assert rigid.active_terms == ()
        full = rigid.replace(active_terms=ALL_TERMS)
        assert full.active_terms == ALL_TERMS
        rng = np.random.default_rng(3)
        q, qd, x = (rng.uniform(-3, 3, (6, 2)) for _ in range(3))
        for f in (jaxid.forward_dynamics, jaxid.inverse_dynamics):
            np.testing.assert_array_equal(f(full, q, qd, x), f(rigid, q, qd, x))
        np.testing.assert_array_equal(jaxid.mass_matrix(full, q), jaxid.mass_matrix(rigid, q))
        np.testing.assert_array_equal(jaxid.holding_torque(rigid, q), jaxid.gravity_torque(rigid, q))


def test_setting_a_term_switches_it_on_and_sweeps_compile_once():
    arm = jaxid.point_mass()
    assert arm.with_parameters(("fc2",), jnp.array([0.2])).active_terms == ("coulomb",)
    assert arm.replace(Ir=1e-3).active_terms == ("rotor",)
    assert arm.replace(torque_offset=(0.1, 0.0), gear_ratio=6.0).active_terms == ("offset",)
    assert arm.replace(fc1=0.1).replace(m2=2.0).active_terms == ("coulomb",)  # stays on

    @eqx.debug.assert_max_traces(max_traces=1)
    def accel(theta):
        return jaxid.forward_dynamics(arm.with_parameters(("fc1", "Ir"), theta), jnp.ones(2), jnp.ones(2), jnp.zeros(2))

    f = jax.jit(accel)
    values = [f(jnp.array([fc, ir])) for fc, ir in [(0.0, 0.0), (0.1, 1e-3), (0.3, 2e-3)]]
    assert not np.allclose(values[0], values[1])


# -- the lab's model, written out literally from data/double-pendulum/README.md ---------------


def _lab_inverse_dynamics(p, q, qd, qdd):
    m1, m2, l1, r1, r2 = p["m1"], p["m2"], p["l1"], p["r1"], p["r2"]
    I1, I2, Ir, gr, g = p["I1"], p["I2"], p["Ir"], p["gr"], p["g"]
    b = np.array([p["b1"], p["b2"]])
    cf = np.array([p["cf1"], p["cf2"]])
    c2, s2 = np.cos(q[1]), np.sin(q[1])
    M = np.array(
        [
            [I1 + I2 + m2 * l1**2 + 2 * m2 * l1 * r2 * c2 + (gr**2 + 1) * Ir, I2 + m2 * l1 * r2 * c2 - gr * Ir],
            [I2 + m2 * l1 * r2 * c2 - gr * Ir, I2 + gr**2 * Ir],
        ]
    )
    Cqd = m2 * l1 * r2 * s2 * np.array([-2 * qd[0] * qd[1] - qd[1] ** 2, qd[0] ** 2])
    G = g * np.array(
        [(m1 * r1 + m2 * l1) * np.sin(q[0]) + m2 * r2 * np.sin(q[0] + q[1]), m2 * r2 * np.sin(q[0] + q[1])]
    )
    friction = b * qd + cf * np.arctan(100 * qd)
    return M @ qdd + Cqd + G + friction


def test_preset_values_are_the_shipped_lab_file():
    from pathlib import Path

    path = Path(__file__).parents[1] / "data" / "double-pendulum" / "lab_model_parameters.yml"
    if not path.exists():
        pytest.skip("data/double-pendulum/lab_model_parameters.yml is not in this checkout")
    lab = dict(line.split(":") for line in path.read_text().splitlines() if ":" in line)
    for name, value in DOUBLE_PENDULUM_PARAMETERS.items():
        assert float(lab[name]) == value, name


def test_double_pendulum_reproduces_the_lab_model():
    arm = jaxid.double_pendulum()
    p = DOUBLE_PENDULUM_PARAMETERS
    assert arm.active_terms == ("coulomb", "rotor")
    np.testing.assert_allclose(arm.lengths, (0.2, 0.3))
    np.testing.assert_allclose(arm.gear_ratio, 6.0)
    # Inertias about the joints are the lab's I_i.
    np.testing.assert_allclose(np.asarray(arm.standard_parameters())[[0, 3]], (p["I1"], p["I2"]), rtol=1e-15)
    rng = np.random.default_rng(4)
    for _ in range(20):
        q, qd, qdd = rng.uniform(-4, 4, 2), rng.uniform(-6, 6, 2), rng.uniform(-50, 50, 2)
        if rng.uniform() < 0.3:
            qd = rng.uniform(-0.02, 0.02, 2)  # the steep part of the smooth sign
        lab = _lab_inverse_dynamics(p, q, qd, qdd)
        np.testing.assert_allclose(jaxid.inverse_dynamics(arm, q, qd, qdd), lab, rtol=1e-12, atol=1e-12)
        tau = rng.uniform(-2, 2, 2)
        qdd_ours = np.asarray(jaxid.forward_dynamics(arm, q, qd, tau))
        np.testing.assert_allclose(_lab_inverse_dynamics(p, q, qd, qdd_ours), tau, rtol=1e-11, atol=1e-12)


# -- MuJoCo: damping, armature, frictionloss ----------------------------------------------------


def _mjcf(arm, slope_free_coulomb) -> str:
    (m1, m2), (l1, _), (r1, r2), (j1, j2), (f1, f2) = (
        np.asarray(x) for x in (arm.masses, arm.lengths, arm.com, arm.inertias, arm.friction)
    )
    ir, gr = float(arm.rotor_inertia), float(arm.gear_ratio)
    a1, a2 = (gr**2 + 1) * ir, gr**2 * ir  # MuJoCo's armature: the diagonal reflected inertia only
    c1, c2 = np.asarray(arm.coulomb) if slope_free_coulomb else (0.0, 0.0)
    return f"""
<mujoco>
  <option gravity="0 0 {-float(arm.gravity)}" timestep="0.001"/>
  <worldbody>
    <body name="link1">
      <joint name="j1" type="hinge" axis="0 -1 0" damping="{f1}" armature="{a1}" frictionloss="{c1}"/>
      <inertial pos="0 0 {-r1}" mass="{m1}" diaginertia="{j1} {j1} {j1}"/>
      <body name="link2" pos="0 0 {-l1}">
        <joint name="j2" type="hinge" axis="0 -1 0" damping="{f2}" armature="{a2}" frictionloss="{c2}"/>
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


def test_rotor_inertia_and_damping_match_mujoco_armature():
    """MuJoCo's ``armature`` is the diagonal reflected inertia, ``(gr² + 1) Ir`` and ``gr² Ir``.
    The lab model's off-diagonal ``−gr Ir`` (joint 2's rotor turning with link 1) has no MuJoCo
    counterpart: it is checked by the Lagrangian above and subtracted here."""
    arm = _extended_arm(np.random.default_rng(5), torque_offset=(0.0, 0.0))
    model = mujoco.MjModel.from_xml_string(_mjcf(arm, slope_free_coulomb=False))
    data = mujoco.MjData(model)
    off = -float(arm.gear_ratio * arm.rotor_inertia)
    rng = np.random.default_rng(6)
    rigid = arm.replace(coulomb=(0.0, 0.0), active_terms=("rotor",))
    for _ in range(10):
        q, qd, ctrl = rng.uniform(-3, 3, 2), rng.uniform(-3, 3, 2), rng.uniform(-2, 2, 2)
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, qd, ctrl
        mujoco.mj_forward(model, data)
        full = dense_inertia(model, data)
        ours = np.asarray(jaxid.mass_matrix(arm, q))
        np.testing.assert_allclose(ours - off * (1 - np.eye(2)), full, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(-arm.friction * qd, data.qfrc_passive, rtol=1e-12, atol=1e-13)
        # End to end: our torque for MuJoCo's acceleration, less the off-diagonal term, is ctrl.
        tau = jaxid.inverse_dynamics(rigid, q, qd, data.qacc) - off * data.qacc[::-1]
        np.testing.assert_allclose(tau, ctrl, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("slope", [100.0, 1e7])
def test_coulomb_friction_matches_mujoco_frictionloss_when_sliding(slope):
    """MuJoCo's ``frictionloss`` is a dry-friction constraint solved with the dynamics, not a
    function of the velocity: at rest or when slow it holds (softly) whatever the other forces
    ask for, where the smooth sign gives zero at zero velocity. Only the sliding regime is
    comparable: for ``|q'|`` well above ``|q''_free| / 100`` (MuJoCo's default reference
    acceleration) MuJoCo's force saturates at ``−fc sign(q')``; ours is
    ``−fc (2/π) atan(slope q')``, which differs by at most ``fc · 2 / (π slope |q'|)`` (0.3 % at
    ``slope = 100``, ``|q'| ≥ 2``; 1e-7 at ``slope = 1e7``)."""
    arm = _extended_arm(np.random.default_rng(7), torque_offset=(0.0, 0.0), coulomb_slope=slope)
    model = mujoco.MjModel.from_xml_string(_mjcf(arm, slope_free_coulomb=True))
    data = mujoco.MjData(model)
    fc = np.asarray(arm.coulomb)
    off = -float(arm.gear_ratio * arm.rotor_inertia)
    rng = np.random.default_rng(8)
    for _ in range(10):
        q, ctrl = rng.uniform(-3, 3, 2), rng.uniform(-1, 1, 2)
        qd = rng.uniform(2, 4, 2) * rng.choice([-1.0, 1.0], 2)
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, qd, ctrl
        mujoco.mj_forward(model, data)
        coulomb = jaxid.friction_torque(arm, qd) - arm.friction * qd
        bound = fc * 2 / (np.pi * slope * np.abs(qd)) + 1e-9
        assert np.all(np.abs(-coulomb - data.qfrc_constraint) <= bound), (coulomb, data.qfrc_constraint)
        tau = jaxid.inverse_dynamics(arm, q, qd, data.qacc) - off * data.qacc[::-1]
        np.testing.assert_allclose(tau, ctrl, rtol=0, atol=float(np.max(bound)) + 1e-9)


# -- standard parameters and regressor ------------------------------------------------------------


@pytest.mark.parametrize("which", ["double_pendulum", "extended", "table1"])
def test_standard_regressor_is_exact(which):
    rng = np.random.default_rng(9)
    arm = {"double_pendulum": jaxid.double_pendulum, "table1": jaxid.table1, "extended": lambda: _extended_arm(rng)}[
        which
    ]()
    q, qd, qdd = rng.uniform(-4, 4, (8, 2)), rng.uniform(-5, 5, (8, 2)), rng.uniform(-20, 20, (8, 2))
    y = jaxid.standard_regressor(arm, q, qd, qdd)
    phi = jaxid.standard_parameters(arm)
    assert y.shape == (8, 2, len(STANDARD_NAMES)) and phi.shape == (len(STANDARD_NAMES),)
    tau = jaxid.inverse_dynamics(arm, q, qd, qdd)
    np.testing.assert_allclose(y @ phi, tau, rtol=1e-13, atol=1e-13 * np.max(np.abs(tau)))
    # Y depends only on the known geometry: the Jacobian of a map linear in φ (through arm_from_standard).
    jac = jax.jacfwd(lambda p: jaxid.inverse_dynamics(jaxid.arm_from_standard(arm, p), q, qd, qdd))(phi)
    np.testing.assert_allclose(jac, y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("which", ["point_mass", "table1", "double_pendulum"])
def test_arm_from_standard_round_trip(which):
    arm = getattr(jaxid, which)()
    back = jaxid.arm_from_standard(arm, jaxid.standard_parameters(arm))
    for name in jaxid.PARAMETER_NAMES:
        np.testing.assert_allclose(back.get(name), arm.get(name), rtol=1e-13, atol=1e-15, err_msg=name)
    with pytest.raises(ValueError, match="cannot be mapped back"):
        jaxid.arm_from_standard(arm, jaxid.standard_parameters(arm).at[2].set(0.0))
    with package_errors(), pytest.raises(ValueError, match="trailing axis of length 13"):
        jaxid.arm_from_standard(arm, jnp.ones(12))


# -- base parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["double_pendulum", "table1"])
def test_base_parameters_against_rank(which):
    arm = getattr(jaxid, which)()
    base = jaxid.base_parameters(arm)
    rng = np.random.default_rng(10)
    q, qd, qdd = rng.uniform(-3, 3, (200, 2)), rng.uniform(-3, 3, (200, 2)), rng.uniform(-10, 10, (200, 2))
    stacked = np.asarray(jaxid.standard_regressor(arm, q, qd, qdd)).reshape(-1, len(STANDARD_NAMES))
    assert base.rank == np.linalg.matrix_rank(stacked) == 11
    assert base.dependent == ("m1", "m2")
    assert base.names == ("I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2", "off1", "off2")
    l1 = float(arm.lengths[0])
    k = np.asarray(base.matrix)
    expected = np.zeros((11, 13))
    for row, col in enumerate(base.independent):
        expected[row, col] = 1.0
    expected[0, 5], expected[1, 5] = l1**2, l1  # I1 + l1² m2, m1r1 + l1 m2
    np.testing.assert_allclose(k, expected, rtol=1e-12, atol=1e-13)
    coef = "" if l1 == 1 else f"{l1:.6g} "  # a coefficient 1 is not written
    assert base.labels[:2] == (f"I1 + {coef and f'{l1**2:.6g} '}m2", f"m1r1 + {coef}m2")
    # The base regressor with the base parameters reproduces the inverse dynamics at new states.
    q, qd, qdd = rng.uniform(-3, 3, (7, 2)), rng.uniform(-3, 3, (7, 2)), rng.uniform(-10, 10, (7, 2))
    yb = jaxid.base_regressor(arm, q, qd, qdd, base)
    tau = jaxid.inverse_dynamics(arm, q, qd, qdd)
    np.testing.assert_allclose(yb @ base.values(jaxid.standard_parameters(arm)), tau, rtol=1e-12, atol=1e-12)
    # The base parameters are the same for any arm with the same known geometry.
    other = arm.replace(m1=2 * arm.get("m1"), m2=0.5 * arm.get("m2"), J2=0.01)
    np.testing.assert_allclose(jaxid.base_parameters(other).matrix, base.matrix, rtol=1e-12, atol=1e-14)
    # A pytree (the choice of columns static, K an array leaf): it passes through jit as an argument.
    np.testing.assert_allclose(jax.jit(jaxid.base_regressor)(arm, q, qd, qdd, base), yb, rtol=1e-14, atol=1e-14)


def test_base_parameters_rejects_bad_input():
    arm = jaxid.double_pendulum()
    with pytest.raises(ValueError, match="without batch axes"):
        jaxid.base_parameters(jax.tree.map(lambda x: jnp.stack([x, x]), arm))
    with pytest.raises(ValueError, match="samples"):
        jaxid.base_parameters(arm, samples=3)


# -- parameter access and validation ----------------------------------------------------------


def test_every_parameter_round_trips():
    arm = jaxid.double_pendulum()
    for name in jaxid.PARAMETER_NAMES:
        value = 1.1 * float(arm.get(name)) + 0.01
        np.testing.assert_allclose(arm.with_parameters((name,), jnp.array([value])).get(name), value)
        np.testing.assert_allclose(arm.replace(**{name: value}).get(name), value)
    names = jaxid.PARAMETER_NAMES
    vector = arm.parameter_vector(names)
    assert vector.shape == (15,)
    np.testing.assert_array_equal(arm.with_parameters(names, vector).parameter_vector(names), vector)
    batched = jax.tree.map(lambda x: jnp.stack([x, x, x]), arm)
    values = jnp.stack([vector, 1.1 * vector, 1.2 * vector])
    np.testing.assert_allclose(batched.with_parameters(names, values).parameter_vector(names), values)
    assert arm.replace(coulomb_slope=10.0).coulomb_slope == 10.0


def test_regressor_accepts_every_linear_parameter():
    arm = _extended_arm(np.random.default_rng(11))
    rng = np.random.default_rng(12)
    q, qd, qdd = (rng.normal(size=(4, 2)) for _ in range(3))
    y, known = jaxid.regressor(arm, q, qd, qdd, REGRESSOR_PARAMETERS)
    theta = arm.parameter_vector(REGRESSOR_PARAMETERS)
    np.testing.assert_allclose(y @ theta + known, jaxid.inverse_dynamics(arm, q, qd, qdd), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"coulomb": (-0.1, 0.0)}, "coulomb must be non-negative"),
        ({"rotor_inertia": -1e-4}, "rotor_inertia must be non-negative"),
        ({"gear_ratio": 0.0}, "gear_ratio must be positive"),
        ({"torque_offset": (np.nan, 0.0)}, "torque_offset contains NaN or inf"),
        ({"coulomb": (np.inf, 0.0)}, "coulomb contains NaN or inf"),
        ({"coulomb": (0.1, 0.1, 0.1)}, "trailing axis of length 2"),
        ({"coulomb_slope": 0.0}, "coulomb_slope must be positive"),
        ({"coulomb_slope": "steep"}, "coulomb_slope is a static option"),
        ({"active_terms": ("stiction",)}, "Unknown optional term 'stiction'"),
        ({"inertias": (-10.0, 0.0)}, "inertias about the joints"),
    ],
)
def test_bad_values_raise(kwargs, message):
    with package_errors(), pytest.raises(ValueError, match=message):
        jaxid.point_mass().replace(**kwargs)


def test_bad_names_and_float32_raise():
    arm = jaxid.point_mass()
    with pytest.raises(ValueError, match="Did you mean 'Ir'"):
        arm.get("ir")
    with pytest.raises(ValueError, match="no field or parameter 'gr'"):
        arm.replace(gr=6.0)
    with pytest.raises(ValueError, match="Unknown parameter name 'l1'"):
        jaxid.regressor(arm, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), ("Ir", "l1"))
    with pytest.raises(ValueError, match="Ir must be non-negative|rotor_inertia must be non-negative"):
        arm.replace(Ir=-1.0)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            jaxid.point_mass()
    finally:
        jax.config.update("jax_enable_x64", True)


# -- the interface: another arm gets the generic functions for free ------------------------------


class _Pendulum(jaxid.AbstractArm):
    """A one-link pendulum ``tau = I q'' + g (m r) sin q + fv q'``, implementing only the abstract methods."""

    dof: ClassVar[int] = 1
    parameter_names: ClassVar[tuple[str, ...]] = ("I", "mr", "fv")
    regressor_parameters: ClassVar[tuple[str, ...]] = ("I", "mr", "fv")
    standard_names: ClassVar[tuple[str, ...]] = ("I", "mr", "m", "fv")
    values: jax.Array

    def get(self, name):
        return self.values[..., self.parameter_names.index(name)]

    def with_parameters(self, names, values):
        new = self.values
        for i, name in enumerate(names):
            new = new.at[..., self.parameter_names.index(name)].set(values[..., i])
        return _Pendulum(new)

    def mass_matrix(self, q):
        return jnp.broadcast_to(self.values[..., 0], jnp.shape(q))[..., None]

    def inverse_dynamics(self, q, qd, qdd, *, sincos=None):
        return jnp.asarray(self.standard_regressor(q, qd, qdd) @ self.standard_parameters())

    def potential_energy(self, q):
        return -9.81 * self.values[..., 1] * jnp.cos(jnp.asarray(q)[..., 0])

    def standard_parameters(self):
        i, mr, fv = self.values
        return jnp.stack([i, mr, 2.0, fv])

    def standard_regressor(self, q, qd, qdd):
        q, qd, qdd = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)
        cols = [qdd[..., 0], 9.81 * jnp.sin(q[..., 0]), jnp.zeros_like(q[..., 0]), qd[..., 0]]
        return jnp.stack(cols, -1)[..., None, :]


def test_another_arm_uses_the_generic_functions():
    arm = _Pendulum(jnp.array([0.3, 0.5, 0.1]))
    q, qd, tau = jnp.array([0.4]), jnp.array([-1.0]), jnp.array([0.2])
    qdd = jaxid.forward_dynamics(arm, q, qd, tau)  # the generic default: D⁻¹ (tau − bias)
    np.testing.assert_allclose(jaxid.inverse_dynamics(arm, q, qd, qdd), tau, rtol=1e-14)
    np.testing.assert_allclose(jaxid.holding_torque(arm, q), 9.81 * 0.5 * np.sin(0.4), rtol=1e-14)
    np.testing.assert_allclose(jaxid.energy(arm, q, qd), 0.5 * 0.3 - 9.81 * 0.5 * np.cos(0.4), rtol=1e-14)
    y, known = jaxid.regressor(arm, q, qd, qdd, ("I", "fv"))
    np.testing.assert_allclose(y @ jnp.array([0.3, 0.1]) + known, tau, rtol=1e-13)
    base = jaxid.base_parameters(arm)
    assert base.rank == 3 and base.dependent == ("m",) and base.labels == ("I", "mr", "fv")


def test_linearisation_includes_rotor_coulomb_and_offset():
    """``linearise`` is the Jacobian of the full model at rest: central differences of the inverse
    dynamics (independent of autodiff) give D0, Fv (Coulomb slope included) and K0; tau0 holds."""
    arm = jaxid.double_pendulum().replace(torque_offset=(0.02, -0.01))
    q0 = jnp.array([0.3, -0.4])
    lin = jaxid.linearise(arm, q0)
    zero = jnp.zeros(2)
    eps = 1e-6

    def column(fn, i):
        e = jnp.zeros(2).at[i].set(eps)
        return (fn(e) - fn(-e)) / (2 * eps)

    mass = jnp.stack([column(lambda a: jaxid.inverse_dynamics(arm, q0, zero, a), i) for i in range(2)], -1)
    damping = jnp.stack([column(lambda v: jaxid.inverse_dynamics(arm, q0, v, zero), i) for i in range(2)], -1)
    stiffness = jnp.stack([column(lambda d: jaxid.inverse_dynamics(arm, q0 + d, zero, zero), i) for i in range(2)], -1)
    np.testing.assert_allclose(lin.mass, mass, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(lin.damping, damping, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lin.stiffness, stiffness, rtol=1e-7, atol=1e-9)
    # The Coulomb slope at rest dominates the lab's tiny viscous friction.
    slope = arm.coulomb * 2 / np.pi * arm.coulomb_slope
    np.testing.assert_allclose(jnp.diag(lin.damping), arm.friction + slope, rtol=1e-12)
    np.testing.assert_allclose(lin.tau0, jaxid.holding_torque(arm, q0), rtol=0, atol=0)
    np.testing.assert_allclose(jaxid.forward_dynamics(arm, q0, zero, lin.tau0), 0.0, atol=1e-12)
