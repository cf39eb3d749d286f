"""`jaxid fit` on an N-joint arm described by a URDF: the UR5 of ``data/robots/`` from simulated logs.

The true arm is the shipped UR5 URDF with joint friction written into its ``<dynamics>`` and an
armature and torque offsets given in the config's ``[arm]`` table (a URDF holds neither). Three
runs follow smooth periodic multi-sine joint trajectories within the joint limits (each joint's
harmonics of 1/8 Hz, other frequencies and phases per run); the torque is the arm's inverse
dynamics along them (perfect tracking: what a closed loop would apply). Sampled like a real log:
jittered stamps (steps of 1-3 ms, 500 Hz on average), angle noise 1e-4 rad, torque noise 1 % of each
joint's torque standard deviation. Two runs fit, one is held out; the reference is the same URDF
(read with the same ``[arm]`` options), so its base parameters are the truth.

All 58 base parameters are fitted (friction, armature and offsets are non-zero in the truth and
excited), by IDIM-LS and IDIM-IV through ``jaxid fit``, with a fixed cut-off (15 Hz) and one 0.5-s
horizon started every 0.5 s (the free simulations then share IDIM-IV's compiled simulator: compiling
the six-joint simulation is most of the ~50 s this file takes cold). Tolerances: ``WELL_EXCITED_STD``.
"""

import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from _typecheck import package_errors

import jaxid
from jaxid.cli import main
from jaxid.config.common import ConfigError
from jaxid.fit import parse_fit_config
from jaxid.model.urdf import load_arm

UR5 = Path(__file__).resolve().parent.parent / "data" / "robots" / "ur5_robot.urdf"


DURATION = 8.0  # [s]: one period of the multi-sines (fundamental 1/8 Hz)
SAMPLES = 4001  # stamps per run: 2 ms apart on average, each jittered by up to ±1 ms (steps of 1-3 ms)
VISCOUS = (0.8, 0.8, 0.5, 0.2, 0.2, 0.2)  # [N m s/rad], written into the URDF's <dynamics damping>
COULOMB = (1.5, 1.5, 1.0, 0.3, 0.3, 0.3)  # [N m], <dynamics friction>
ARMATURE = (0.2, 0.2, 0.1, 0.02, 0.02, 0.02)  # [kg m²], [arm] armature
OFFSET = (0.3, -0.4, 0.2, 0.05, -0.05, 0.03)  # [N m], [arm] offset
#: Per run: the harmonics of 1/8 Hz each joint's trajectory holds (the same set for all joints, other
#: phases per joint), and the seed of the phases and the noise.
RUNS = {"run_a": ((2, 3, 5, 7, 9), 0), "run_b": ((2, 4, 5, 8, 10), 1), "held_out": ((3, 4, 6, 7, 11), 2)}
CENTRE = np.array([0.0, -1.3, 1.2, -1.4, 0.0, 0.0])  # [rad] the trajectories' centre posture
SPAN = np.array([1.1, 0.7, 0.9, 1.2, 1.2, 1.2])  # [rad] the largest excursion from it

CONFIG = """
[fit]
name = "ur5"
data = "{data}"
reference = "ur5_true.urdf"   # the same file: the truth through the same metrics

[arm]
urdf = "ur5_true.urdf"
armature = {armature}
offset = {offset}

[log]
angles = "pos_meas"
torques = "tau_meas"
sample_step = 0.002

[split]
rule = "two multi-sine runs to fit, a third with other frequencies held out"
train = ["run_a", "run_b"]
test = ["held_out"]

[filter]
cutoff_hz = 15.0    # about ten times the highest line of the trajectories (11/8 Hz)

[estimators]
use = ["idim_ls", "idim_iv"]

[validation]
horizons_s = [0.5]
start_every_s = 0.5   # the free simulations then have the shapes of IDIM-IV's segments: one compile for both

[frequency]
harmonics = 1
"""


