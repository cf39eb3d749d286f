"""load_log (CSV, CSV.gz, parquet; resampling; errors) and the zero-phase filters."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxid
from jaxid.estimate.logs import filter_log
from jaxid.measure.filters import default_cutoff, differentiate, dominant_frequency, lowpass, min_samples

REAL = Path(__file__).resolve().parent.parent / "data" / "double-pendulum" / "trajectory_03.csv.gz"


@pytest.fixture(scope="module")
def logs(lab_log):
    return lab_log


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


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _truncated_gzip(tmp_path):
    data = REAL.read_bytes()
    path = tmp_path / REAL.name
    path.write_bytes(data[: len(data) // 2])
    return path


def _random_bytes(name):
    def make(tmp_path):
        path = tmp_path / name
        path.write_bytes(np.random.default_rng(0).bytes(2000))
        return path

    return make


def _gzipped_binary(tmp_path):
    import gzip

    path = tmp_path / "binary.csv.gz"
    path.write_bytes(gzip.compress(np.random.default_rng(1).bytes(3000)))
    return path


def _bad_checksum(tmp_path):
    import gzip

    data = bytearray(gzip.compress(_frame().to_csv(index=False).encode()))
    data[-8] ^= 0xFF  # the CRC-32 of the text, in the last 8 bytes with the length
    path = tmp_path / "crc.csv.gz"
    path.write_bytes(bytes(data))
    return path


def _truncated_parquet(tmp_path):
    path = tmp_path / "cut.parquet"
    _frame().to_parquet(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _empty(name):
    def make(tmp_path):
        path = tmp_path / name
        path.write_bytes(b"")
        return path

    return make


def _header_only(name):
    def make(tmp_path):
        path = tmp_path / name
        frame = _frame().iloc[:0]
        frame.to_parquet(path) if name.endswith(".parquet") else frame.to_csv(path, index=False)
        return path

    return make


def _cell(column, row, value, name="cell.csv"):
    def make(tmp_path):
        frame = _frame(50).astype(object)
        frame.loc[row, column] = value
        path = tmp_path / name
        frame.astype(str).to_parquet(path) if name.endswith(".parquet") else frame.to_csv(path, index=False)
        return path

    return make


# (id, file maker, regex the one-line message must match from its start)
UNREADABLE = [
    (
        "truncated gzip",
        _truncated_gzip,
        r"trajectory_03\.csv\.gz: not a readable gzip file \(truncated or corrupt: Compressed file ended .*\); "
        r"copy the log again\.$",
    ),
    (
        "corrupt gzip",
        _random_bytes("trajectory_03.csv.gz"),
        r"trajectory_03\.csv\.gz: not a readable gzip file \(truncated or corrupt: Not a gzipped file.*copy the log",
    ),
    (
        "gzip checksum",
        _bad_checksum,
        r"crc\.csv\.gz: not a readable gzip file \(truncated or corrupt: CRC check failed",
    ),
    (
        "gzip of binary",
        _gzipped_binary,
        r"binary\.csv\.gz: not a readable CSV file \('utf-8' codec .*\); the gzip file may be corrupt or a log must",
    ),
    ("binary csv", _random_bytes("noise.csv"), r"noise\.csv: not a readable CSV file \("),
    (
        "corrupt parquet",
        _random_bytes("noise.parquet"),
        r"noise\.parquet: not a readable parquet file \(truncated or corrupt: Parquet magic bytes.*copy the log",
    ),
    ("truncated parquet", _truncated_parquet, r"cut\.parquet: not a readable parquet file \(truncated or corrupt"),
    ("empty csv", _empty("empty.csv"), r"empty\.csv: the file is empty \(0 bytes\), it holds no samples"),
    ("empty csv.gz", _empty("empty.csv.gz"), r"empty\.csv\.gz: the file is empty \(0 bytes\), it holds no samples"),
    ("empty parquet", _empty("empty.parquet"), r"empty\.parquet: the file is empty \(0 bytes\), it holds no samples"),
    (
        "header only csv",
        _header_only("header.csv"),
        r"header\.csv: the file has a header \(5 columns\) but no rows, it holds no samples; give a log",
    ),
    (
        "header only parquet",
        _header_only("header.parquet"),
        r"header\.parquet: the file has a header \(5 columns\) but no rows, it holds no samples",
    ),
    (
        "text in an angle",
        _cell("pos_meas1", 17, "abc"),
        r"cell\.csv: column 'pos_meas1' has 1 non-numeric value\(s\), the first 'abc' at row 17 "
        r"\(data rows counted from 0; line 19 of the CSV\); fix or drop that row, or choose a window without it\.$",
    ),
    (
        "text in a torque",
        _cell("tau_meas2", 3, "1,5"),
        r"cell\.csv: column 'tau_meas2' has 1 non-numeric value\(s\), the first '1,5' at row 3 ",
    ),
    (
        "text in the time",
        _cell("time", 4, "0.008s"),
        r"cell\.csv: time column 'time' has 1 non-numeric value\(s\), the first '0\.008s' at row 4 "
        r"\(data rows counted from 0; line 6 of the CSV\); fix or drop that row\.$",
    ),
    (
        "text in a parquet angle",
        _cell("pos_meas2", 9, "n/a", "cell.parquet"),
        r"cell\.parquet: column 'pos_meas2' has 1 non-numeric value\(s\), the first 'n/a' at row 9 "
        r"\(data rows counted from 0\);",
    ),
]


@pytest.mark.parametrize("make,pattern", [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE])
def test_unreadable_logs_name_the_file(tmp_path, make, pattern):
    with pytest.raises(ValueError, match="^" + pattern) as error:
        jaxid.load_log(make(tmp_path))
    _one_line(error)


def test_rows_are_named_in_the_file_with_a_window(tmp_path):
    """Rows are counted in the file (from 0), also when a window starts later: here rows 20..40."""
    frame = _frame(60)
    frame.loc[30, "pos_meas1"] = np.nan
    path = _write(tmp_path, frame)
    with pytest.raises(ValueError, match=r"the first at row 30 \(data rows counted from 0; line 32 of the CSV\)"):
        jaxid.load_log(path, window=(0.04, 0.08))
    jaxid.load_log(path, window=(0.0, 0.05))  # outside the window: fine
    cell = _cell("tau_meas1", 35, "x")(tmp_path)
    with pytest.raises(ValueError, match=r"the first 'x' at row 35 "):
        jaxid.load_log(cell, window=(0.04, 0.08))
    jaxid.load_log(cell, window=(0.0, 0.05))
    # The time-stamp messages count rows the same way.
    with pytest.raises(ValueError, match=r"repeats at row 10 \(data rows counted from 0; line 12 of the CSV\): t = "):
        jaxid.load_log(_write(tmp_path, _frame().assign(time=lambda f: f["time"].where(f.index != 10, f["time"][9]))))


def test_a_log_too_short_for_the_filter_says_how_long_it_must_be(tmp_path):
    log = jaxid.load_log(_write(tmp_path, _frame(20), "short.csv"))  # 20 samples, 0.038 s
    assert min_samples(0.002, 20.0) == 16 and min_samples(0.002, 20.0, order=8) == 28
    with pytest.raises(ValueError, match=r"^short: the log lasts 0\.038 s \(20 samples of 0\.002 s\)") as error:
        filter_log(log, 20.0, order=8, trim_s=0.0)
    assert "order-8 Butterworth" in _one_line(error)
    assert "needs at least 0.054 s (28 samples) at this step and cut-off" in str(error.value)
    assert str(error.value).endswith("use a longer log (or a wider window), or a smaller filter order.")
    # Savitzky–Golay: its window is longer at a lower cut-off.
    with pytest.raises(ValueError, match=r"polynomial order 3 .* \(33 samples\).*a lower polynomial order or a higher"):
        filter_log(log, 20.0, method="savgol", trim_s=0.0)
    # The default trim (0.1 s at each end) needs 2 * 50 + 10 samples.
    with pytest.raises(ValueError, match=r"at least 0\.218 s \(110 samples\).*or a smaller trim_s\.$"):
        filter_log(log, 20.0)
    filter_log(log, 20.0, trim_s=0.0)  # 20 > 16: long enough
    with pytest.raises(ValueError, match="Nyquist"):  # the cut-off is still checked first
        filter_log(log, 300.0)


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
