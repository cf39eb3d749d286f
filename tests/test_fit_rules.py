"""`jaxid fit` on a build it was not tuned on: the rules of docs/real-arms.md against known answers.

- A two-link arm of another geometry (l1 = 0.3 m, gear ratio 9, other masses and friction),
  simulated from rest, described in the config's ``[arm]`` table alone and fitted through the CLI
  with the automatic excitation frequency and cut-off: base parameters recovered, held-out torque
  at the level of the true parameters (given as the reference, a parameter file), the exported
  parameter file read back to the same base parameters.
- A shipped run whose undriven joint carries an 18.4 Hz drive tone: the same excitation frequency
  and cut-off as the clean run (the rule that once took the tone for the excitation).
- Angles in degrees and a joint that only dithers: warnings, on stderr and in warnings.csv.
"""

import json
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from _simulated_log import log_frame, simulate

import jaxid
from jaxid.cli import main
from jaxid.fit import choose_cutoff, parse_fit_config
from jaxid.fit.model import build_model
from jaxid.measure.logs import load_log
from jaxid.model.description import load_parameters, save_parameters

DATA = Path(__file__).resolve().parent.parent / "data" / "double-pendulum"

DURATION = 8.0


def other_arm():
    return jaxid.TwoLinkArm(
        masses=(0.9, 0.7),
        lengths=(0.3, 0.4),
        com=(0.25, 0.35),
        inertias=(0.004, 0.006),
        friction=(0.02, 0.015),
        gravity=9.81,
        coulomb=(0.1, 0.08),
        rotor_inertia=1.2e-4,
        gear_ratio=9.0,
        torque_offset=(0.015, -0.01),
        coulomb_slope=100.0,
    )


def _ramp(t):
    return np.minimum(np.asarray(t) / 0.5, 1.0)


def _single(joint, amplitude, hz):
    def torque(t):
        out = np.zeros((np.size(t), 2))
        out[:, joint] = amplitude * _ramp(t) * np.sin(2 * np.pi * hz * np.asarray(t))
        return out

    return torque


def _both(t):
    t = np.asarray(t)
    r = 0.5 * _ramp(t)
    return np.stack(
        [
            r * (1.2 * np.sin(2 * np.pi * 0.8 * t) + 0.4 * np.sin(2 * np.pi * 1.7 * t + 1.0)),
            r * (0.8 * np.sin(2 * np.pi * 1.3 * t + 0.3) + 0.2 * np.sin(2 * np.pi * 2.1 * t)),
        ],
        -1,
    )


RUNS = {"drive_j1": _single(0, 0.8, 1.2), "drive_j2": _single(1, 0.35, 1.2), "both": _both}

# The user's description of the build: geometry and constants; the masses and inertias are guesses
# (they only start the estimators and set the masses of the exported file).
ARM_TABLE = """
[arm]
l1 = 0.3
l2 = 0.4
m1 = 1.0
m2 = 0.5
r1 = 0.2
r2 = 0.3
J1 = 0.002
J2 = 0.002
fv1 = 0.0
fv2 = 0.0
fc1 = 0.05
fc2 = 0.05
Ir = 1e-4
gear_ratio = 9.0
coulomb_slope = 100.0
g = 9.81
terms = ["rotor", "coulomb", "offset"]
"""

CONFIG = """
[fit]
name = "other_build"
data = "{data}"
reference = "{reference}"
{arm}
[log]
sample_step = 0.002
[split]
rule = "fit on the single-joint runs, hold out the run that drives both"
train = ["drive_j1", "drive_j2"]
test = ["both"]
[filter]
candidates = [3, 5, 10]
[estimators]
use = ["idim_ls", "idim_iv"]
[validation]
horizons_s = [0.5, 1.0]
[frequency]
harmonics = 2
"""


@pytest.fixture(scope="module")
def other_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("other_build")
    arm = other_arm()
    for seed, (name, torque) in enumerate(RUNS.items()):
        log_frame(*simulate(arm, torque, DURATION), seed=seed).to_csv(root / f"{name}.csv.gz", index=False)
    reference = save_parameters(root / "true_arm.toml", arm)
    config = root / "fit.toml"
    config.write_text(CONFIG.format(data=root, reference=reference, arm=ARM_TABLE))
    return root, arm, config


@pytest.fixture(scope="module")
def other_fit(other_build):
    root, arm, config = other_build
    out = root / "out"
    assert main(["fit", str(config), "--out", str(out), "--no-figures"]) == 0
    return out


