"""`jaxid fit` as a robot engineer runs it on logs shaped like a real arm's, through the CLI.

The logs come from ``jaxid.fit.simulated.simulated_logs``: the UR5 of ``data/robots/`` with its
three wrist joints locked (a three-joint arm keeps the compile bill of eight estimators small; the
six-joint figures are in ``results/bench_fit_cost``), tracking random Fourier references in closed
loop (PD on a nominal model whose link masses and inertias are 20 % off), runs of different lengths
(training 14 s and 13.5 s, held out 12 s; the training runs' EKF and UKF pad both to one length,
1536 samples, so each filter compiles once: 11 s, as before, padded to another and compiled each
filter twice, ~35 s more on an empty cache), ~100 Hz jittered stamps, angle, velocity and torque noise
through the loop, viscous and Coulomb friction, armature and offsets in the truth. The config asks
for every log estimator and keeps the defaults (automatic cut-off, default estimate chosen on the
training runs, figures on). The reference is the truth (``true.urdf`` with the same ``[arm]``
armature and offsets), so "the truth's own error" is the reference's row.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxid.cli import main

UR5 = Path(__file__).resolve().parent.parent / "data" / "robots" / "ur5_robot.urdf"
WRISTS = ["wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]
ESTIMATORS = [
    "idim_ls",
    "idim_ls_consistent",
    "idim_iv",
    "rls",
    "ekf",
    "ukf",
    "output_error",
    "output_error_consistent",
]
ARMATURE = [0.1, 0.1, 0.1]
OFFSET = [0.2, -0.2, 0.1]

CONFIG = f"""
[fit]
name = "ur5_wrists_locked"
data = "data"
reference = "data/true.urdf"   # the truth, read with the same [arm] options

[arm]
urdf = "data/nominal.urdf"
fixed_joints = {json.dumps(WRISTS)}
armature = {ARMATURE}
offset = {OFFSET}

[split]
rule = "the first two runs fit, the third is held out"
train = ["run_01", "run_02"]
test = ["run_03"]

[estimators]
use = {json.dumps(ESTIMATORS)}

[estimators.output_error]
max_iterations = 8