def _trajectory(harmonics, seed, t):
    """``q, q', q''`` ``(N, 6)`` at times ``t``: per joint ``Σ_k a_k sin(2π k t/T + φ_k)`` (``a_k ∝ 1/k``,
    phases from ``seed``) scaled to the excursion ``SPAN`` about ``CENTRE`` and to half the velocity limit."""
    arm = load_arm(UR5)
    rng = np.random.default_rng(seed)
    w = 2 * np.pi * np.asarray(harmonics) / DURATION
    phases = rng.uniform(0, 2 * np.pi, (6, len(w)))
    fine = np.linspace(0, DURATION, 4001)
    q, qd, qdd = (np.zeros((t.size, 6)) for _ in range(3))
    for j in range(6):
        a = 1.0 / np.asarray(harmonics, dtype=float)
        shape = np.sin(w * fine[:, None] + phases[j]) @ a
        speed = np.cos(w * fine[:, None] + phases[j]) @ (a * w)
        scale = min(SPAN[j] / np.abs(shape).max(), 0.5 * arm.velocity_limits[j] / np.abs(speed).max())
        a = scale * a
        arg = w * t[:, None] + phases[j]
        q[:, j] = CENTRE[j] + np.sin(arg) @ a
        qd[:, j] = np.cos(arg) @ (a * w)
        qdd[:, j] = -np.sin(arg) @ (a * w * w)
    return q, qd, qdd


