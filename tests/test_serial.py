"""``SerialArm`` from URDF against independent answers: ``TwoLinkArm`` (the same arm written as a
URDF), MuJoCo (UR5 and Franka Panda, the same URDF files), the numerical rank of the stacked
regressor, and the parser's one-line errors.

Every compiled kernel is shared: all states of an arm have the batch shape ``(B, n)`` and the arm
variants differ only in their (traced) parameter values, so each kernel compiles once per arm.
"""

import xml.etree.ElementTree as ET
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mujoco_api import dense_inertia, mujoco

import jaxid
from jaxid.model.base_parameters import base_parameters
from jaxid.model.serial import LINK_PARAMETERS, SerialArm, serial_standard_names
from jaxid.model.urdf import load_arm, parse_urdf

ROBOTS = Path(__file__).resolve().parent.parent / "data" / "robots"
TWO_LINK = ROBOTS / "two_link.urdf"
UR5 = ROBOTS / "ur5_robot.urdf"
PANDA = ROBOTS / "panda.urdf"
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
B = 32  # states per batch (one shape for every kernel)


def _states(rng, n, scale=(2.0, 2.0, 5.0)):
    return tuple(rng.uniform(-s, s, (B, n)) for s in scale)


def _relative(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))


def _sincos(q):
    return jnp.sin(q), jnp.cos(q)


def _per_joint(arm, prefix, values):
    names = tuple(f"{prefix}{i + 1}" for i in range(arm.dof))
    return arm.with_parameters(names, values)


@pytest.fixture(scope="module")
def two_link():
    return load_arm(TWO_LINK)


@pytest.fixture(scope="module", params=["ur5", "panda"])
def real(request):
    """``(name, arm, mujoco model)``: the arm with random armature and damping, set alike in both."""
    path, locked = (UR5, ()) if request.param == "ur5" else (PANDA, PANDA_FINGERS)
    arm = load_arm(path, fixed_joints=locked)
    rng = np.random.default_rng(7)
    armature = rng.uniform(0.01, 0.2, arm.dof)
    damping = rng.uniform(0.1, 2.0, arm.dof)
    arm = _per_joint(_per_joint(arm, "Ia", armature), "fv", damping)
    model = _mujoco_model(path, locked)
    model.dof_armature[:] = armature
    model.dof_damping[:] = damping
    assert [model.joint(i).name for i in range(model.njnt)] == list(arm.joint_names)
    return request.param, arm, model


def _mujoco_model(path, locked=()):
    """MuJoCo's model of the same URDF: meshes stripped, locked joints fixed, contacts, limits and
    friction loss off (constraints disabled), gravity −9.81 along z."""
    root = ET.parse(path).getroot()
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for element in link.findall(tag):
                link.remove(element)
    for joint in root.iter("joint"):
        if joint.get("name") in locked:
            joint.set("type", "fixed")
    extension = ET.SubElement(root, "mujoco")
    ET.SubElement(extension, "compiler", discardvisual="true", fusestatic="false")
    model = mujoco.MjModel.from_xml_string(ET.tostring(root, encoding="unicode"))
    model.opt.gravity[:] = (0.0, 0.0, -9.81)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    return model


def _extended(arm, seed=3):
    """The arm with every optional term non-zero (Coulomb friction, offsets, armature, damping)."""
    rng = np.random.default_rng(seed)
    for prefix, low, high in (("Ia", 0.01, 0.2), ("fv", 0.1, 2.0), ("fc", 0.1, 1.0), ("off", -0.5, 0.5)):
        arm = _per_joint(arm, prefix, rng.uniform(low, high, arm.dof))
    return arm


# -- the two-link arm: SerialArm equals TwoLinkArm ------------------------------------------------


