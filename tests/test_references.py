"""References loaded, not refused: a robot file or parameter file that no physical arm has (an identified
set with a negative friction, an inertia tensor no rigid body has, a two-link inertia beyond the
allowance) loads as a fit's reference and as the ``[arm]``'s geometry, with a one-line warning naming
the link or joint, the quantity and its value."""

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import jaxid
from jaxid.fit import parse_fit_config
from jaxid.model.arm_table import DescriptionWarning
from jaxid.model.chain import UrdfWarning

ROOT = Path(__file__).resolve().parent.parent
UR5 = ROOT / "data" / "robots" / "ur5_robot.urdf"
LAB_YAML = ROOT / "data" / "double-pendulum" / "lab_model_parameters.yml"
KUKA = Path("/work/shared/data/kuka-lwr4/kuka_lwr4_identified.urdf")  # not shipped: used where present


def _identified_ur5(tmp_path) -> Path:
    """The UR5 with what a fit may give: negative Coulomb friction on the elbow, negative damping on
    wrist 1, an inertia tensor of wrist 3 that violates the triangle inequality."""
    text = UR5.read_text()
    dynamics = '<dynamics damping="0.0" friction="0.0"/>'
    parts = text.split(dynamics)
    assert len(parts) == 7
    values = [(0.5, 1.0), (0.5, 1.0), (0.3, -0.4), (-0.05, 0.2), (0.1, 0.1), (0.1, 0.1)]
    text = parts[0] + "".join(
        f'<dynamics damping="{d}" friction="{f}"/>' + part for (d, f), part in zip(values, parts[1:], strict=True)
    )
    inertia = re.search(r'(<link name="wrist_3_link">.*?<inertia )([^/]*)/>', text, re.S)
    text = (
        text[: inertia.start(2)]
        + 'ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.01" '
        + text[inertia.end(2) :]
    )
    path = tmp_path / "ur5_identified.urdf"
    path.write_text(text)
    return path


def _messages(record, kind):
    return [str(w.message) for w in record if issubclass(w.category, kind)]


def test_an_inconsistent_urdf_loads_with_one_line_warnings(tmp_path):
    path = _identified_ur5(tmp_path)
    with pytest.warns(UrdfWarning) as record:
        arm = jaxid.load_arm(path)
    messages = _messages(record, UrdfWarning)
    assert all("\n" not in m for m in messages)
    assert any("joint 'elbow_joint' <dynamics>: friction -0.4 is negative" in m for m in messages), messages
    assert any("joint 'wrist_1_joint' <dynamics>: damping -0.05 is negative" in m for m in messages), messages
    assert any("link 'wrist_3_link' <inertial> <inertia>" in m and "triangle" in m for m in messages), messages
    # read as given: the arm holds the file's values and its torque uses them
    np.testing.assert_array_equal(np.asarray(arm.coulomb), [1.0, 1.0, -0.4, 0.2, 0.1, 0.1])
    np.testing.assert_array_equal(np.asarray(arm.viscous), [0.5, 0.5, 0.3, -0.05, 0.1, 0.1])
    q, qd = np.zeros(6), np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    friction = np.asarray(arm.friction_torque(qd))
    expected = np.array(
        [0.0, 0.0, 0.3 - 0.4 * 2 / np.pi * np.arctan(100.0), -0.05 + 0.2 * 2 / np.pi * np.arctan(100.0)]
    )
    np.testing.assert_allclose(friction[:4], expected, rtol=1e-15)
    assert np.all(np.isfinite(np.asarray(arm.inverse_dynamics(q, qd, np.zeros(6)))))


def _config(tmp_path, arm: dict, reference: str) -> dict:
    return {
        "fit": {"name": "refs", "data": str(tmp_path), "reference": reference},
        "arm": arm,
        "split": {"train": ["run_a"]},
    }


def test_an_inconsistent_urdf_is_a_fit_reference_and_an_arm(tmp_path):
    bad = _identified_ur5(tmp_path)
    (tmp_path / "ur5.urdf").write_text(UR5.read_text())
    with pytest.warns(UrdfWarning, match="joint 'elbow_joint' <dynamics>: friction -0.4 is negative"):
        config = parse_fit_config(_config(tmp_path, {"urdf": "ur5.urdf"}, bad.name), path=tmp_path / "fit.toml")
    assert float(config.reference.coulomb[2]) == -0.4 and float(config.arm.coulomb[2]) == 0.0
    with pytest.warns(UrdfWarning, match="joint 'wrist_1_joint' <dynamics>: damping -0.05"):
        config = parse_fit_config(_config(tmp_path, {"urdf": bad.name, "offset": 0.1}, ""), path=tmp_path / "fit.toml")
    assert float(config.arm.viscous[3]) == -0.05 and float(config.arm.offset[0]) == 0.1


@pytest.mark.skipif(not KUKA.is_file(), reason="the KUKA LWR4 identified URDF is not on this machine")
def test_the_identified_kuka_lwr4_loads_with_its_negative_friction():
    with pytest.warns(UrdfWarning) as record:
        arm = jaxid.load_arm(KUKA)
    negative = [m for m in _messages(record, UrdfWarning) if "friction" in m and "is negative" in m]
    assert len(negative) == 4 and any("joint 'lwr_4_joint'" in m for m in negative), negative
    assert int(np.sum(np.asarray(arm.coulomb) < 0)) == 4


def test_a_lab_yaml_beyond_the_allowance_is_a_fit_reference(tmp_path):
    """The lab's YAML with ``J2 = −0.31 m2 r2²`` (the allowance is −¼ m r²; ``I2 = J2 + m2 r2² > 0``)."""
    lab = yaml.safe_load(LAB_YAML.read_text())
    about = lab["m2"] * lab["r2"] ** 2
    lab["I2"] = (1 - 0.31) * about
    (tmp_path / "fitted.yml").write_text(yaml.safe_dump(lab))
    with pytest.warns(DescriptionWarning) as record:
        config = parse_fit_config(
            _config(tmp_path, {"preset": "double_pendulum"}, "fitted.yml"), path=tmp_path / "fit.toml"
        )
    (message,) = _messages(record, DescriptionWarning)
    assert "fitted.yml: I2 = " in message and "below m2 r2²" in message and "\n" not in message
    np.testing.assert_allclose(float(config.reference.inertias[1]), -0.31 * about, rtol=1e-12)
    # negative friction stays an error: a TwoLinkArm holds none
    lab["b2"] = -0.01
    (tmp_path / "negative.yml").write_text(yaml.safe_dump(lab))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DescriptionWarning)
        with pytest.raises(Exception, match=r"b2 = -0\.01 must be >= 0"):
            parse_fit_config(_config(tmp_path, {"preset": "double_pendulum"}, "negative.yml"), path=tmp_path / "f.toml")