def _log(arm, harmonics, seed):
    """One run as a real log: jittered stamps, noisy angles and torques (module docstring)."""
    rng = np.random.default_rng(100 + seed)
    t = np.linspace(0.0, DURATION, SAMPLES)  # every run has the same length: one compiled inverse dynamics
    t[1:-1] += rng.uniform(-0.5, 0.5, SAMPLES - 2) * (DURATION / (SAMPLES - 1))
    q, qd, qdd = _trajectory(harmonics, seed, t)
    tau = np.asarray(arm.inverse_dynamics(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
    q_meas = q + 1e-4 * rng.standard_normal(q.shape)
    tau_meas = tau + 0.01 * tau.std(axis=0) * rng.standard_normal(tau.shape)
    frame = {"time": t}
    frame.update({f"pos_meas{j + 1}": q_meas[:, j] for j in range(6)})
    frame.update({f"tau_meas{j + 1}": tau_meas[:, j] for j in range(6)})
    return pd.DataFrame(frame), q


def _true_urdf(path):
    """The shipped UR5 with ``VISCOUS`` and ``COULOMB`` in its joints' ``<dynamics>``."""
    text = UR5.read_text()
    zero = '<dynamics damping="0.0" friction="0.0"/>'
    assert text.count(zero) == 6
    for fv, fc in zip(VISCOUS, COULOMB, strict=True):
        text = text.replace(zero, f'<dynamics damping="{fv}" friction="{fc}"/>', 1)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def ur5_logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ur5")
    arm = load_arm(_true_urdf(root / "ur5_true.urdf"), armature=ARMATURE, offset=OFFSET)
    spans = {}
    for name, (harmonics, seed) in RUNS.items():
        frame, q = _log(arm, harmonics, seed)
        frame.to_csv(root / f"{name}.csv", index=False)
        spans[name] = (q.min(axis=0), q.max(axis=0))
    config = root / "fit.toml"
    config.write_text(CONFIG.format(data=root, armature=list(ARMATURE), offset=list(OFFSET)))
    return root, arm, config, spans


@pytest.fixture(scope="module")
def ur5_base(ur5_logs):
    return jaxid.base_parameters(ur5_logs[1])


@pytest.fixture(scope="module")
def ur5_fit(ur5_logs):
    root, _, config, _ = ur5_logs
    out = root / "out"
    assert main(["fit", str(config), "--out", str(out), "--no-figures"]) == 0
    return out


def _column_rms(arm, base):
    """Per base parameter, the RMS of its regressor column ``Y_i`` [N m per unit] over the noise-free
    training trajectories (every 10th stamp; both runs, all joints)."""
    t = np.linspace(0.0, DURATION, 401)
    columns = []
    for name in ("run_a", "run_b"):
        harmonics, seed = RUNS[name]
        columns.append(np.asarray(jaxid.base_regressor(arm, *_trajectory(harmonics, seed, t), base)))
    return np.sqrt(np.mean(np.concatenate(columns) ** 2, axis=(0, 1)))


#: Tolerances. Well excited: IDIM-LS's formal std is at most 2 % of the true value; those must be
#: within 5 % (relative). All others (true value 0: the URDF's principal axes leave most products of
#: inertia and lateral first moments at 0, so a relative error means nothing; or weakly excited, e.g.
#: ``off2``, which joint 2's gravity torque nearly mimics over these postures) are held to an absolute
#: bound on the torque their error makes: ``|θ̂_i − θ_i| · rms(Y_i) ≤ 0.08 N m`` (0.5 % of joint 2's
#: torque std, below the torque noise of joints 1-3).
WELL_EXCITED_STD = 0.02
RELATIVE = 0.05
TORQUE_ERROR = 0.08  # [N m]


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_ur5_from_a_urdf_recovers_its_base_parameters(ur5_logs, ur5_base, ur5_fit):
    root, arm, _, spans = ur5_logs
    lower, upper = np.asarray(arm.position_limits).T
    for q_min, q_max in spans.values():  # the trajectories stay inside the joint limits
        assert np.all(q_min > lower) and np.all(q_max < upper)
    base = ur5_base
    manifest = json.loads((ur5_fit / "manifest.json").read_text())
    for estimator in ("idim_ls", "idim_iv"):
        assert manifest["estimators"][estimator]["rank"] == base.rank == 58
    assert manifest["base_parameters"] == list(base.labels)
    params = pd.read_csv(ur5_fit / "parameters.csv")
    truth = np.asarray(base.values(jaxid.standard_parameters(arm)))
    ls = params[params["estimator"] == "idim_ls"].set_index("parameter").loc[list(base.names)]
    # The reference is the same URDF read with the same [arm] options: its base parameters are the truth.
    np.testing.assert_allclose(ls["reference"], truth, rtol=1e-5, atol=1e-9)
    well = (ls["std"] <= WELL_EXCITED_STD * np.abs(truth)).to_numpy()
    assert well.sum() >= 20  # the mass-matrix and gravity combinations, armatures, friction, some offsets
    rms = _column_rms(arm, base)
    for estimator in ("idim_ls", "idim_iv"):
        value = params[params["estimator"] == estimator].set_index("parameter").loc[list(base.names), "value"]
        error = value.to_numpy() - truth
        relative = np.abs(error[well] / truth[well])
        assert relative.max() <= RELATIVE, (estimator, np.asarray(base.names)[well][relative.argmax()])
        torque = np.abs(error[~well]) * rms[~well]
        assert torque.max() <= TORQUE_ERROR, (estimator, np.asarray(base.names)[~well][torque.argmax()])
    # Held-out torque (evaluation band) within 10 % of the true parameters' (the noise floor), per joint.
    summary = pd.read_csv(ur5_fit / "summary.csv").set_index(["model", "joint"])
    for estimator in ("idim_ls", "idim_iv"):
        for joint in range(1, 7):
            ours, true = (
                summary.loc[(estimator, joint), "torque_rmse"],
                summary.loc[("reference", joint), "torque_rmse"],
            )
            assert ours <= 1.1 * true, (estimator, joint)


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_ur5_fit_tables_checks_and_export(ur5_fit):
    validation = pd.read_csv(ur5_fit / "validation.csv")
    assert set(validation["joint"]) == set(range(1, 7)) and (validation["status"] == "ok").all()
    consistency = pd.read_csv(ur5_fit / "consistency.csv")
    # Generic checks: armature and friction where they are base parameters of their own, and D(q) ≻ 0.
    checks = set(consistency["check"])
    assert {"Ia3 >= 0", "fv1 >= 0", "fc6 >= 0"} <= checks and not any("Ia1" in c for c in checks)
    assert any(c.startswith("mass matrix D(q) positive definite") for c in checks) and consistency["ok"].all()
    warnings = pd.read_csv(ur5_fit / "warnings.csv")
    assert not set(warnings["kind"]) & {"inconsistent", "worse_than_reference", "far_from_reference", "degrees"}
    # A URDF arm is written back as URDF and MJCF per estimator (jaxid.fit.writeback), beside the base parameters.
    names = ["base_parameters.toml", "idim_iv.urdf", "idim_iv.xml", "idim_ls.urdf", "idim_ls.xml"]
    assert sorted(p.name for p in (ur5_fit / "identified").iterdir()) == names
    manifest = json.loads((ur5_fit / "manifest.json").read_text())
    assert sorted(manifest["exported"]) == [f"identified/{n}" for n in names] and "export_note" not in manifest


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_ur5_fit_writes_back_a_urdf_that_loads(ur5_logs, ur5_base, ur5_fit):
    """``identified/<estimator>.urdf`` loads with the options its header names and gives the estimate's
    torque (its base parameters from ``base_parameters.toml``) to round-off, or, warned as
    ``exported_projection`` and said in its header, that of its consistent projection (here IDIM-LS's,
    4.7e-5 relative RMS away; IDIM-IV's base parameters are realisable)."""
    import tomllib

    from jaxid.fit.writeback import written_options

    tables = tomllib.loads((ur5_fit / "identified" / "base_parameters.toml").read_text())
    warned = pd.read_csv(ur5_fit / "warnings.csv").query("kind == 'exported_projection'")
    q, qd, qdd = (np.random.default_rng(k).uniform(-2, 2, (20, 6)) for k in range(3))
    exact = []
    for name in ("idim_ls", "idim_iv"):
        path = ur5_fit / "identified" / f"{name}.urdf"
        arm = load_arm(path, **written_options(path))
        assert arm.joint_names == ur5_logs[1].joint_names and "<mesh" in path.read_text()
        theta = np.array([tables[name][n]["value"] for n in ur5_base.names])
        expected = np.asarray(jaxid.base_regressor(ur5_logs[1], q, qd, qdd, ur5_base) @ theta)
        error = np.abs(np.asarray(arm.inverse_dynamics(q, qd, qdd)) - expected).max() / np.abs(expected).max()
        if name in set(warned["model"]):
            assert "NOT THE ESTIMATE ITSELF" in path.read_text() and error < 1e-3, (name, error)
        else:
            assert "NOT THE ESTIMATE" not in path.read_text() and error < 1e-9, (name, error)
            exact.append(name)
    assert exact  # at least one estimate written exactly


def test_logs_of_n_joints(ur5_logs):
    root = ur5_logs[0]
    path = root / "run_a.csv"
    log = jaxid.load_log(path, angles="pos_meas", torques="tau_meas", joints=6)
    assert log.q.shape == log.tau.shape == (log.samples, 6) and log.joints == 6
    assert log.columns == tuple(f"pos_meas{j}" for j in range(1, 7)) + tuple(f"tau_meas{j}" for j in range(1, 7))
    named = jaxid.load_log(path, angles=[f"pos_meas{j}" for j in range(1, 7)], torques="tau_meas")  # n from the list
    np.testing.assert_array_equal(named.q, log.q)
    with pytest.raises(ValueError, match=re.escape("torques must be 6 column names (joint 1 … joint 6) or a prefix")):
        jaxid.load_log(path, angles="pos_meas", torques=["tau_meas1", "tau_meas2"], joints=6)
    message = re.escape(f"MeasuredLog.q must have shape (N, 6) = ({log.samples}, 6)")
    with package_errors(), pytest.raises(ValueError, match=message):
        jaxid.MeasuredLog(log.t, log.q[:, :5], log.tau, None, "x.csv", log.sample_step, log.columns, 4001)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"arm": {"l1": 0.3}}, r"unknown key 'arm.l1' next to a robot file .*allowed: \['urdf', 'mjcf'"),
        ({"arm": {"urdf": "nope.urdf"}}, r"arm.urdf: the robot file '.*nope.urdf' does not exist"),
        ({"arm": {"urdf": "ur5.xml"}}, r"arm.urdf must be the path of a .urdf file"),
        ({"arm": {"mjcf": "ur5.xml"}}, r"give one robot description, urdf = .* or mjcf = .*, not both"),
        ({"arm": {"fixed_joints": ["elbow"]}}, r"arm.urdf: .*fixed_joints: no joint named 'elbow'"),
        ({"arm": {"gravity": 9.81}}, r"arm.gravity must be \[gx, gy, gz\]"),
        ({"fit": {"reference": "double_pendulum"}}, r"with \[arm\] urdf the reference must be a robot file"),
        ({"fit": {"reference": "two_link.urdf"}}, r"does not have the kinematic structure of arm.urdf \(6 joints"),
    ],
)
def test_urdf_config_errors_name_the_key(edit, message):
    raw = {
        "fit": {"name": "x"},
        "arm": {"urdf": UR5.name},
        "split": {"train": ["a"]},
    }
    for section, values in edit.items():
        raw[section] = {**raw.get(section, {}), **values}
    with pytest.raises(ConfigError, match=message):
        parse_fit_config(raw, path=UR5)


