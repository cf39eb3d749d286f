"""``load_arm`` on URDFs it has never seen: random serial chains written in code, against MuJoCo
loading the same file, and the one-line errors and warnings of the constructs jaxid refuses.

Each random URDF (seeded) has 1-7 moving joints, revolute, continuous and prismatic mixed, with
random joint ``<origin xyz rpy>`` (sometimes absent), random axes of any length and sign (sometimes
absent: ``1 0 0``), random limits, damping and friction; links whose ``<inertial>`` has a random
origin with ``rpy`` and a full inertia tensor (random principal moments that satisfy the triangle
inequality, random principal axes), massless links (no ``<inertial>``, or mass 0) between moving
joints, fixed joints interleaved along the chain and fixed side branches carrying mass (merged by
the parallel-axis theorem), sometimes a ``world`` link with a tilted fixed mount, links and joints
listed in shuffled order, and ``<visual>`` meshes at ``package://`` paths, ``<transmission>``,
``<gazebo>``, ``<material>`` and ``<safety_controller>`` elements that jaxid must ignore.

MuJoCo reads the same file with meshes removed, static bodies not fused, constraints (joint limits,
friction loss) off, armature and damping set alike. MuJoCo refuses moving bodies without mass, so
its copy gives each massless link 1e-14 kg and 1e-14 kg m² (a change of at most 5e-12 relative over
200 seeds, far below the 1e-10 checked). Bias forces are compared relative to the larger of their own
size and 1e-3 of the torque's (a single vertical axis has none, and round-off is not a relative error). The comparison is shown to fail on a URDF whose joint ``rpy`` has one sign
flipped. jaxid runs eagerly here (``jax.disable_jit``): each random geometry is a new static
structure, and op-by-op evaluation of a few states costs less than compiling each one.
"""

import warnings
import xml.etree.ElementTree as ET

import jax
import numpy as np
import pytest
from _mujoco_api import dense_inertia, mujoco

from jaxid.model.urdf import UrdfWarning, load_arm, parse_urdf
from jaxid.model.urdf_xml import rpy_matrix

STATES = 4  # random states per arm
SEEDS = range(12)
TOLERANCE = 1e-10


# -- random URDFs -----------------------------------------------------------------------------------


def _number(value) -> str:
    return repr(float(value))


def _numbers(values) -> str:
    return " ".join(_number(v) for v in values)


def _inertial(rng, *, massless_kind=None) -> str:
    """A random ``<inertial>``: mass, centre of mass and inertial-frame rpy, and a full tensor
    ``R diag(m₁, m₂, m₃) Rᵀ`` with moments ``(s₂ + s₃, s₁ + s₃, s₁ + s₂)`` (``s ≥ 0``: a body's second
    moments, so the triangle inequality holds)."""
    if massless_kind == "absent":
        return ""
    if massless_kind == "zero":
        zero = 'ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"'
        return f'<inertial><mass value="0"/><inertia {zero}/></inertial>'
    mass = rng.uniform(0.2, 5.0)
    second = mass * rng.uniform(0.0005, 0.02, 3)
    moments = np.array([second[1] + second[2], second[0] + second[2], second[0] + second[1]])
    axes = rpy_matrix(*rng.uniform(-np.pi, np.pi, 3))
    t = axes @ np.diag(moments) @ axes.T
    origin = f'<origin xyz="{_numbers(rng.uniform(-0.3, 0.3, 3))}" rpy="{_numbers(rng.uniform(-np.pi, np.pi, 3))}"/>'
    tensor = f'ixx="{_number(t[0, 0])}" ixy="{_number(t[0, 1])}" ixz="{_number(t[0, 2])}" iyy="{_number(t[1, 1])}" iyz="{_number(t[1, 2])}" izz="{_number(t[2, 2])}"'
    return f'<inertial>{origin}<mass value="{_number(mass)}"/><inertia {tensor}/></inertial>'


def _link(name, inertial="", mesh=False) -> str:
    visual = (
        f'<visual><geometry><mesh filename="package://robot_description/meshes/{name}.dae"/></geometry>'
        '<material name="grey"/></visual><collision><geometry><box size="0.1 0.1 0.1"/></geometry></collision>'
        if mesh
        else ""
    )
    return f'<link name="{name}">{inertial}{visual}</link>'