@pytest.mark.slow  # an end-to-end fit through the CLI
def test_other_geometry_from_the_config_alone(other_build, other_fit):
    root, arm, _ = other_build
    out = other_fit
    manifest = json.loads((out / "manifest.json").read_text())
    # The excitation is the 1.2 Hz drive (periodogram bins of 1/8 Hz); the undriven joint of each
    # training run carries torque noise only and is not driven.
    assert manifest["excitation_hz"] == pytest.approx(1.2, abs=0.07)
    driven = {(r["run"], r["joint"]): r["driven"] for r in manifest["driven"]}
    assert driven == {("drive_j1", 1): True, ("drive_j1", 2): False, ("drive_j2", 1): False, ("drive_j2", 2): True}
    assert manifest["cutoff_hz"] in [round(c * manifest["excitation_hz"], 2) for c in (3, 5, 10)]
    params = pd.read_csv(out / "parameters.csv")
    base = jaxid.base_parameters(arm)
    truth = dict(zip(base.names, np.asarray(base.values(jaxid.standard_parameters(arm))), strict=True))
    ls = params[params["estimator"] == "idim_ls"].set_index("parameter")
    # The reference is the true arm's parameter file: its base parameters are the truth.
    for name, value in truth.items():
        assert ls.loc[name, "reference"] == pytest.approx(value, rel=1e-5, abs=1e-9), name
    for name in ("I1", "m1r1", "I2", "m2r2"):  # l1 = 0.3 m enters I1 + 0.09 m2 and m1r1 + 0.3 m2
        assert ls.loc[name, "value"] == pytest.approx(truth[name], rel=0.03), name
    assert ls.loc["Ir", "value"] == pytest.approx(truth["Ir"], rel=0.1)
    for name in ("fc1", "fc2"):
        assert ls.loc[name, "value"] == pytest.approx(truth[name], rel=0.1), name
    for name in ("fv1", "fv2", "off1", "off2"):
        assert ls.loc[name, "value"] == pytest.approx(truth[name], abs=0.005), name
    assert "I1 + 0.09 m2" in set(ls["label"]) and "m1r1 + 0.3 m2" in set(ls["label"])
    # Held-out torque (evaluation band) at the true parameters' level: the noise floor.
    summary = pd.read_csv(out / "summary.csv").set_index(["model", "joint"])
    for joint in (1, 2):
        assert summary.loc[("idim_ls", joint), "torque_rmse"] <= 1.1 * summary.loc[("reference", joint), "torque_rmse"]
    warnings = pd.read_csv(out / "warnings.csv")
    assert not set(warnings["kind"]) & {"inconsistent", "far_from_reference", "worse_than_reference", "degrees"}


@pytest.mark.slow  # an end-to-end fit through the CLI
def test_exported_parameter_files_give_the_identified_base_parameters(other_build, other_fit):
    root, arm, _ = other_build
    params = pd.read_csv(other_fit / "parameters.csv")
    base = jaxid.base_parameters(arm)
    for estimator in ("idim_ls", "idim_iv"):
        fitted = params[params["estimator"] == estimator].set_index("parameter").loc[list(base.names), "value"]
        loaded = load_parameters(other_fit / "identified" / f"{estimator}.toml")
        again = np.asarray(base.values(jaxid.standard_parameters(loaded)))
        # parameters.csv holds 6 significant digits; the file holds full precision.
        np.testing.assert_allclose(again, fitted.to_numpy(), rtol=1e-5, atol=1e-9)
        assert float(loaded.lengths[0]) == 0.3 and float(loaded.gear_ratio) == 9.0


def _tone_copy(log, joint, hz=18.4, amplitude=0.5, seed=0):
    """``log`` with a drive tone and noise added to ``joint``'s torque reading (the joint is not driven)."""
    t = np.asarray(log.t)
    tau = np.asarray(log.tau).copy()
    rng = np.random.default_rng(seed)
    tau[:, joint] += amplitude * np.sin(2 * np.pi * hz * t) + 0.05 * rng.standard_normal(t.size)
    return eqx.tree_at(lambda g: g.tau, log, jnp.asarray(tau))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_an_undriven_joint_with_a_drive_tone_changes_nothing():
    raw = {
        "fit": {"name": "tone"},
        "arm": {"preset": "double_pendulum", "terms": ["rotor", "coulomb", "offset"]},
        "split": {"train": ["trajectory_03", "trajectory_05"]},
        "validation": {"horizons_s": [1.0]},
    }
    config = parse_fit_config(raw)
    model = build_model(config)
    clean = {n: load_log(DATA / f"{n}.csv.gz", sample_step=0.002) for n in config.train}
    toned = dict(clean, trajectory_05=_tone_copy(clean["trajectory_05"], joint=1))
    cut_clean, f_clean, _, _ = choose_cutoff(config, clean, model)
    cut_tone, f_tone, _, drive = choose_cutoff(config, toned, model)
    assert f_clean == pytest.approx(1.6, abs=0.05)
    assert (f_tone, cut_tone) == (f_clean, cut_clean)
    row = next(r for r in drive if r["run"] == "trajectory_05" and r["joint"] == 2)
    assert row["torque_peak_hz"] == pytest.approx(18.4, abs=0.1) and row["coherence"] < 0.5 and not row["driven"]