def test_an_mjcf_arm_is_the_same_model_as_its_urdf(tmp_path):
    """``[arm] mjcf``: the UR5 compiled by MuJoCo from its URDF and saved as MJCF (MuJoCo writes 6
    significant digits) gives the fit the same base parameters and regressor, to that rounding."""
    import re as regex

    import mujoco

    from jaxid.fit.model import build_model

    urdf = regex.sub(r"<visual>.*?</visual>|<collision>.*?</collision>", "", UR5.read_text(), flags=regex.S)
    mujoco.mj_saveLastXML(str(tmp_path / "ur5.xml"), mujoco.MjModel.from_xml_string(urdf))
    (tmp_path / UR5.name).write_text(UR5.read_text())
    models = {}
    for key, name in (("urdf", UR5.name), ("mjcf", "ur5.xml")):
        raw = {"fit": {"name": "x", "reference": name}, "arm": {key: name}, "split": {"train": ["a"]}}
        models[key] = build_model(parse_fit_config(raw, path=tmp_path / "fit.toml"))
    assert models["mjcf"].names == models["urdf"].names and len(models["urdf"].names) == 58
    rng = np.random.default_rng(1)
    q, qd, qdd = (jnp.asarray(rng.uniform(-2, 2, (16, 6))) for _ in range(3))
    y = {k: np.asarray(m.regressor(q, qd, qdd)) for k, m in models.items()}
    np.testing.assert_allclose(y["mjcf"], y["urdf"], rtol=0, atol=1e-6 * np.abs(y["urdf"]).max())
    np.testing.assert_allclose(models["mjcf"].reference, models["urdf"].reference, rtol=1e-5, atol=1e-6)


