"""Logs as robots write them (``jaxid.measure.log_formats``): a CSV without a header line (columns by index),
a torque from motor currents (``torque_gain``), numpy ``.npz`` archives of named arrays, ROS 1 and
ROS 2 bags of ``sensor_msgs/msg/JointState`` (written here with rosbags' own writers), and the measured
velocities used by ``filter_log`` (``velocities = "measured"``).

The anchors are exact: each format read back equals the same samples read from a CSV with a header
(bit for bit), the fits of ``jaxid fit`` on them equal the fit on the CSV, and the measured-velocity
derivatives of a sine equal the analytic ones to the filter's accuracy.
"""

import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxid
from jaxid.cli import main
from jaxid.config.common import ConfigError
from jaxid.estimate.logs import filter_log
from jaxid.fit import parse_fit_config
from jaxid.fit.cutoff import load_logs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "double-pendulum"
KUKA = Path("/work/shared/data/kuka-lwr4/measurements_1.npz")
#: Per-joint motor-current gains [N m/A] (powers of two: current × gain is the torque exactly).
GAIN = [0.5, -2.0]


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


@pytest.fixture(scope="module")
def run():
    """The first 3.5 s of a shipped run: time, angles, velocities, torques (the columns a fit uses)."""
    frame = pd.read_csv(DATA / "trajectory_05.csv.gz")
    frame = frame[frame["time"] <= 3.5]
    return frame[["time", "pos_meas1", "pos_meas2", "vel_meas1", "vel_meas2", "tau_meas1", "tau_meas2"]]


def _headerless(run, path):
    """The run as a robot's controller writes it: no header; time, angles, velocities, currents [A]."""
    currents = run[["tau_meas1", "tau_meas2"]].to_numpy() / np.asarray(GAIN)
    table = np.column_stack([run[["time", "pos_meas1", "pos_meas2", "vel_meas1", "vel_meas2"]].to_numpy(), currents])
    pd.DataFrame(table).to_csv(path, header=False, index=False)
    return path


def _npz(run, path):
    np.savez(
        path,
        times=run["time"].to_numpy(),
        positions=run[["pos_meas1", "pos_meas2"]].to_numpy(),
        velocities=run[["vel_meas1", "vel_meas2"]].to_numpy(),
        torques=run[["tau_meas1", "tau_meas2"]].to_numpy(),
        target_positions=np.zeros((len(run), 2)),
    )
    return path


def _same(a, b):
    for field in ("t", "q", "tau", "qd"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)), err_msg=field)
    assert a.sample_step == b.sample_step and a.raw_samples == b.raw_samples


# -- CSV without a header, columns by index, torque from currents --------------------------------------


def test_headerless_csv_by_index_with_current_gain_equals_the_csv(run, tmp_path):
    named = run.to_csv(tmp_path / "named.csv", index=False) or tmp_path / "named.csv"
    reference = jaxid.load_log(named, velocities="vel_meas")
    path = _headerless(run, tmp_path / "robot.csv")
    log = jaxid.load_log(path, time=0, angles=[1, 2], velocities=[3, 4], torques=[5, 6], torque_gain=GAIN)
    _same(log, reference)
    assert log.columns == tuple(f"column {i}" for i in (1, 2, 5, 6, 3, 4))
    # header = false says the same; a header given by index works too (columns by position).
    _same(
        jaxid.load_log(path, header=False, time=0, angles=[1, 2], velocities=[3, 4], torques=[5, 6], torque_gain=GAIN),
        log,
    )
    _same(jaxid.load_log(named, time=0, angles=[1, 2], velocities=[3, 4], torques=["tau_meas1", 6]), reference)
    # One gain for every joint.
    scaled = jaxid.load_log(named, torque_gain=-3.0)
    np.testing.assert_array_equal(np.asarray(scaled.tau), -3.0 * np.asarray(reference.tau))


