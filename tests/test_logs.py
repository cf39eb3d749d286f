"""load_log (CSV, CSV.gz, parquet; resampling; errors) and the zero-phase filters."""

import numpy as np
import pandas as pd
import pytest
from _simulated_log import write_logs

import jaxid
from jaxid.filters import default_cutoff, differentiate, dominant_frequency, lowpass


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("logs"))


def test_csv_gz_and_parquet_read_back_the_same(logs):
    csv, parquet, _, frame = logs
    a = jaxid.load_log(csv)
    b = jaxid.load_log(parquet)
    np.testing.assert_allclose(a.q, b.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.tau, b.tau, rtol=0, atol=1e-12)
    assert a.name == "sim" and b.name == "sim"
    # Uniform grid at the median stamp difference (2 ms here), starting at the first stamp.
    assert a.sample_step == pytest.approx(np.median(np.diff(frame["time"])))
    np.testing.assert_allclose(np.diff(np.asarray(a.t)), a.sample_step, rtol=1e-9)
    assert a.raw_samples == len(frame)


def test_resampling_is_linear_interpolation_at_the_stamps(logs):
    csv, _, _, frame = logs
    log = jaxid.load_log(csv, torques="tau_con", velocities="vel_meas", sample_step=0.0015, window=(0.5, 2.5))
    t = np.asarray(log.t)
    assert t[0] == pytest.approx(0.5) and t[-1] <= 2.5 + 1e-12
    expected = np.interp(t, frame["time"], frame["pos_meas2"])
    np.testing.assert_allclose(np.asarray(log.q)[:, 1], expected, atol=1e-15)
    np.testing.assert_allclose(np.asarray(log.tau)[:, 0], np.interp(t, frame["time"], frame["tau_con1"]), atol=1e-15)
    assert log.qd is not None and log.columns[:4] == ("pos_meas1", "pos_meas2", "tau_con1", "tau_con2")


def _write(tmp_path, frame, name="bad.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _frame(n=50):
    t = np.arange(n) * 0.002
    return pd.DataFrame({"time": t, "pos_meas1": t, "pos_meas2": t, "tau_meas1": t, "tau_meas2": t})


def test_missing_column_lists_columns_and_suggests(tmp_path):
    path = _write(tmp_path, _frame())
    with pytest.raises(ValueError, match=r"no angle column 'pos_mes1'.*Did you mean 'pos_meas1'"):
        jaxid.load_log(path, angles=("pos_mes1", "pos_meas2"))
    with pytest.raises(ValueError, match=r"no torque column 'tau_con1'; the file has \['time'"):
        jaxid.load_log(path, torques="tau_con")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f.assign(time=f["time"].where(f.index != 10, f["time"][9])), "repeats at row 10"),
        (lambda f: f.assign(time=f["time"].where(f.index != 10, 0.0)), "goes backwards at row 10"),
        (lambda f: f.assign(pos_meas2=f["pos_meas2"].where(f.index != 7, np.nan)), "'pos_meas2' has 1 NaN/inf"),
        (lambda f: f.assign(tau_meas1=f["tau_meas1"].where(f.index != 3, np.inf)), "'tau_meas1' has 1 NaN/inf"),
    ],
)
def test_bad_time_and_values(tmp_path, edit, message):
    path = _write(tmp_path, edit(_frame()))
    with pytest.raises(ValueError, match=message):
        jaxid.load_log(path)


def test_window_and_options_errors(tmp_path):
    path = _write(tmp_path, _frame())
    with pytest.raises(ValueError, match="lies outside the data"):
        jaxid.load_log(path, window=(0.0, 5.0))
    with pytest.raises(ValueError, match="is empty"):
        jaxid.load_log(path, window=(0.05, 0.01))
    with pytest.raises(ValueError, match="sample_step must be a positive"):
        jaxid.load_log(path, sample_step=-1)
    with pytest.raises(ValueError, match="unknown format"):
        jaxid.load_log(_write(tmp_path, _frame(), "bad.xlsx"))
    with pytest.raises(ValueError, match="does not exist"):
        jaxid.load_log(tmp_path / "nope.csv")
    with pytest.raises(TypeError):
        jaxid.load_log(path, angle=("a", "b"))  # unknown option


def test_butterworth_and_savgol_derivatives_of_a_sine():
    h = 0.002
    t = np.arange(0, 6, h)
    w = 2 * np.pi * 1.5
    q = np.stack([np.sin(w * t), 0.5 * np.cos(w * t)], -1)
    for method in ("butterworth", "savgol"):
        qf, qd, qdd = differentiate(q, h, 10.0, method=method)
        inner = slice(100, -100)
        np.testing.assert_allclose(qd[inner, 0], w * np.cos(w * t[inner]), atol=5e-3 * w)
        # Savitzky-Golay's derivative gain already falls inside its smoothing band (~3 % here).
        tol = 1e-2 if method == "butterworth" else 4e-2
        np.testing.assert_allclose(qdd[inner, 1], -0.5 * w**2 * np.cos(w * t[inner]), atol=tol * w**2)
    # Zero phase: the low-passed sine is not delayed.
    np.testing.assert_allclose(lowpass(q, h, 10.0)[100:-200], q[100:-200], atol=1e-4)
    assert dominant_frequency(q, h) == pytest.approx(1.5, abs=0.1)
    assert default_cutoff(1.5, h) == 15.0 and default_cutoff(40.0, h) == 100.0
    with pytest.raises(ValueError, match="Nyquist"):
        differentiate(q, h, 300.0)
    with pytest.raises(ValueError, match="unknown filter method"):
        differentiate(q, h, 10.0, method="kalman")


def test_a_shipped_real_run_loads():
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "data" / "double-pendulum" / "trajectory_05.csv.gz"
    log = jaxid.load_log(path, velocities="vel_meas", window=(1.0, 9.0))
    assert log.name == "trajectory_05" and log.sample_step == pytest.approx(0.002, rel=1e-3)
    assert log.samples == pytest.approx(4000, abs=2) and np.all(np.isfinite(np.asarray(log.q)))
    # The measured run is driven on joint 1 only, at 10.05 rad/s (1.6 Hz).
    assert dominant_frequency(np.asarray(log.tau)[:, :1], log.sample_step) == pytest.approx(1.6, abs=0.05)