def _origin(rng) -> str:
    form = rng.integers(4)
    xyz = f'xyz="{_numbers(rng.uniform(-0.5, 0.5, 3))}"'
    rpy = f'rpy="{_numbers(rng.uniform(-np.pi, np.pi, 3))}"'
    return ["", f"<origin {xyz}/>", f"<origin {rpy}/>", f"<origin {xyz} {rpy}/>"][form]


def _axis(rng) -> str:
    form = rng.integers(4)
    if form == 0:
        return ""  # the default 1 0 0
    if form == 1:
        axis = np.zeros(3)
        axis[rng.integers(3)] = rng.choice([-2.0, -1.0, 1.0, 3.0])
    else:
        axis = rng.normal(size=3) * rng.uniform(0.3, 3.0)
    return f'<axis xyz="{_numbers(axis)}"/>'


def _joint(name, parent, child, kind, origin="", extra="") -> str:
    return f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>{origin}{extra}</joint>'


def random_urdf(seed: int) -> tuple[str, dict]:
    """A random serial-chain URDF (see the module docstring) and what it declares per moving joint:
    ``{"joints": names in chain order, "types", "damping", "friction"}``."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    links, joints, extras = [], [], []
    root = "world" if rng.random() < 0.5 else "base_link"
    links.append(_link(root))
    parent = root
    if root == "world":
        links.append(_link("base_link", _inertial(rng), mesh=True))
        joints.append(_joint("world_mount", "world", "base_link", "fixed", _origin(rng)))
        parent = "base_link"
    declared = {"joints": [], "types": [], "damping": [], "friction": []}
    for i in range(n):
        for k in range(int(rng.integers(0, 3)) if i else 0):  # fixed joints between moving ones
            name = f"spacer{i}_{k}"
            links.append(_link(name, _inertial(rng, massless_kind=rng.choice([None, "absent", "zero"]))))
            joints.append(_joint(f"fix{i}_{k}", parent, name, "fixed", _origin(rng)))
            parent = name
        kind = str(rng.choice(["revolute", "continuous", "prismatic"]))
        name, link = f"joint{i + 1}", f"link{i + 1}"
        massless = i < n - 1 and rng.random() < 0.25  # the last moving link always carries mass
        links.append(_link(link, _inertial(rng, massless_kind=rng.choice(["absent", "zero"]) if massless else None)))
        damping, friction = rng.uniform(0.0, 2.0), rng.uniform(0.0, 1.0)
        limit = (
            ""
            if kind == "continuous"
            else f'<limit lower="{_number(-rng.uniform(0.5, 3))}" upper="{_number(rng.uniform(0.5, 3))}"'
        )
        limit = limit and f'{limit} effort="{_number(rng.uniform(10, 300))}" velocity="{_number(rng.uniform(1, 5))}"/>'
        extra = f'{_axis(rng)}{limit}<dynamics damping="{_number(damping)}" friction="{_number(friction)}"/>'
        if rng.random() < 0.3:
            extra += '<safety_controller soft_lower_limit="-1" soft_upper_limit="1" k_position="10" k_velocity="1"/>'
        joints.append(_joint(name, parent, link, kind, _origin(rng), extra))
        extras.append(
            f'<transmission name="{name}_trans"><type>transmission_interface/SimpleTransmission</type>'
            f'<joint name="{name}"><hardwareInterface>EffortJointInterface</hardwareInterface></joint>'
            f'<actuator name="{name}_motor"><mechanicalReduction>50</mechanicalReduction></actuator></transmission>'
        )
        if rng.random() < 0.4:  # a fixed side branch (a sensor, a cover) that merges into this link
            side = f"sensor{i + 1}"
            links.append(_link(side, _inertial(rng), mesh=True))
            joints.append(_joint(f"{side}_mount", link, side, "fixed", _origin(rng)))
        declared["joints"].append(name)
        declared["types"].append("prismatic" if kind == "prismatic" else "revolute")
        declared["damping"].append(damping)
        declared["friction"].append(friction)
        parent = link
    tool = "tool0"
    links.append(_link(tool))
    joints.append(_joint("tool_mount", parent, tool, "fixed", _origin(rng)))
    extras.append(
        f'<gazebo reference="{tool}"><mu1>0.2</mu1></gazebo><gazebo><plugin name="p" filename="x.so"/></gazebo>'
    )
    elements = links + joints
    order = rng.permutation(len(elements))
    body = "".join(elements[k] for k in order)
    header = '<material name="grey"><color rgba="0.5 0.5 0.5 1"/></material><!-- generated -->'
    return f'<?xml version="1.0"?><robot name="random{seed}">{header}{body}{"".join(extras)}</robot>', declared


# -- MuJoCo's model of the same file ----------------------------------------------------------------


#: MuJoCo's copy gives massless links this mass [kg] and these principal moments [kg m²]: just above
#: the least it accepts (``mjMINVAL`` = 1e-15), so that the change is ~1e-11 of even a small link's.
_TINY = "1e-14"


def mujoco_model(text: str, locked=()):
    """MuJoCo's model of a URDF text: meshes stripped, ``locked`` joints fixed (their ``<mimic>``
    dropped), massless links given ``_TINY`` mass and moments (MuJoCo refuses massless moving bodies),
    static bodies not fused, constraints off, gravity −9.81 along z."""
    root = ET.fromstring(text)
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for element in link.findall(tag):
                link.remove(element)
        inertial = link.find("inertial")
        if inertial is None or float(inertial.find("mass").get("value")) == 0.0:
            if inertial is not None:
                link.remove(inertial)
            tiny = ET.SubElement(link, "inertial")
            ET.SubElement(tiny, "mass", value=_TINY)
            ET.SubElement(tiny, "inertia", ixx=_TINY, ixy="0", ixz="0", iyy=_TINY, iyz="0", izz=_TINY)
    for joint in root.iter("joint"):
        if joint.get("name") in locked:
            joint.set("type", "fixed")
            for mimic in joint.findall("mimic"):
                joint.remove(mimic)
    extension = ET.SubElement(root, "mujoco")
    ET.SubElement(extension, "compiler", discardvisual="true", fusestatic="false")
    model = mujoco.MjModel.from_xml_string(ET.tostring(root, encoding="unicode"))
    model.opt.gravity[:] = (0.0, 0.0, -9.81)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    return model


def _relative(ours, theirs, scale=0.0) -> float:
    """``max |ours − theirs| / max(max |theirs|, scale)``."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), scale))