def test_a_headerless_file_read_by_name_says_to_give_indices(run, tmp_path):
    path = _headerless(run, tmp_path / "robot.csv")
    with pytest.raises(ValueError, match=r"^robot\.csv: no header line \(its first line is all numbers: '0\.0', ") as e:
        jaxid.load_log(path)
    assert "give the columns by 0-based index, e.g. time = 0, angles = [1, 2], torques = [3, 4]" in _one_line(e)
    # Told there is a header, the numbers become the column names: the message says to set header = false.
    with pytest.raises(
        ValueError,
        match=r"no time column 'time'; the file has \['0\.0', .*set header = false and "
        r"give the columns by 0-based index, e\.g\. time = 0",
    ) as e:
        jaxid.load_log(path, header=True)
    _one_line(e)
    with pytest.raises(ValueError, match=r"robot\.csv: torque column index 7 is out of range; the file has 7 columns"):
        jaxid.load_log(path, time=0, angles=[1, 2], torques=[6, 7])


@pytest.mark.parametrize(
    ("gain", "message"),
    [
        ([1.0, 0.0], r"^torque_gain = \[1\.0, 0\.0\]: every gain must be a finite non-zero number"),
        ([1.0, float("nan")], r"^torque_gain = \[1\.0, nan\]: every gain must be a finite non-zero number"),
        ([1.0, 2.0, 3.0], r"^torque_gain must be a number or a list of 2 numbers \(one per joint"),
    ],
)
def test_bad_torque_gains_are_one_line_errors(run, tmp_path, gain, message):
    path = _headerless(run, tmp_path / "robot.csv")
    with pytest.raises(ValueError, match=message) as e:
        jaxid.load_log(path, time=0, angles=[1, 2], torques=[5, 6], torque_gain=gain)
    _one_line(e)


# -- numpy archives -------------------------------------------------------------------------------------


def test_npz_archive_equals_the_csv(run, tmp_path):
    named = run.to_csv(tmp_path / "named.csv", index=False) or tmp_path / "named.csv"
    reference = jaxid.load_log(named, velocities="vel_meas")
    path = _npz(run, tmp_path / "run.npz")
    log = jaxid.load_log(path, velocities="velocities")  # times, positions, torques: the defaults
    _same(log, reference)
    assert log.name == "run" and log.columns[:2] == ("positions[:, 0]", "positions[:, 1]")
    # A list of (N,) arrays names one joint each.
    np.savez(tmp_path / "split.npz", t=run["time"].to_numpy(), **{c: run[c].to_numpy() for c in run.columns[1:]})
    split = jaxid.load_log(
        tmp_path / "split.npz",
        time="t",
        angles=["pos_meas1", "pos_meas2"],
        torques=["tau_meas1", "tau_meas2"],
        velocities=["vel_meas1", "vel_meas2"],
    )
    _same(split, reference)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"angles": "position"},
            r"^run\.npz: no array 'position' \(angles\); the archive has \['positions', 'target_positions', 'times', "
            r"'torques', 'velocities'\]\. Did you mean 'positions'\?$",
        ),
        ({"time": "positions"}, r"^run\.npz: the time array 'positions' must have shape \(N,\), got \(\d+, 2\)\.$"),
        (
            {"joints": 3},
            r"^run\.npz: angles array 'positions' has shape \((\d+), 2\); it must be \(\1, 3\): one row per",
        ),
        ({"angles": ["times", "positions"]}, r"^run\.npz: angles array 'positions' has shape \(\d+, 2\); each array"),
        ({"angles": [1, 2]}, r"^run\.npz: angles must be an array name or a list of names in the archive"),
        ({"header": False}, r"^run\.npz: header applies to CSV files; this is a npz log"),
    ],
)
def test_npz_errors_name_the_array(run, tmp_path, options, message):
    path = _npz(run, tmp_path / "run.npz")
    with pytest.raises(ValueError, match=message) as e:
        jaxid.load_log(path, **options)
    _one_line(e)


