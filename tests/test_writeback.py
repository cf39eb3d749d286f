"""Write-back of an identified N-joint arm (``jaxid.fit.writeback``): URDF and MJCF files that give the
estimate's torque, the rule that chooses the standard parameters, and the consistent projection of an
estimate no physical arm has.

The truth is the shipped UR5 with friction, armature, offsets and two masses changed; the nominal arm
(the ``[arm]`` the fit started from) is the plain UR5. The estimate is the truth's base parameters:
the files must reproduce its torque (``Y_B β``) on random states, through ``jaxid.load_arm`` (URDF,
MJCF) and through MuJoCo's own inverse dynamics.
"""

import warnings
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mujoco_api import mujoco

import jaxid
from jaxid.estimate.consistency import is_physically_consistent
from jaxid.fit.writeback import export_arm_files, written_options
from jaxid.fit.writeback_choice import choose_standard_parameters
from jaxid.fit.writeback_xml import INERTIA_FLOOR, _positive, urdf_text
from jaxid.model.chain import UrdfWarning

UR5 = Path(__file__).resolve().parent.parent / "data" / "robots" / "ur5_robot.urdf"
N = 6
CHANGED = {
    **{f"fv{j + 1}": v for j, v in enumerate((0.8, 0.8, 0.5, 0.2, 0.2, 0.2))},
    **{f"fc{j + 1}": v for j, v in enumerate((1.5, 1.5, 1.0, 0.3, 0.3, 0.3))},
    **{f"Ia{j + 1}": v for j, v in enumerate((0.2, 0.2, 0.1, 0.02, 0.02, 0.02))},
    **{f"off{j + 1}": v for j, v in enumerate((0.3, -0.4, 0.2, 0.05, -0.05, 0.03))},
    "m3": 9.0,
    "m5": 1.3,
}
TOLERANCE = 1e-9  # relative to the largest torque


@pytest.fixture(scope="module")
def ur5():
    """``(nominal arm, its base parameters, the truth's base parameters β)``."""
    nominal = jaxid.load_arm(UR5)
    truth = nominal.with_parameters(tuple(CHANGED), list(CHANGED.values()))
    base = jaxid.base_parameters(nominal)
    return nominal, base, np.asarray(base.values(truth.standard_parameters()))


@pytest.fixture(scope="module")
def states():
    q, qd, qdd = (
        jax.random.uniform(k, (40, N), minval=-2.0, maxval=2.0) for k in jax.random.split(jax.random.key(7), 3)
    )
    return q, qd, qdd


def _model_torque(ur5, beta, states):
    nominal, base, _ = ur5
    return np.asarray(jaxid.base_regressor(nominal, *states, base) @ jnp.asarray(beta))


def _relative(arm, reference, states):
    return float(np.abs(np.asarray(arm.inverse_dynamics(*states)) - reference).max() / np.abs(reference).max())