def compare(arm, model, seed: int) -> np.ndarray:
    """Worst relative error of jaxid's mass matrix, bias forces and inverse dynamics (viscous friction
    included) against MuJoCo at random states, with random armature set alike: ``(3,)``."""
    rng = np.random.default_rng(1000 + seed)
    n = arm.dof
    assert [model.joint(i).name for i in range(model.njnt)] == list(arm.joint_names)
    armature = rng.uniform(0.0, 0.1, n)
    arm = arm.with_parameters(
        [f"Ia{i + 1}" for i in range(n)] + [f"fc{i + 1}" for i in range(n)], [*armature, *[0] * n]
    )
    model.dof_armature[:] = armature
    model.dof_damping[:] = np.asarray(arm.viscous)
    q, qd, qdd = (rng.uniform(-s, s, (STATES, n)) for s in (2.0, 2.0, 5.0))
    with jax.disable_jit():  # a new geometry per arm: op by op costs less than a compile each
        mass, bias, tau = (
            np.asarray(x) for x in (arm.mass_matrix(q), arm.bias_forces(q, qd), arm.inverse_dynamics(q, qd, qdd))
        )
    data = mujoco.MjData(model)
    worst = np.zeros(3)
    for k in range(STATES):
        data.qpos[:], data.qvel[:] = q[k], qd[k]
        mujoco.mj_forward(model, data)
        worst[0] = max(worst[0], _relative(mass[k], dense_inertia(model, data)))
        bias_mujoco = data.qfrc_bias.copy()
        data.qacc[:] = qdd[k]
        mujoco.mj_inverse(model, data)
        worst[2] = max(worst[2], _relative(tau[k], data.qfrc_inverse))
        # the bias relative to the torque's scale where it vanishes (one vertical axis: no gravity torque)
        worst[1] = max(worst[1], _relative(bias[k], bias_mujoco, 1e-3 * np.max(np.abs(data.qfrc_inverse))))
    return worst