def test_a_damaged_npz_is_a_one_line_error(run, tmp_path):
    data = _npz(run, tmp_path / "run.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"^cut\.npz: not a readable \.npz archive of named arrays") as e:
        jaxid.load_log(tmp_path / "cut.npz")
    _one_line(e)


@pytest.mark.skipif(not KUKA.exists(), reason="the KUKA LWR4+ logs are not shipped with the repository")
def test_the_kuka_archive_loads_seven_joints():
    log = jaxid.load_log(KUKA, velocities="velocities")
    with np.load(KUKA) as archive:
        assert log.joints == 7 and log.q.shape[0] > 4000
        np.testing.assert_array_equal(np.asarray(log.q)[0], archive["positions"][0])


# -- ROS bags -------------------------------------------------------------------------------------------

NAMES = ["gripper", "shoulder", "elbow"]  # as published; the arm's joints are elbow and shoulder's order below
STEP_NS = 3_906_250  # 1/256 s: the stamps 1 + k/256 s are exact binary numbers


def _messages(store, count, names=NAMES, offset=0.0):
    state = store.types["sensor_msgs/msg/JointState"]
    header = store.types["std_msgs/msg/Header"]
    stamp = store.types["builtin_interfaces/msg/Time"]
    seq = {"seq": 0} if "seq" in header.__dataclass_fields__ else {}  # ROS 1 headers carry a sequence number
    for k in range(count):
        msg = state(
            header=header(stamp=stamp(sec=1, nanosec=k * STEP_NS), frame_id="", **seq),
            name=list(names),
            position=np.array([offset + 0.25 * k + j for j in range(len(names))]),
            velocity=np.array([0.5 * k - j for j in range(len(names))]),
            effort=np.array([-0.125 * k + 2 * j for j in range(len(names))]),
        )
        yield 2_000_000_000 + k * 1_000_000, msg  # received 2 s + k ms (not the stamps)


def _ros1(path, count=12, topics=("/joint_states",), names=NAMES):
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    with Writer(path) as writer:
        for i, topic in enumerate(topics):
            connection = writer.add_connection(topic, "sensor_msgs/msg/JointState", typestore=store)
            for time, msg in _messages(store, count, names, offset=i):
                writer.write(connection, time, store.serialize_ros1(msg, "sensor_msgs/msg/JointState"))
    return path


def _ros2(path, count=12, topics=("/joint_states",), names=NAMES):
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    with Writer(path, version=9) as writer:
        for i, topic in enumerate(topics):
            connection = writer.add_connection(topic, "sensor_msgs/msg/JointState", typestore=store)
            for time, msg in _messages(store, count, names, offset=i):
                writer.write(connection, time, store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))
    return path


def _bag_config(data, **log):
    raw = {
        "fit": {"name": "bags", "data": str(data)},
        "arm": {"preset": "double_pendulum"},
        "log": {"sample_step": 1 / 256, **log},
        "split": {"train": ["run"]},
    }
    return parse_fit_config(raw)