def test_two_link_urdf_equals_two_link_arm(two_link):
    reference = jaxid.table1()
    q, qd, qdd = _states(np.random.default_rng(0), 2, scale=(np.pi, 3.0, 10.0))
    tau = reference.inverse_dynamics(q, qd, qdd)
    scale = np.max(np.abs(tau))
    np.testing.assert_allclose(jaxid.inverse_dynamics(two_link, q, qd, qdd), tau, rtol=0, atol=1e-12 * scale)
    mass = jaxid.mass_matrix(reference, q)
    np.testing.assert_allclose(jaxid.mass_matrix(two_link, q), mass, rtol=0, atol=1e-12 * np.max(np.abs(mass)))
    bias = jaxid.coriolis_forces(reference, q, qd) + jaxid.gravity_torque(reference, q)
    np.testing.assert_allclose(two_link.bias_forces(q, qd), bias, rtol=0, atol=1e-12 * np.max(np.abs(bias)))
    np.testing.assert_allclose(
        jaxid.friction_torque(two_link, qd), jaxid.friction_torque(reference, qd), rtol=1e-15, atol=0
    )
    energy = jaxid.potential_energy(reference, q)
    np.testing.assert_allclose(jaxid.potential_energy(two_link, q), energy, rtol=0, atol=1e-12 * np.max(np.abs(energy)))
    sincos = two_link.inverse_dynamics(q, qd, qdd, sincos=_sincos)
    np.testing.assert_allclose(sincos, tau, rtol=0, atol=1e-12 * scale)
    # The parsed parameters: link 1 about joint 1 (axis −y): m, m cz = −m r, Iyy = J + m r².
    assert two_link.joint_names == ("joint1", "joint2") and two_link.dof == 2
    np.testing.assert_allclose(two_link.inertial[0, [0, 3, 7]], [5.0, -2.5, 5.0 + 5.0 * 0.25], rtol=1e-15)
    np.testing.assert_allclose(two_link.parent_translations, [[0, 0, 0], [0, 0, -1.0]])