# -- warnings and refusals --------------------------------------------------------------------

TICK = 3.8e-4  # the encoder step of the shipped logs [rad]


def _quick_config(root, data, reference, extra_log=""):
    """The other build's config with a fixed cut-off, IDIM-LS only and one horizon (no search)."""
    text = CONFIG.format(data=data, reference=reference, arm=ARM_TABLE)
    text = text.replace("candidates = [3, 5, 10]", "cutoff_hz = 6.0").replace('"idim_ls", "idim_iv"', '"idim_ls"')
    text = text.replace("horizons_s = [0.5, 1.0]", "horizons_s = [0.5]")
    text = text.replace("sample_step = 0.002", "sample_step = 0.002\n" + extra_log)
    path = root / f"fit{len(extra_log)}.toml"
    path.write_text(text)
    return path


@pytest.mark.slow  # an end-to-end fit through the CLI
def test_angles_in_degrees_warn_and_angle_unit_converts_them(other_build, tmp_path, capsys):
    root, arm, _ = other_build
    for name in RUNS:
        frame = pd.read_csv(root / f"{name}.csv.gz")
        frame[["pos_meas1", "pos_meas2"]] = np.degrees(frame[["pos_meas1", "pos_meas2"]])
        frame.to_csv(tmp_path / f"{name}.csv.gz", index=False)
    reference = root / "true_arm.toml"
    assert main(["fit", str(_quick_config(tmp_path, tmp_path, reference)), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "drive_j1: joint 1's angle spans" in err and 'set log.angle_unit = "deg"' in err
    warned = pd.read_csv(tmp_path / "a" / "warnings.csv")
    assert "degrees" in set(warned["kind"]) and "far_from_reference" in set(warned["kind"])
    # Told the unit, the same logs give the same fit as the logs in radians: no warning of either kind.
    config = _quick_config(tmp_path, tmp_path, reference, 'angle_unit = "deg"')
    assert main(["fit", str(config), "--out", str(tmp_path / "b"), "--no-figures", "--quiet"]) == 0
    assert "jaxid fit: [" not in capsys.readouterr().err  # --quiet: no progress lines
    warned = pd.read_csv(tmp_path / "b" / "warnings.csv")
    assert not set(warned["kind"]) & {"degrees", "far_from_reference", "inconsistent"}
    params = pd.read_csv(tmp_path / "b" / "parameters.csv").set_index("parameter")
    for name in ("I1", "m1r1", "I2", "m2r2"):
        assert params.loc[name, "value"] == pytest.approx(params.loc[name, "reference"], rel=0.03), name


def _held_run(arm, hz, amplitude, seed):
    """Joint 1 moved along a sine, joint 2 held at 0 by its drive (the reading dithers by one encoder
    tick; its torque is the holding torque): torques by inverse dynamics."""
    t = np.arange(0.0, DURATION + 1e-9, 0.001)
    w = 2 * np.pi * hz
    zero = np.zeros_like(t)
    q = np.stack([amplitude * np.sin(w * t), zero], -1)
    qd = np.stack([amplitude * w * np.cos(w * t), zero], -1)
    qdd = np.stack([-amplitude * w * w * np.sin(w * t), zero], -1)
    tau = np.asarray(jaxid.inverse_dynamics(arm, q, qd, qdd))
    frame = log_frame(t, np.concatenate([q, qd], -1), tau, seed=seed)
    frame["pos_meas2"] = TICK * np.random.default_rng(seed + 10).integers(-1, 2, len(frame))
    return frame


@pytest.mark.slow  # an end-to-end fit through the CLI
def test_a_joint_that_only_dithers_warns(other_build, tmp_path, capsys):
    root, arm, _ = other_build
    _held_run(arm, 1.2, 0.6, 0).to_csv(tmp_path / "drive_j1.csv.gz", index=False)
    _held_run(arm, 0.7, 0.8, 1).to_csv(tmp_path / "drive_j2.csv.gz", index=False)
    (tmp_path / "both.csv.gz").write_bytes((root / "both.csv.gz").read_bytes())
    config = _quick_config(tmp_path, tmp_path, root / "true_arm.toml")
    assert main(["fit", str(config), "--out", str(tmp_path / "out"), "--no-figures"]) == 0
    err = capsys.readouterr().err
    assert "joint 2 moves at most" in err and "not identified" in err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    kinds = {w["kind"] for w in manifest["warnings"]}
    assert {"unexcited_joint", "far_from_reference", "worse_than_reference"} <= kinds
    assert [r["driven"] for r in manifest["driven"] if r["joint"] == 2] == [False, False]
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("model")
    assert "worse_than_reference" in summary.loc["idim_ls", "warnings"].iloc[0]


def test_no_driven_joint_is_an_error():
    from jaxid.config.common import ConfigError
    from jaxid.fit.cutoff import excitation_frequency

    log = load_log(DATA / "trajectory_05.csv.gz", sample_step=0.002, window=(0.0, 4.0))
    still = eqx.tree_at(lambda g: g.q, log, jnp.round(0.0 * log.q + jnp.sin(50.0 * log.t)[:, None]) * TICK)
    with pytest.raises(ConfigError, match=r"no training run drives a joint .* set filter.excitation_hz"):
        excitation_frequency({"trajectory_05": still})


def test_an_implausible_training_error_is_refused():
    from jaxid.config.common import ConfigError
    from jaxid.estimate.logs import filter_log
    from jaxid.fit.checks import check_training_error

    log = filter_log(load_log(DATA / "trajectory_05.csv.gz", sample_step=0.002), 6.0)
    # The torque's own spread: its standard deviation about the run's mean, pooled over joints.
    tau = np.asarray(log.band(log.tau))[log.usable]
    spread = float(np.sqrt(np.mean(np.var(tau, axis=0))))
    rows = [{"role": "train", "model": "idim_ls", "torque_rmse": e} for e in (0.5 * spread, 0.6 * spread)]
    checked = check_training_error(pd.DataFrame(rows), {"r": log})
    assert checked["train_torque_spread"] == pytest.approx(spread)
    assert checked["train_torque_rmse"] == pytest.approx(np.sqrt((0.25 + 0.36) / 2) * spread)
    rows[1]["torque_rmse"] = 4.0 * spread  # e.g. a torque column of the wrong sign or gain
    with pytest.raises(ConfigError, match=r"training torque with an RMSE of .* no better than the torque's own spread"):
        check_training_error(pd.DataFrame(rows), {"r": log})


def test_the_fit_starts_the_estimators_that_simulate_from_the_consistent_fit():
    """``jaxid.fit.runner._start``: the least-squares family from IDIM-LS; the estimators that simulate from the
    config's consistent LS where it converged (on IDIM-LS's names), from IDIM-LS where it did not, and from the
    rule's own consistent fit (``own``, ``simulation_start``) where the config does not run one."""
    from jaxid.estimate.logs import Identification
    from jaxid.fit.runner import _start

    def ident(method, names, value, status="ok"):
        p = len(names)
        return Identification(method, names, np.asarray(value, float), np.eye(p), p, 1.0, np.ones(1), 10, 0, "", status)

    ls = ident("idim_ls", ("a", "b"), [1.0, 2.0])
    consistent = ident("idim_ls_consistent", ("b", "c", "a"), [20.0, 30.0, 10.0])
    own = ident("idim_ls", ("a", "b"), [5.0, 6.0])
    for name in ("idim_ls_bounded", "rls"):
        assert _start(name, ls, {"idim_ls_consistent": consistent}, lambda: own) is ls
    for name in ("idim_iv", "ekf", "ukf", "output_error"):
        started = _start(name, ls, {"idim_ls_consistent": consistent}, lambda: own)
        np.testing.assert_array_equal(started.value, [10.0, 20.0])
        np.testing.assert_array_equal(started.covariance, ls.covariance)
        stopped = ident("idim_ls_consistent", ("b", "c", "a"), [20.0, 30.0, 10.0], status="max_iterations")
        assert _start(name, ls, {"idim_ls_consistent": stopped}, lambda: own) is ls
        assert _start(name, ls, {}, lambda: own) is own