@pytest.mark.parametrize("write", [_ros1, _ros2], ids=["ros1", "ros2"])
def test_bags_read_through_the_fit_loader_pick_joints_by_name(tmp_path, write):
    write(tmp_path / ("run.bag" if write is _ros1 else "run"))
    config = _bag_config(tmp_path, joints=["elbow", "shoulder"], velocities="velocity")
    log = load_logs(config, ["run"])["run"]
    k = np.arange(12)
    np.testing.assert_array_equal(np.asarray(log.t), 1 + k / 256)  # the header stamps
    np.testing.assert_array_equal(np.asarray(log.q), np.stack([0.25 * k + 2, 0.25 * k + 1], -1))
    np.testing.assert_array_equal(np.asarray(log.qd), np.stack([0.5 * k - 2, 0.5 * k - 1], -1))
    np.testing.assert_array_equal(np.asarray(log.tau), np.stack([-0.125 * k + 4, -0.125 * k + 2], -1))
    assert log.name == "run" and log.columns[:2] == ("position[elbow]", "position[shoulder]")
    # The receive times instead of the stamps; a gain on the efforts (here currents).
    config = _bag_config(
        tmp_path, joints=["elbow", "shoulder"], time="receive", torque_gain=[2.0, -1.0], sample_step=None
    )
    log = load_logs(config, ["run"])["run"]
    np.testing.assert_allclose(np.asarray(log.t), 2 + k / 1000, rtol=0, atol=1e-12)
    # (the receive stamps are not binary fractions: the resampling onto their median step rounds at 1e-13)
    np.testing.assert_allclose(np.asarray(log.tau), np.stack([-0.25 * k + 8, 0.125 * k - 2], -1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("write", [_ros1, _ros2], ids=["ros1", "ros2"])
def test_bag_errors_name_the_joint_topic_and_field(tmp_path, write):
    path = write(tmp_path / ("run.bag" if write is _ros1 else "run"))
    name = path.name
    with pytest.raises(
        ValueError,
        match=rf"^{name}: message 0 on /joint_states has no joint 'elbw'; its joints are "
        r"\['gripper', 'shoulder', 'elbow'\]\. Did you mean 'elbow'\? Set \[log\] joints",
    ) as e:
        load_logs(_bag_config(tmp_path, joints=["elbw", "shoulder"]), ["run"])
    _one_line(e)
    # Without log.joints (a two-link arm has no joint names) the messages' order must fit the arm.
    with pytest.raises(
        ValueError,
        match=rf"^{name}: the messages on /joint_states carry 3 joints \['gripper', "
        r"'shoulder', 'elbow'\], the arm has 2: give the arm's joints",
    ):
        load_logs(_bag_config(tmp_path), ["run"])
    with pytest.raises(
        ValueError,
        match=rf"^{name}: no topic '/joint_state' in the bag; its JointState topics are "
        r"\['/joint_states'\]\. Did you mean '/joint_states'\?$",
    ):
        jaxid.load_log(path, topic="/joint_state", joint_names=["elbow", "shoulder"])
    with pytest.raises(
        ValueError,
        match=rf"^{name}: torques = 'tau_meas', but a ROS bag's JointState message has "
        r'the fields position, velocity and effort: set torques = "effort"',
    ):
        jaxid.load_log(path, torques="tau_meas", joint_names=["elbow", "shoulder"])


def test_a_bag_with_two_joint_state_topics_needs_the_topic(tmp_path):
    path = _ros2(tmp_path / "run", topics=("/arm/joint_states", "/gripper/joint_states"))
    with pytest.raises(
        ValueError,
        match=r"^run: the bag has 2 JointState topics \['/arm/joint_states', "
        r"'/gripper/joint_states'\]; its topics are .*: set topic = ",
    ) as e:
        jaxid.load_log(path, joint_names=["elbow", "shoulder"])
    _one_line(e)
    log = jaxid.load_log(path, topic="/gripper/joint_states", joint_names=["elbow", "shoulder"])
    assert float(log.q[0, 0]) == 3.0  # the second topic's positions are offset by 1


def test_the_fit_loader_finds_every_format_and_refuses_bag_keys_elsewhere(run, tmp_path):
    _npz(run, tmp_path / "run.npz")
    config = _bag_config(tmp_path, sample_step=0.002, velocities="velocities")
    log = load_logs(config, ["run"])["run"]
    assert log.qd is not None and log.joints == 2
    with pytest.raises(ConfigError, match=r"^log\.topic applies to ROS bags; log run\.npz is not one"):
        load_logs(_bag_config(tmp_path, topic="/joint_states"), ["run"])
    with pytest.raises(
        ConfigError,
        match=r"log 'other' not found in .* \(tried \.csv\.gz, \.csv, \.parquet, \.pq, "
        r"\.npz, \.bag and a ROS 2 bag directory other/\)",
    ):
        load_logs(config, ["other"])


@pytest.mark.parametrize(
    ("log", "flt", "message"),
    [
        ({"torque_gain": [1.0, 0.0]}, {}, r"^log\.torque_gain = \[1\.0, 0\.0\]: every gain must be a finite non-zero"),
        ({"torque_gain": [1.0, 2.0, 3.0]}, {}, r"^log\.torque_gain must be a number or a list of 2 numbers"),
        ({"header": "no"}, {}, r"^log\.header must be true or false"),
        ({"time": -1}, {}, r"^log\.time must be a column name or a 0-based column index"),
        ({"angles": [1, "x", 2.5]}, {}, r"^log\.angles must be a prefix, a name of an \.npz array, or a list of 2"),
        ({"joints": ["a"]}, {}, r"^log\.joints must be 2 distinct joint names"),
        ({"topic": 3}, {}, r"^log\.topic must be a topic name"),
        ({}, {"velocities": "measure"}, r'^filter\.velocities must be "differentiate" or "measured"'),
        (
            {},
            {"velocities": "measured"},
            r'^filter\.velocities = "measured" needs the logs\' velocities: set log\.velocities',
        ),
        ({"heder": False}, {}, r"^unknown key 'log\.heder'.*Did you mean 'header'\?"),
    ],
)
def test_log_config_errors_name_the_key(log, flt, message):
    raw = {
        "fit": {"name": "x"},
        "arm": {"preset": "double_pendulum"},
        "log": log,
        "filter": flt,
        "split": {"train": ["a"]},
    }
    with pytest.raises(ConfigError, match=message) as e:
        parse_fit_config(raw)
    _one_line(e)


# -- measured velocities in filter_log -------------------------------------------------------------------


def _sine_log(with_velocity=True):
    """``q = A sin(ω t)`` on a 2 ms grid and, measured, ``q' = A ω cos(ω t)`` (two joints)."""
    t = np.arange(2001) * 0.002
    amplitude, w = np.array([0.8, -0.3]), 2 * np.pi * np.array([0.7, 1.3])
    q = amplitude * np.sin(w * t[:, None])
    qd = amplitude * w * np.cos(w * t[:, None])
    qdd = -amplitude * w**2 * np.sin(w * t[:, None])
    tau = np.zeros_like(q) + np.array([0.1, 0.2])
    log = jaxid.MeasuredLog(
        jnp.asarray(t),
        jnp.asarray(q),
        jnp.asarray(tau),
        jnp.asarray(qd) if with_velocity else None,
        "sine.csv",
        0.002,
        ("q1", "q2", "tau1", "tau2"),
        t.size,
    )
    return log, q, qd, qdd


@pytest.mark.parametrize("method", ["butterworth", "savgol"])
def test_measured_velocities_give_the_analytic_derivatives(method):
    log, q, qd, qdd = _sine_log()
    measured = filter_log(log, 8.0, method=method, velocities="measured")
    default = filter_log(log, 8.0, method=method)
    inner = slice(250, -250)  # 0.5 s from each end: past the Butterworth filter's edge transient on a cosine
    # The filtered measured velocity is the velocity; its one derivative the acceleration, closer to the
    # analytic one than the angles differentiated twice.
    np.testing.assert_allclose(np.asarray(measured.qd)[inner], qd[inner], rtol=0, atol=1e-3 * np.abs(qd).max())
    np.testing.assert_allclose(np.asarray(measured.qdd)[inner], qdd[inner], rtol=0, atol=2e-3 * np.abs(qdd).max())
    error = lambda f: np.abs(np.asarray(f.qdd)[inner] - qdd[inner]).max()  # noqa: E731
    assert error(measured) < error(default)
    # The angles and torques are filtered as without the option; the velocities are the log's, filtered.
    for field in ("q", "q_raw", "tau", "tau_raw", "t"):
        np.testing.assert_array_equal(np.asarray(getattr(measured, field)), np.asarray(getattr(default, field)))
    assert not np.array_equal(np.asarray(measured.qd), np.asarray(default.qd))


def test_without_the_option_nothing_changes():
    log, *_ = _sine_log()
    plain, *_ = _sine_log(with_velocity=False)
    a = filter_log(log, 8.0)
    b = filter_log(log, 8.0, velocities="differentiate")
    c = filter_log(plain, 8.0)  # a log without velocities: the same filtered log
    for field in ("q", "qd", "qdd", "tau"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)))
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(c, field)))
    with pytest.raises(ValueError, match=r'^sine: velocities = "measured" needs the log\'s velocity columns'):
        filter_log(plain, 8.0, velocities="measured")
    with pytest.raises(ValueError, match=r'^velocities must be "differentiate" or "measured", got \'measure\''):
        filter_log(log, 8.0, velocities="measure")