def test_two_link_forward_dynamics_vmap_equals_single_calls(two_link):
    arm = _extended(two_link)
    q, qd, qdd = _states(np.random.default_rng(1), 2)
    tau = arm.inverse_dynamics(q, qd, qdd)
    batched = jax.jit(jax.vmap(arm.forward_dynamics))(q, qd, tau)
    singles = np.stack([arm.forward_dynamics(q[k], qd[k], tau[k]) for k in range(4)])
    np.testing.assert_allclose(batched[:4], singles, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(arm.forward_dynamics(q, qd, tau), batched, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(batched, qdd, rtol=0, atol=1e-11 * np.max(np.abs(qdd)))


def test_gradient_in_the_standard_parameters_and_no_lapack_call(two_link):
    arm = _extended(two_link)
    q, qd, qdd = _states(np.random.default_rng(10), 2)
    theta = arm.standard_parameters()

    def total(theta):
        return arm.with_standard_parameters(theta).inverse_dynamics(q, qd, qdd).sum()

    gradient = jax.jit(jax.grad(total))(theta)
    y = arm.standard_regressor(q, qd, qdd)
    np.testing.assert_allclose(gradient, y.sum(axis=(0, 1)), rtol=1e-12, atol=1e-12 * np.max(np.abs(y)))
    # forward dynamics under vmap compiles to plain arithmetic (docs/lapack-deadlock.md)
    tau = arm.inverse_dynamics(q, qd, qdd)
    text = jax.jit(jax.vmap(arm.forward_dynamics)).lower(q, qd, tau).as_text()
    assert "lapack" not in text.lower()


def test_a_parameter_sweep_compiles_once(two_link):
    q, qd, qdd = _states(np.random.default_rng(2), 2)

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def torque(masses):
        return two_link.with_parameters(("m1", "m2"), masses).inverse_dynamics(q, qd, qdd)

    for masses in ([5.0, 1.5], [4.0, 2.0], [1.0, 1.0]):
        torque(jnp.array(masses))
    # a batch of arms broadcasts against the states: (3 arms, 1, B states)
    masses = jnp.array([[5.0, 1.5], [4.0, 2.0], [1.0, 1.0]])[:, None]
    batched = two_link.with_parameters(("m1", "m2"), masses).inverse_dynamics(q, qd, qdd)
    assert batched.shape == (3, B, 2)
    np.testing.assert_allclose(batched[1], torque(jnp.array([4.0, 2.0])), rtol=1e-14, atol=1e-12)


# -- UR5 and Panda against MuJoCo -----------------------------------------------------------------


def test_mass_matrix_bias_and_inverse_dynamics_match_mujoco(real):
    name, arm, model = real
    q, qd, qdd = _states(np.random.default_rng(4), arm.dof)
    mass = np.asarray(arm.mass_matrix(q))
    bias = np.asarray(arm.bias_forces(q, qd))
    tau = np.asarray(arm.inverse_dynamics(q, qd, qdd))
    data = mujoco.MjData(model)
    worst = np.zeros(3)
    for k in range(20):
        data.qpos[:], data.qvel[:] = q[k], qd[k]
        mujoco.mj_forward(model, data)
        worst[0] = max(worst[0], _relative(mass[k], dense_inertia(model, data)))
        worst[1] = max(worst[1], _relative(bias[k], data.qfrc_bias))
        data.qacc[:] = qdd[k]
        mujoco.mj_inverse(model, data)
        worst[2] = max(worst[2], _relative(tau[k], data.qfrc_inverse))
    assert np.all(worst < 1e-12), (name, worst)  # measured: ~3e-15


def test_forward_dynamics_round_trip(real):
    _, arm, _ = real
    arm = _extended(arm)
    q, qd, qdd = _states(np.random.default_rng(5), arm.dof)
    tau = arm.inverse_dynamics(q, qd, qdd)
    acc = arm.forward_dynamics(q, qd, tau)
    assert _relative(acc, qdd) < 1e-10
    # M q'' + C q' + G + friction + offset = tau
    rebuilt = (
        jnp.einsum("bij,bj->bi", arm.mass_matrix(q), acc)
        + arm.bias_forces(q, qd)
        + arm.friction_torque(qd)
        + arm.offset
    )
    assert _relative(rebuilt, tau) < 1e-12


def test_prismatic_joints_match_mujoco(tmp_path):
    """A revolute–prismatic–revolute arm with tilted frames and off-axis centres of mass."""
    body = (
        _BASE
        + _link("a", mass=2.0, inertia=(0.3, 0.2, 0.25), xyz="0.1 0.05 0.2", rpy="0.2 0.1 -0.3")
        + _link("b", mass=1.5, inertia=(0.05, 0.04, 0.03), xyz="0.2 -0.1 0.05", rpy="-0.4 0.3 0.2")
        + _link("c", mass=0.8, inertia=(0.02, 0.03, 0.04), xyz="0 0.1 0.3")
        + _joint("j1", "base", "a", axis="0 0 1", xyz="0 0 0.3")
        + _joint("j2", "a", "b", kind="prismatic", axis="1 0.5 0", xyz="0.1 0 0.4", rpy="0.3 -0.5 0.2")
        + _joint("j3", "b", "c", axis="0 1 0", xyz="0.3 0 0", rpy="0 0.4 0")
    )
    path = _urdf(tmp_path, body)
    arm = _per_joint(_per_joint(load_arm(path), "Ia", [0.1, 0.2, 0.05]), "fv", [0.5, 1.0, 0.3])
    assert arm.joint_types == ("revolute", "prismatic", "revolute")
    model = _mujoco_model(path)
    model.dof_armature[:], model.dof_damping[:] = [0.1, 0.2, 0.05], [0.5, 1.0, 0.3]
    q, qd, qdd = _states(np.random.default_rng(11), 3)
    mass, bias, tau = (
        np.asarray(x) for x in (arm.mass_matrix(q), arm.bias_forces(q, qd), arm.inverse_dynamics(q, qd, qdd))
    )
    data = mujoco.MjData(model)
    for k in range(8):
        data.qpos[:], data.qvel[:] = q[k], qd[k]
        mujoco.mj_forward(model, data)
        assert _relative(mass[k], dense_inertia(model, data)) < 1e-12
        assert _relative(bias[k], data.qfrc_bias) < 1e-12
        data.qacc[:] = qdd[k]
        mujoco.mj_inverse(model, data)
        assert _relative(tau[k], data.qfrc_inverse) < 1e-12
    assert _relative(arm.forward_dynamics(q, qd, tau), qdd) < 1e-10


# -- the regressor and the base parameters ---------------------------------------------------------


@pytest.fixture(scope="module")
def arms(two_link):
    return {
        "two_link": _extended(two_link),
        "ur5": _extended(load_arm(UR5)),
        "panda": _extended(load_arm(PANDA, fixed_joints=PANDA_FINGERS)),
    }


@pytest.mark.parametrize("name", ["two_link", "ur5", "panda"])
def test_regressor_times_standard_parameters_is_the_inverse_dynamics(arms, name):
    arm = arms[name]
    q, qd, qdd = _states(np.random.default_rng(6), arm.dof)
    y = arm.standard_regressor(q, qd, qdd)
    assert y.shape == (B, arm.dof, 14 * arm.dof)
    assert arm.standard_names == serial_standard_names(arm.dof)
    tau = arm.inverse_dynamics(q, qd, qdd)
    assert _relative(y @ arm.standard_parameters(), tau) < 1e-12


@pytest.mark.parametrize("name", ["two_link", "ur5", "panda"])
def test_regressor_recursion_is_the_jacobian_of_the_inverse_dynamics(arms, name):
    """Every column of the regressor recursion (``spatial.rnea_regressor`` + the joint terms) equals the
    forward-mode Jacobian of the inverse dynamics in the standard vector (an independent route)."""
    arm = arms[name]
    q, qd, qdd = (x[:4] for x in _states(np.random.default_rng(8), arm.dof))

    def torque(standard, q, qd, qdd):
        return arm.with_standard_parameters(standard).inverse_dynamics(q, qd, qdd)

    # Compiled (one program, not the recursion's operations one by one under an eager vmap).
    jacobian = jax.jit(jax.vmap(jax.jacfwd(torque), in_axes=(None, 0, 0, 0)))(arm.standard_parameters(), q, qd, qdd)
    y = arm.standard_regressor(q, qd, qdd)
    np.testing.assert_allclose(y, jacobian, rtol=0, atol=1e-12 * np.max(np.abs(jacobian)))


def test_generic_regressor_takes_named_standard_parameters(arms):
    """``jaxid.regressor`` (the Jacobian in named parameters, through ``with_parameters``) agrees with
    columns of the standard regressor."""
    arm = arms["two_link"]
    q, qd, qdd = _states(np.random.default_rng(6), arm.dof)
    y = arm.standard_regressor(q, qd, qdd)
    tau = arm.inverse_dynamics(q, qd, qdd)
    unknowns = ("m2", "Iyy2", "fv1", "fc2", "off1")
    y_named, known = eqx.filter_jit(jaxid.regressor)(arm, q, qd, qdd, unknowns)
    columns = [arm.standard_names.index(u) for u in unknowns]
    np.testing.assert_allclose(y_named, y[..., columns], rtol=1e-12, atol=1e-12 * np.max(np.abs(y)))
    assert _relative(y_named @ arm.parameter_vector(unknowns) + known, tau) < 1e-12


def _independent_rank(arm, seed):
    """The rank of the regressor stacked over random states, by SVD of the column-normalised matrix."""
    q, qd, qdd = _states(np.random.default_rng(seed), arm.dof, scale=(np.pi, 3.0, 10.0))
    w = np.asarray(arm.standard_regressor(q, qd, qdd)).reshape(-1, 14 * arm.dof)
    norms = np.linalg.norm(w, axis=0)
    present = norms > 1e-12 * norms.max()
    scaled = w[:, present] / norms[present]
    return np.linalg.matrix_rank(scaled, tol=1e-9 * np.linalg.norm(scaled, 2)), w


#: Base parameter counts (rank of the stacked regressor), checked against the SVD rank below.
BASE_COUNTS = {"two_link": 13, "ur5": 58, "panda": 69}


@pytest.mark.parametrize("name", ["two_link", "ur5", "panda"])
def test_base_parameter_count_matches_an_independent_rank(arms, name):
    arm = arms[name]
    base = base_parameters(arm, samples=B)
    rank, w = _independent_rank(arm, seed=8)
    assert base.rank == rank == BASE_COUNTS[name], (name, base.rank, rank)
    # the base regressor reproduces the torque with the base parameters
    theta = np.asarray(arm.standard_parameters())
    tau = w @ theta
    assert _relative(w[:, list(base.independent)] @ np.asarray(base.values(theta)), tau) < 1e-9


def test_two_link_base_parameters_against_two_link_arm(arms, two_link):
    """TwoLinkArm's rigid part has 4 base parameters (``I1 + l1² m2``, ``m1r1 + l1 m2``, ``I2``, ``m2r2``).
    The URDF arm's standard vector holds more: the first moments across the link (``mx1``, ``mx2``),
    which TwoLinkArm fixes at zero and gravity makes identifiable, so its rigid part has 6. Restricted
    to TwoLinkArm's parameters (``m``, ``mz`` along the link, ``Iyy`` about the joint axis) the rank is
    the same 4, and the shared base parameters take the same values (``mz = −m r`` along −z)."""
    reference_arm = jaxid.table1()
    reference = jaxid.base_parameters(reference_arm)
    reference_rigid = [n for n in reference.names if n in {"I1", "m1r1", "m1", "I2", "m2r2", "m2"}]
    assert len(reference_rigid) == 4
    arm = arms["two_link"]
    _, w = _independent_rank(arm, seed=9)
    shared = [arm.standard_names.index(n) for n in ("m1", "mz1", "Iyy1", "m2", "mz2", "Iyy2")]
    assert np.linalg.matrix_rank(w[:, shared], tol=1e-9 * np.linalg.norm(w[:, shared], 2)) == 4
    base = base_parameters(arm, samples=B)
    rigid = [n for n in base.names if n.rstrip("0123456789") in LINK_PARAMETERS]
    assert rigid == ["mx1", "mz1", "Iyy1", "mx2", "mz2", "Iyy2"]
    ours = dict(zip(base.names, np.asarray(base.values(two_link.standard_parameters())), strict=True))
    theirs = dict(zip(reference.names, np.asarray(reference.values(reference_arm.standard_parameters())), strict=True))
    np.testing.assert_allclose(
        [ours[n] for n in rigid],
        [0.0, -theirs["m1r1"], theirs["I1"], 0.0, -theirs["m2r2"], theirs["I2"]],
        rtol=1e-12,
        atol=1e-12,
    )


# -- the parser ------------------------------------------------------------------------------------


def test_fixed_joints_fold_into_the_moving_link():
    panda = parse_urdf(PANDA, fixed_joints=PANDA_FINGERS)
    assert panda.joint_names == tuple(f"panda_joint{i}" for i in range(1, 8))
    # link 7 carries the hand and both fingers (link8 and the tcp frame are massless)
    np.testing.assert_allclose(panda.inertial[-1, 0], 0.735522 + 0.73 + 2 * 0.015, rtol=1e-15)
    np.testing.assert_allclose(panda.position_limits[3], [-3.0718, -0.0698])
    np.testing.assert_allclose(panda.damping, 0.003)
    ur5 = parse_urdf(UR5)
    assert ur5.joint_names[0] == "shoulder_pan_joint" and len(ur5.joint_names) == 6
    np.testing.assert_allclose(ur5.inertial[:, 0], [3.7, 8.393, 2.275, 1.219, 1.219, 0.1879])  # base dropped


def _urdf(tmp_path, body: str, name="arm.urdf") -> Path:
    path = tmp_path / name
    path.write_text(f'<robot name="test">{body}</robot>')
    return path


_BASE = '<link name="base"/>'


def _link(name, mass=1.0, inertia=(0.1, 0.1, 0.1), xyz="0 0 0.5", rpy="0 0 0"):
    ixx, iyy, izz = inertia
    return (
        f'<link name="{name}"><inertial><origin xyz="{xyz}" rpy="{rpy}"/><mass value="{mass}"/>'
        f'<inertia ixx="{ixx}" ixy="0" ixz="0" iyy="{iyy}" iyz="0" izz="{izz}"/></inertial></link>'
    )


def _joint(name, parent, child, kind="revolute", axis="0 0 1", xyz="0 0 0", rpy="0 0 0"):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz}" rpy="{rpy}"/><axis xyz="{axis}"/></joint>'
    )