@pytest.mark.parametrize("seed", SEEDS)
def test_random_urdf_matches_mujoco(tmp_path, seed):
    text, declared = random_urdf(seed)
    path = tmp_path / "robot.urdf"
    path.write_text(text)
    arm = load_arm(path)
    assert arm.joint_names == tuple(declared["joints"])
    assert arm.joint_types == tuple(declared["types"])
    np.testing.assert_allclose(arm.viscous, declared["damping"], rtol=1e-15)
    np.testing.assert_allclose(arm.coulomb, declared["friction"], rtol=1e-15)
    worst = compare(arm, mujoco_model(text), seed)
    assert np.all(worst < TOLERANCE), (seed, worst)


def test_the_comparison_fails_on_a_mis_signed_rpy(tmp_path):
    """One joint's ``rpy`` with its roll sign flipped (in jaxid's copy only) is caught."""
    text, _ = random_urdf(3)
    root = ET.fromstring(text)
    joint = next(j for j in root.iter("joint") if j.get("name") == "joint2")
    origin = joint.find("origin")
    roll, pitch, yaw = (float(v) for v in origin.get("rpy").split())
    origin.set("rpy", _numbers([-roll, pitch, yaw]))
    path = tmp_path / "wrong.urdf"
    path.write_text(ET.tostring(root, encoding="unicode"))
    worst = compare(load_arm(path), mujoco_model(text), 3)
    assert np.max(worst) > 1e-3, worst


def test_the_random_urdfs_cover_the_constructs():
    """The seeds used exercise every construct the module docstring names."""
    texts = [random_urdf(seed)[0] for seed in SEEDS]
    joined = "".join(texts)
    for construct in (
        'type="continuous"',
        'type="prismatic"',
        '<link name="world">',
        '<mass value="0"/>',
        "<transmission",
        "<gazebo",
        "package://",
        "<safety_controller",
        'xyz="0.0 0.0 -2.0"',
    ):
        assert construct in joined, construct
    assert any("<axis" not in text.split('type="revolute"')[-1][:400] for text in texts)  # a default axis
    depths = {len(random_urdf(seed)[1]["joints"]) for seed in SEEDS}
    assert min(depths) <= 2 and max(depths) == 7, depths
    massless = sum("<inertial>" not in text.split('<link name="link1">')[1][:20] for text in texts)
    assert massless >= 1


# -- constructs jaxid refuses or warns about --------------------------------------------------------

_ARM = (
    _link("base")
    + _link(
        "a", '<inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'
    )
    + _link(
        "b", '<inertial><mass value="2"/><inertia ixx="0.2" ixy="0" ixz="0" iyy="0.2" iyz="0" izz="0.1"/></inertial>'
    )
    + _joint("j1", "base", "a", "revolute", '<origin xyz="0 0 0.3"/>', '<axis xyz="0 0 1"/>')
    + _joint("j2", "a", "b", "revolute", '<origin xyz="0.2 0 0.1" rpy="0.3 0 0"/>', '<axis xyz="0 1 0"/>')
)