# -- jaxid fit on each format: the same results as on the CSV ---------------------------------------------

FIT = """
[fit]
name = "formats"
data = "{data}"
unknowns = ["I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2", "off1"]
fixed = {{off2 = 0.0}}
reference = "double_pendulum"
[arm]
preset = "double_pendulum"
terms = ["rotor", "coulomb", "offset"]
[log]
sample_step = 0.002
window = [0.0, 3.0]
{log}
[split]
train = ["trajectory_05"]
[filter]
cutoff_hz = 6.4
{filter}
[estimators]
use = ["idim_ls"]
[validation]
horizons_s = [0.5]
[frequency]
harmonics = 2
"""


@pytest.fixture(scope="module")
def csv_fit(run, tmp_path_factory):
    root = tmp_path_factory.mktemp("csv_fit")
    (root / "data").mkdir()
    run.to_csv(root / "data" / "trajectory_05.csv", index=False)
    return _fit(root, "")


def _fit(root, log, flt=""):
    config = root / "fit.toml"
    config.write_text(FIT.format(data=root / "data", log=log, filter=flt))
    out = root / "out"
    assert main(["fit", str(config), "--out", str(out), "--no-figures"]) == 0
    return pd.read_csv(out / "parameters.csv"), pd.read_csv(out / "validation.csv")