def test_a_fixed_child_merges_by_the_parallel_axis_theorem(tmp_path):
    rpy = "0.3 -0.2 0.7"
    body = (
        _BASE
        + _link("a", mass=2.0, inertia=(0.3, 0.2, 0.25), xyz="0.1 0 0.2")
        + _link("b", mass=1.5, inertia=(0.05, 0.04, 0.03), xyz="0 0.1 0", rpy="0.1 0.2 0.3")
        + _joint("j", "base", "a")
        + _joint("f", "a", "b", kind="fixed", xyz="0.2 -0.1 0.4", rpy=rpy)
    )
    chain = parse_urdf(_urdf(tmp_path, body))
    from jaxid.model.urdf_xml import rpy_matrix

    def about_origin(m, c, tensor):
        return m, m * c, tensor + m * (c @ c * np.eye(3) - np.outer(c, c))

    ma, ha, ia = about_origin(2.0, np.array([0.1, 0, 0.2]), np.diag([0.3, 0.2, 0.25]))
    rot, pos = rpy_matrix(0.3, -0.2, 0.7), np.array([0.2, -0.1, 0.4])
    inner = rpy_matrix(0.1, 0.2, 0.3)
    mb, hb, ib = about_origin(1.5, rot @ [0, 0.1, 0] + pos, rot @ inner @ np.diag([0.05, 0.04, 0.03]) @ inner.T @ rot.T)
    tensor = ia + ib
    expected = [ma + mb, *(ha + hb), tensor[0, 0], tensor[0, 1], tensor[0, 2], tensor[1, 1], tensor[1, 2], tensor[2, 2]]
    np.testing.assert_allclose(chain.inertial[0], expected, rtol=1e-14, atol=1e-16)