def test_log_columns_must_match_the_joints(ur5_logs):
    from jaxid.fit.cutoff import load_logs

    root = ur5_logs[0]
    raw = {"fit": {"name": "x", "data": str(root)}, "arm": {"urdf": UR5.name}, "split": {"train": ["run_a"]}}
    raw["log"] = {"angles": ["pos_meas1", "pos_meas2"]}
    with pytest.raises(ConfigError, match=r"log.angles must be 6 column names \(one per joint of the arm\)"):
        load_logs(parse_fit_config(raw, path=UR5), ["run_a"])
    raw["fit"]["reference"] = "ur5_robot.urdf"
    with pytest.raises(ConfigError, match=r"fit.reference 'ur5_robot.urdf' is a URDF but \[arm\] describes a two-link"):
        parse_fit_config({**raw, "arm": {"preset": "double_pendulum"}}, path=UR5)


def test_base_columns_torque_is_the_regressor_product(ur5_logs, ur5_base):
    """The fit's fast model torque (one Newton–Euler pass) is the base regressor times the parameters."""
    from jaxid.fit.model import BaseColumns

    arm, base = ur5_logs[1], ur5_base
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.uniform(-2, 2, (8, 6)) for _ in range(3))
    theta = rng.standard_normal(base.rank)
    for columns in (tuple(range(base.rank)), (0, 2, 40, 57)):
        reg = BaseColumns(arm, base, columns)
        np.testing.assert_allclose(
            reg.torque(theta[list(columns)], q, qd, qdd), reg(q, qd, qdd) @ theta[list(columns)], rtol=0, atol=1e-10
        )