def _assert_same_fit(a, b):
    for x, y in zip(a, b, strict=True):
        pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # three fits through the CLI
def test_fit_on_a_headerless_csv_of_currents_and_on_an_npz_equals_the_csv_fit(run, csv_fit, tmp_path, capsys):
    (tmp_path / "data").mkdir()
    _headerless(run, tmp_path / "data" / "trajectory_05.csv")
    log = f"time = 0\nangles = [1, 2]\ntorques = [5, 6]\ntorque_gain = {GAIN}"
    _assert_same_fit(_fit(tmp_path, log), csv_fit)
    shutil.rmtree(tmp_path / "data")
    shutil.rmtree(tmp_path / "out")
    (tmp_path / "data").mkdir()
    _npz(run, tmp_path / "data" / "trajectory_05.npz")
    npz = 'time = "times"\nangles = "positions"\ntorques = "torques"\nvelocities = "velocities"'
    _assert_same_fit(_fit(tmp_path, npz), csv_fit)
    # The headerless file read by name: the one-line error says to give indices, and nothing is written.
    shutil.rmtree(tmp_path / "out")
    _headerless(run, tmp_path / "data" / "trajectory_05.csv")
    (tmp_path / "data" / "trajectory_05.npz").unlink()
    config = tmp_path / "fit.toml"
    config.write_text(FIT.format(data=tmp_path / "data", log="", filter=""))
    capsys.readouterr()
    assert main(["fit", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "trajectory_05.csv: no header line" in err and "give the columns by 0-based index" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow  # a fit through the CLI
def test_fit_with_measured_velocities_differs_only_through_them(run, csv_fit, tmp_path):
    (tmp_path / "data").mkdir()
    run.to_csv(tmp_path / "data" / "trajectory_05.csv", index=False)
    # Velocities read but not used: the same fit.
    _assert_same_fit(_fit(tmp_path, 'velocities = "vel_meas"'), csv_fit)
    shutil.rmtree(tmp_path / "out")
    params, _ = _fit(tmp_path, 'velocities = "vel_meas"', 'velocities = "measured"')
    assert np.isfinite(params["value"]).all()
    assert not np.allclose(params["value"], csv_fit[0]["value"], rtol=1e-9, atol=0)