@pytest.fixture(scope="module")
def exported(ur5, tmp_path_factory):
    """The truth and an inconsistent estimate (a negative viscous friction) written back."""
    nominal, base, beta = ur5
    bad = beta.copy()
    bad[base.names.index("fv2")] = -0.3
    estimates = {"truth": SimpleNamespace(value=beta), "bad": SimpleNamespace(value=bad)}
    folder = tmp_path_factory.mktemp("identified")
    paths, projected, skipped = export_arm_files(
        folder, "test", estimates, SimpleNamespace(arm=nominal, base=base), source=UR5
    )
    return folder, paths, projected, skipped, bad


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_the_files_of_a_realisable_estimate_give_its_torque(ur5, states, exported):
    folder, paths, projected, skipped, _ = exported
    assert sorted(p.name for p in paths) == ["bad.urdf", "bad.xml", "truth.urdf", "truth.xml"] and not skipped
    assert "truth" not in projected
    reference = _model_torque(ur5, ur5[2], states)
    for suffix in ("urdf", "xml"):
        path = folder / f"truth.{suffix}"
        arm = jaxid.load_arm(path, **written_options(path))
        error = _relative(arm, reference, states)
        assert error < TOLERANCE, (suffix, error)
        assert bool(is_physically_consistent(arm, tolerance=0.0))
    text = (folder / "truth.urdf").read_text()
    assert "NOT THE ESTIMATE" not in text and "jaxid: offset 0.3 -0.4" in text
    assert "<mesh" in text  # the source URDF's visuals are kept


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_a_urdf_written_from_the_arm_alone_and_the_rule(ur5, states, tmp_path):
    nominal, base, beta = ur5
    chosen = choose_standard_parameters(nominal, base, beta)
    assert chosen.realisable and chosen.mismatch < 1e-12
    np.testing.assert_allclose(np.asarray(base.values(chosen.standard)), beta, rtol=1e-12, atol=1e-12)
    # The nominal arm's own base parameters: the nominal arm itself is chosen.
    own = choose_standard_parameters(nominal, base, np.asarray(base.values(nominal.standard_parameters())))
    assert own.realisable and own.nominal_distance < 1e-6
    path = tmp_path / "plain.urdf"
    path.write_text(urdf_text(nominal, chosen.standard))  # no source: kinematics from the SerialArm
    arm = jaxid.load_arm(path, armature=chosen.standard[60:66], offset=chosen.standard[78:84])
    assert arm.joint_names == nominal.joint_names and arm.position_limits == nominal.position_limits
    assert _relative(arm, _model_torque(ur5, beta, states), states) < TOLERANCE


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_mujoco_inverse_dynamics_of_the_written_mjcf(ur5, states, exported):
    """MuJoCo's ``mj_inverse`` of the MJCF (Coulomb friction, a constraint there, switched off) equals
    the estimate's torque less its Coulomb friction and offsets."""
    folder = exported[0]
    nominal, _, beta = ur5
    options = written_options(folder / "truth.xml")
    arm = jaxid.load_arm(folder / "truth.xml", **options)
    model = mujoco.MjModel.from_xml_path(str(folder / "truth.xml"))
    model.dof_frictionloss[:] = 0.0
    data = mujoco.MjData(model)
    reference = _model_torque(ur5, beta, states)
    coulomb = np.asarray(arm.coulomb) * (2 / np.pi) * np.arctan(arm.coulomb_slope * np.asarray(states[1]))
    expected = reference - coulomb - options["offset"]
    worst = 0.0
    for k in range(states[0].shape[0]):
        data.qpos[:], data.qvel[:], data.qacc[:] = (np.asarray(x[k]) for x in states)
        mujoco.mj_inverse(model, data)
        worst = max(worst, float(np.abs(data.qfrc_inverse - expected[k]).max()))
    assert worst / np.abs(expected).max() < TOLERANCE, worst


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_an_inconsistent_estimate_is_written_as_its_consistent_projection(ur5, states, exported):
    folder, _, projected, _, bad = exported
    assert "consistent projection" in projected["bad"] and "relative RMS" in projected["bad"]
    text = (folder / "bad.urdf").read_text()
    assert "NOT THE ESTIMATE ITSELF" in text and "consistent" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error", UrdfWarning)  # the projection is a physical arm
        arm = jaxid.load_arm(folder / "bad.urdf", **written_options(folder / "bad.urdf"))
    assert bool(is_physically_consistent(arm)) and 0 <= float(arm.viscous[1]) < 1e-6
    # Close to the estimate, not equal: the projection moves the friction of joint 2 to 0.
    error = _relative(arm, _model_torque(ur5, bad, states), states)
    assert 1e-6 < error < 0.1, error


def test_a_zero_principal_inertia_is_written_just_positive():
    """A rod's inertia (a zero principal moment, on the consistent set's boundary) is lifted to
    ``INERTIA_FLOOR`` × its largest moment, which MuJoCo accepts; a positive inertia keeps its bits."""
    rotation = np.linalg.qr(np.random.default_rng(3).normal(size=(3, 3)))[0]
    rod = rotation @ np.diag([0.0, 0.27, 0.27]) @ rotation.T
    lifted = _positive(rod)
    values = np.linalg.eigvalsh(lifted)
    assert values[0] >= 0.999 * INERTIA_FLOOR * 0.27 and np.abs(lifted - rod).max() < 1e-12
    body = np.diag([0.1, 0.2, 0.25])
    assert _positive(body) is body