def _write_text(tmp_path, text, name="other.xml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _write(tmp_path, body, root='<robot name="t">'):
    path = tmp_path / "robot.urdf"
    path.write_text(f"{root}{body}</robot>")
    return path


def _one_line_error(path, *words, fixed_joints=(), read=parse_urdf):
    with pytest.raises(ValueError) as info:
        read(path, fixed_joints=fixed_joints)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    for word in words:
        assert word in message, (word, message)
    return message


_MASS = '<inertial><mass value="0.5"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>'


@pytest.mark.parametrize("kind", ["floating", "planar"])
def test_floating_and_planar_joints_are_refused_unless_locked(tmp_path, kind):
    world = _link("world") + _joint("mount", "world", "base", kind, '<origin xyz="0.1 0 0.5" rpy="0 0 0.4"/>')
    path = _write(tmp_path, world + _ARM)
    _one_line_error(path, "joint 'mount'", f"'{kind}'", "fixed_joints=('mount',)")
    arm = load_arm(path, fixed_joints=("mount",))
    text = path.read_text()
    worst = compare(arm, mujoco_model(text, locked=("mount",)), 0)
    assert np.all(worst < TOLERANCE), worst
    np.testing.assert_allclose(arm.parent_translations[0], [0.1, 0, 0.8], atol=1e-15)


def test_a_mimic_joint_is_refused_and_can_be_locked(tmp_path):
    finger = _link("finger", _MASS) + _joint(
        "finger_joint", "b", "finger", "prismatic", "", '<axis xyz="0 0 1"/><mimic joint="j2" multiplier="0.5"/>'
    )
    path = _write(tmp_path, _ARM + finger)
    _one_line_error(path, "joint 'finger_joint'", "mimics joint 'j2'", "fixed_joints=('finger_joint',)")
    arm = load_arm(path, fixed_joints=("finger_joint",))
    assert arm.joint_names == ("j1", "j2")
    assert np.all(compare(arm, mujoco_model(path.read_text(), locked=("finger_joint",)), 0) < TOLERANCE)


def test_a_branching_gripper_is_refused_with_the_fixed_joints_that_leave_a_chain(tmp_path):
    fingers = "".join(
        _link(f"finger{k}", _MASS)
        + _joint(f"finger{k}_joint", "b", f"finger{k}", "prismatic", f'<origin xyz="0 {0.02 * k} 0.1"/>')
        for k in (1, 2)
    )
    head = _link("head", _MASS) + _link("head2", _MASS)
    head += _joint("head_pan", "a", "head", "revolute") + _joint("head_tilt", "head", "head2", "revolute")
    path = _write(tmp_path, _ARM + fingers + head)
    message = _one_line_error(path, "link 'a'", "branches", "'head_pan' (2 moving)", "'j2' (3 moving)")
    suggested = eval(message.split("fixed_joints=")[1].rstrip("."))  # the tuple the message proposes
    assert set(suggested) == {"head_pan", "head_tilt", "finger1_joint", "finger2_joint"}
    arm = load_arm(path, fixed_joints=suggested)
    assert arm.joint_names == ("j1", "j2")
    assert np.all(compare(arm, mujoco_model(path.read_text(), locked=suggested), 0) < TOLERANCE)


@pytest.mark.parametrize(
    ("body", "root", "words"),
    [
        (_ARM + '<xacro:include filename="$(find robot)/arm.xacro"/>', '<robot name="t">', ["unbound prefix", "xacro"]),
        (
            _ARM + '<xacro:arm prefix="left_"/>',
            '<robot name="t" xmlns:xacro="http://www.ros.org/wiki/xacro">',
            ["<xacro:arm>", "unexpanded xacro", "xacro robot.urdf.xacro > robot.urdf"],
        ),
        (
            _ARM.replace('xyz="0 0 0.3"', 'xyz="0 0 ${base_height}"'),
            '<robot name="t" xmlns:xacro="http://wiki.ros.org/xacro">',
            ["<origin xyz='0 0 ${base_height}'>", "unexpanded xacro expression"],
        ),
        ("", '<robot name="t">', ["no <link>"]),
        (
            _ARM + _link("c", _MASS) + _joint("loop", "b", "a", "revolute"),
            '<robot name="t">',
            ["joint 'loop'", "already the child of joint 'j1'", "closed loops"],
        ),
        (_ARM.replace('<axis xyz="0 1 0"/>', '<axis xyz="0 1"/>'), '<robot name="t">', ["joint 'j2' <axis>", "3"]),
        (_ARM.replace("<inertia ixx", "<inertiax ixx"), '<robot name="t">', ["link 'a' <inertial>", "<inertia"]),
    ],
)
def test_unsupported_and_broken_files_are_one_line_errors(tmp_path, body, root, words):
    _one_line_error(_write(tmp_path, body, root), *words)


def test_a_default_namespace_and_leftover_xacro_properties_are_read(tmp_path):
    plain = load_arm(_write(tmp_path, _ARM))
    leftovers = '<xacro:property name="pi" value="3.14159"/><xacro:arg name="prefix" default=""/>'
    # expressions where jaxid never reads: a mesh path, a gazebo reference
    mesh = '<visual><geometry><mesh filename="$(find robot)/meshes/a.stl"/></geometry></visual></link>'
    leftovers += '<gazebo reference="${prefix}a"><mu1>0.2</mu1></gazebo>'
    body = leftovers + _ARM.replace("</inertial></link>", "</inertial>" + mesh, 1)
    root = '<robot name="t" xmlns="http://www.ros.org" xmlns:xacro="http://www.ros.org/wiki/xacro">'
    other = load_arm(_write(tmp_path, body, root))
    assert other.joint_names == plain.joint_names
    np.testing.assert_array_equal(other.inertial, plain.inertial)
    assert other.parent_rotations == plain.parent_rotations


def test_impossible_inertia_and_joints_moving_nothing_are_read_with_a_warning(tmp_path):
    triangle = _ARM.replace('iyy="0.2" iyz="0" izz="0.1"', 'iyy="0.05" iyz="0" izz="0.5"')
    with pytest.warns(UrdfWarning, match="link 'b' <inertial> <inertia>: the principal moments .* triangle"):
        arm = load_arm(_write(tmp_path, triangle))
    assert float(arm.inertial[1, 9]) == pytest.approx(0.5 + 2 * 0.0)  # read as given (centre at the origin)
    negative = _ARM.replace('ixx="0.2"', 'ixx="-0.2"')
    with pytest.warns(UrdfWarning, match="link 'b' <inertial> <inertia>: .*not positive semidefinite"):
        load_arm(_write(tmp_path, negative))
    with pytest.warns(UrdfWarning, match=r"link 'b' <inertial> <mass>: mass -2\.0 kg is negative; read as given"):
        arm = load_arm(_write(tmp_path, _ARM.replace('value="2"', 'value="-2"')))
    assert float(arm.inertial[1, 0]) == -2.0
    tail = _ARM + _link("c") + _joint("j3", "b", "c", "continuous")
    with pytest.warns(UrdfWarning, match=r"joints \('j3',\) move no mass .*fixed_joints=\('j3',\)"):
        arm = load_arm(_write(tmp_path, tail))
    assert arm.dof == 3 and not np.any(arm.inertial[2])
    massless_middle = _ARM.replace(_ARM[_ARM.index('<link name="a">') : _ARM.index('<link name="b">')], _link("a"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arm = load_arm(_write(tmp_path, massless_middle))  # a massless link that moves a massive one is fine
    assert not np.any(arm.inertial[0]) and arm.inertial[1, 0] == 2.0


def test_urdfdom_defaults_for_missing_limits_are_no_limits(tmp_path):
    """``effort="0"`` (ROS-Industrial's way of not giving it), ``velocity="0"`` and ``lower == upper``
    (urdfdom's defaults for missing values) are no limits; given values are kept."""
    limits = '<limit effort="0" lower="0" upper="0" velocity="0"/>'
    body = _ARM.replace('<axis xyz="0 1 0"/>', f'<axis xyz="0 1 0"/>{limits}')
    body = body.replace(
        '<axis xyz="0 0 1"/>', '<axis xyz="0 0 1"/><limit effort="50" lower="-1" upper="2" velocity="3"/>'
    )
    arm = load_arm(_write(tmp_path, body))
    assert arm.position_limits == ((-1.0, 2.0), (-np.inf, np.inf))
    assert arm.velocity_limits == (3.0, np.inf) and arm.effort_limits == (50.0, np.inf)


# -- MJCF (read through MuJoCo's compiler) ------------------------------------------------------------

_MJCF = """<mujoco model="mjcf_arm">
  <compiler angle="degree" eulerseq="zyx"/>
  <option gravity="0.3 -0.2 -9.7"/>
  <default>
    <joint damping="0.4" armature="0.02" frictionloss="0.1"/>
    <default class="wrist"><joint axis="0 1 1" damping="0.2" armature="0.01" range="-120 120"/></default>
  </default>
  <worldbody>
    <body name="pedestal" pos="0 0 0.2"><inertial pos="0 0 0" mass="9" diaginertia="1 1 1"/>
      <body name="shoulder" pos="0.05 0 0.3" euler="10 -20 30">
        <joint name="j1" axis="0 0 1" pos="0.02 -0.01 0.05" ref="15"/>
        <inertial pos="0.01 0.02 0.1" quat="0.9 0.1 -0.2 0.3" mass="3.2" diaginertia="0.05 0.04 0.03"/>
        <body name="upper" pos="0 0.1 0.2" axisangle="1 1 0 40">
          <joint name="j2a" axis="1 0 0" pos="0 0 0.03" range="-90 90"/>
          <joint name="j2b" axis="0 1 0" pos="0.01 0.02 0" ref="-25"/>
          <inertial pos="0 0 0.15" mass="2.1" fullinertia="0.06 0.05 0.02 0.001 -0.002 0.003"/>
          <body name="cover" pos="0.05 0 0.1" xyaxes="0 1 0 -1 0 0">
            <inertial pos="0.01 0 0" mass="0.4" diaginertia="0.002 0.003 0.004"/>
          </body>
          <body name="slider" pos="0 0 0.3" zaxis="0.2 0.3 1">
            <joint name="j3" type="slide" axis="0.3 0 1" ref="0.05" range="-0.2 0.2" stiffness="0"/>
            <inertial pos="0.02 0 0.05" mass="1.2" diaginertia="0.01 0.012 0.008"/>
            <body name="hand" pos="0.1 0 0.1" childclass="wrist">
              <joint name="j4" pos="0 0.01 0.02"/>
              <inertial pos="0 0 0.04" quat="0.7 0 0.7 0" mass="0.6" diaginertia="0.004 0.003 0.002"/>
              <geom type="box" size="0.02 0.02 0.02" mass="0"/>
            </body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="j1" gear="100"/></actuator>
</mujoco>
"""


def test_an_mjcf_file_matches_mujoco(tmp_path):
    """Anchors off the body origin, reference positions (``ref``), two hinges in one body, a slide,
    degrees and ``eulerseq``, ``euler``/``axisangle``/``xyaxes``/``zaxis``, ``fullinertia`` and rotated
    ``diaginertia``, defaults classes and ``childclass``, a welded body with mass, file gravity and armature."""
    path = tmp_path / "arm.xml"
    path.write_text(_MJCF)
    arm = load_arm(path)
    assert arm.joint_names == ("j1", "j2a", "j2b", "j3", "j4")
    assert arm.joint_types == ("revolute", "revolute", "revolute", "prismatic", "revolute")
    np.testing.assert_allclose(arm.viscous, [0.4, 0.4, 0.4, 0.4, 0.2])
    np.testing.assert_allclose(arm.coulomb, [0.1] * 5)
    np.testing.assert_allclose(arm.armature, [0.02, 0.02, 0.02, 0.02, 0.01])
    np.testing.assert_allclose(arm.gravity, [0.3, -0.2, -9.7])
    np.testing.assert_allclose(arm.position_limits[1], np.radians([-90, 90]))
    model = mujoco.MjModel.from_xml_path(str(path))
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    assert np.all(compare(arm, model, 0) < TOLERANCE)
    # gravity compensation is MuJoCo's added force, not the arm's: read without it, with a warning
    with pytest.warns(UrdfWarning, match=r"bodies \('hand',\) have gravcomp"):
        load_arm(_write_text(tmp_path, _MJCF.replace('<body name="hand"', '<body name="hand" gravcomp="1"')))
    # the reference positions matter: without them the comparison fails
    model.qpos0[:] = 0.0
    assert np.max(compare(arm, model, 0)) > 1e-3


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            ('pos="0 0 0.2">', 'pos="0 0 0.2"><freejoint name="free"/>'),
            ["joint 'free'", "free joint", "fixed_joints"],
        ),
        (('type="slide" axis="0.3 0 1" ref="0.05" range="-0.2 0.2"', 'type="ball"'), ["joint 'j3'", "ball joint"]),
        (('stiffness="0"', 'stiffness="5"'), ["joint 'j3'", "stiffness 5.0", "spring"]),
        (("</worldbody>", '</worldbody><equality><joint joint1="j2a" joint2="j4"/></equality>'), ["couples", "'j2a'"]),
        (
            ('<body name="cover"', '<body name="finger"><joint name="f"/><geom size="0.01"/></body><body name="cover"'),
            ["body 'upper'", "branches", "fixed_joints=('f',)"],
        ),
        (('axis="0 0 1" pos', 'axis="0 0 1" bogus="1" pos'), ["MuJoCo cannot compile it", "bogus"]),
    ],
)
def test_mjcf_refusals_are_one_line(tmp_path, change, words):
    path = tmp_path / "arm.xml"
    path.write_text(_MJCF.replace(*change))
    _one_line_error(path, *words, read=load_arm)