[estimators.output_error_consistent]
max_iterations = 8
"""


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from jaxid.fit.simulated import simulated_logs

    root = tmp_path_factory.mktemp("real_arm")
    simulated_logs(
        UR5,
        root / "data",
        durations=(14.0, 13.5, 12.0),
        period=5.0,
        fixed_joints=WRISTS,
        armature=ARMATURE,
        offset=OFFSET,
        seed=3,
    )
    (root / "fit.toml").write_text(CONFIG)
    out = root / "out"
    code = main(["fit", str(root / "fit.toml"), "--out", str(out)])
    return code, out


@pytest.mark.slow
def test_every_log_estimator_runs_through_the_cli(fitted):
    code, out = fitted
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    ran, failed = manifest["estimators"], manifest["failed_estimators"]
    # Each requested estimator is a result or a stated failure, never lost.
    assert set(ran) | set(failed) == set(ESTIMATORS)
    assert {"idim_ls", "idim_ls_consistent", "idim_iv", "rls"} <= set(ran)
    for why in failed.values():
        assert why and "Traceback" not in why
    for name in ("summary.csv", "validation.csv", "parameters.csv", "warnings.csv", "cutoff.csv"):
        assert (out / name).is_file(), name
    summary = pd.read_csv(out / "summary.csv")
    assert set(ran) | {"nominal", "reference"} == set(summary["model"])
    assert manifest["figures"], manifest.get("failed_diagnostics")
    assert (out / "figures" / "residual_spectra.png").is_file()


@pytest.mark.slow
def test_default_estimate_is_chosen_on_training_runs_and_holds_out(fitted):
    _, out = fitted
    manifest = json.loads((out / "manifest.json").read_text())
    default = manifest["default_estimator"]
    table = pd.read_csv(out / "default_estimator.csv")
    assert table.loc[table["chosen"], "estimator"].item() == default
    assert table.loc[table["chosen"], "cv_torque_rmse"].item() == table["cv_torque_rmse"].min()
    # Every candidate beats the 20 %-off nominal on the training runs left out in turn.
    assert (table["cv_torque_rmse"] < table["nominal_cv_torque_rmse"]).all()
    # The cut-off: the candidate with the lowest leave-one-run-out torque error, far above the motion.
    cutoff = pd.read_csv(out / "cutoff.csv")
    assert manifest["cutoff_hz"] == cutoff.loc[cutoff["cv_torque_rmse"].idxmin(), "cutoff_hz"]
    assert manifest["cutoff_hz"] >= 2.0
    # Held out: the default estimate is near the truth's own error and far better than the nominal model.
    val = pd.read_csv(out / "validation.csv")
    test = val[val["role"] == "test"]

    def pooled(model):
        return float(np.sqrt(np.mean(test.loc[test["model"] == model, "torque_rmse"] ** 2)))

    assert pooled(default) <= 1.10 * pooled("reference")
    assert pooled(default) < 0.5 * pooled("nominal")


@pytest.mark.slow
def test_the_identified_arm_is_written_back_and_loads(fitted):
    import jax.numpy as jnp

    import jaxid
    from jaxid.fit.writeback import written_options

    _, out = fitted
    manifest = json.loads((out / "manifest.json").read_text())
    default = manifest["default_estimator"]
    urdf = out / "identified" / f"{default}.urdf"
    assert urdf.is_file() and (out / "identified" / f"{default}.xml").is_file()
    arm = jaxid.load_arm(urdf, **written_options(urdf))
    assert arm.dof == 3
    q = jnp.asarray([0.1, -1.2, 1.0])
    tau = arm.inverse_dynamics(q, 0.3 * q, -0.5 * q)
    assert np.all(np.isfinite(np.asarray(tau)))


GRIPPER_ARM = """<?xml version="1.0"?>
<robot name="arm_with_gripper">
  <link name="base"/>
  <link name="l1"><inertial><origin xyz="0 0 -0.3"/><mass value="3"/>
    <inertia ixx="0.05" ixy="0" ixz="0" iyy="0.05" iyz="0" izz="0.01"/></inertial></link>
  <link name="l2"><inertial><origin xyz="0 0 -0.2"/><mass value="1.5"/>
    <inertia ixx="0.02" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.005"/></inertial></link>
  <link name="left"><inertial><origin xyz="0 0 0"/><mass value="0.1"/>
    <inertia ixx="1e-4" ixy="0" ixz="0" iyy="1e-4" iyz="0" izz="1e-4"/></inertial></link>
  <link name="right"><inertial><origin xyz="0 0 0"/><mass value="0.1"/>
    <inertia ixx="1e-4" ixy="0" ixz="0" iyy="1e-4" iyz="0" izz="1e-4"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" effort="50" velocity="2"/></joint>
  <joint name="elbow" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 -0.6"/>
    <axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" effort="30" velocity="2"/></joint>
  <joint name="finger_left" type="prismatic"><parent link="l2"/><child link="left"/><origin xyz="0 0.02 -0.4"/>
    <axis xyz="0 1 0"/><limit lower="0" upper="0.04" effort="10" velocity="0.1"/></joint>
  <joint name="finger_right" type="prismatic"><parent link="l2"/><child link="right"/><origin xyz="0 -0.02 -0.4"/>
    <axis xyz="0 -1 0"/><limit lower="0" upper="0.04" effort="10" velocity="0.1"/></joint>
</robot>
"""


def test_simulated_logs_of_an_arm_with_a_locked_gripper(tmp_path):
    """A URDF that branches (a two-finger gripper) with the fingers locked: the arm's joints' friction given per joint
    of the arm lands on those joints of ``true.urdf`` (the locked fingers get none), the logs hold the arm's two
    joints; a friction list of another length is an error that names both lengths it takes."""
    import xml.etree.ElementTree as ET

    from jaxid.fit.simulated import simulated_logs

    urdf = tmp_path / "arm.urdf"
    urdf.write_text(GRIPPER_ARM)
    fingers = ["finger_left", "finger_right"]
    info = simulated_logs(
        urdf, tmp_path / "data", durations=(0.5,), fixed_joints=fingers, viscous=[0.3, 0.4], coulomb=[0.5, 0.6]
    )
    assert info["status"] == [0]
    joints = {j.get("name"): j.find("dynamics") for j in ET.parse(info["true"]).getroot().iter("joint")}
    got = {name: (float(d.get("damping")), float(d.get("friction"))) for name, d in joints.items()}
    assert got == {"shoulder": (0.3, 0.5), "elbow": (0.4, 0.6), "finger_left": (0.0, 0.0), "finger_right": (0.0, 0.0)}
    log = pd.read_csv(tmp_path / "data" / "run_01.csv")
    assert [c for c in log.columns if c.startswith("pos_meas")] == ["pos_meas1", "pos_meas2"]
    with pytest.raises(
        ValueError,
        match=r"viscous has 3 values; give one, one per joint of the arm \(2: shoulder, elbow\) or one per moving joint of the URDF \(4\)",
    ):
        simulated_logs(urdf, tmp_path / "bad", durations=(0.5,), fixed_joints=fingers, viscous=[0.3, 0.4, 0.5])