_GOOD = _BASE + _link("a") + _joint("j", "base", "a")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (_BASE + _link("a") + _joint("j", "base", "a", kind="floating"), ["joint 'j'", "'floating'", "fixed_joints"]),
        (_BASE + _link("a") + _joint("j", "base", "a", kind="planar"), ["joint 'j'", "'planar'"]),
        (_BASE + _link("a") + _joint("j", "base", "a", kind="ball"), ["unknown joint type 'ball'"]),
        (_BASE + _link("a") + _joint("j", "base", "a", axis="0 0 0"), ["joint 'j' <axis>", "zero"]),
        (_BASE + _link("a") + _joint("j", "base", "a", axis="0 x 1"), ["joint 'j' <axis>", "xyz="]),
        (_BASE + _link("a") + _joint("j", "base", "c"), ["joint 'j' <child>", "'c' is not defined"]),
        (_BASE + _link("a") + _joint("j", "base", "a", kind="fixed"), ["no revolute"]),
        (
            _BASE + _link("a") + _link("b") + _joint("j1", "base", "a") + _joint("j2", "base", "b"),
            ["link 'base'", "branches", "'j1'", "'j2'", "fixed_joints"],
        ),
        (
            _GOOD + _link("b") + _link("c") + _joint("k1", "b", "c") + _joint("k2", "c", "b"),
            ["link 'b'", "not connected to the root link 'base'"],
        ),
        (_GOOD + _link("b") + _joint("k", "base", "a", kind="fixed"), ["joint 'k'", "already the child of joint 'j'"]),
        (_GOOD + "<link", ["unreadable XML"]),
    ],
)
def test_parser_errors_are_one_line_and_name_the_file_and_element(tmp_path, body, words):
    path = _urdf(tmp_path, body)
    with pytest.raises(ValueError) as info:
        parse_urdf(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    for word in words:
        assert word in message, (word, message)


def test_a_negative_mass_is_read_with_a_warning(tmp_path):
    """A reference may be an identified set that no rigid body has: read as given, warned in one line."""
    from jaxid.model.urdf import UrdfWarning

    path = _urdf(tmp_path, _BASE + _link("a", mass=-1.0) + _joint("j", "base", "a"))
    with pytest.warns(UrdfWarning) as record:
        chain = parse_urdf(path)
    messages = [str(w.message) for w in record if issubclass(w.category, UrdfWarning)]
    assert any("link 'a'" in m and "mass" in m and "\n" not in m for m in messages), messages
    assert float(np.asarray(chain.inertial)[0, 0]) == -1.0


def test_panda_hand_branches_unless_the_fingers_are_locked():
    with pytest.raises(
        ValueError, match="link 'panda_hand'.*fixed_joints=\\('panda_finger_joint1', 'panda_finger_joint2'\\)"
    ):
        parse_urdf(PANDA)
    with pytest.raises(ValueError, match="no joint named 'thumb'"):
        parse_urdf(PANDA, fixed_joints=("thumb",))


def test_serial_arm_rejects_bad_values(two_link):
    with pytest.raises(ValueError, match="viscous must be non-negative"):
        two_link.with_parameters(("fv1",), [-1.0])
    with pytest.raises(ValueError, match="Unknown parameter name 'J1'"):
        two_link.get("J1")
    with pytest.raises(ValueError, match="q must have a trailing axis of length 2"):
        two_link.mass_matrix(jnp.zeros(3))
    with pytest.raises(ValueError, match="joint type 'spherical'"):
        SerialArm(("spherical",), [[0, 0, 1]], [np.eye(3)], [[0, 0, 0]], np.zeros((1, 10)))
