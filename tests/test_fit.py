"""`jaxid fit`: config validation and an end-to-end fit on a real run of the shipped subset."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from jaxid.cli import main
from jaxid.config.common import ConfigError
from jaxid.fit import load_fit_config, parse_fit_config

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "double-pendulum"

TINY = f"""
[fit]
name = "tiny"
data = "{DATA}"
unknowns = ["I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2", "off1"]
fixed = {{off2 = 0.0}}
reference = "double_pendulum"
[arm]
preset = "double_pendulum"
terms = ["rotor", "coulomb", "offset"]
[log]
sample_step = 0.002
window = [0.0, 3.0]
[split]
rule = "one single-joint run to fit, one two-joint run held out"
train = ["trajectory_05"]
test = ["trajectory_00"]
[filter]
cutoff_hz = 6.4
[estimators]
use = ["idim_ls", "idim_ls_bounded", "output_error"]
[estimators.output_error]
segment_s = 100.0  # longer than the window: this estimator fails and the fit goes on without it
[validation]
horizons_s = [0.5]
headline = "idim_ls"
[frequency]
harmonics = 2
"""


def test_shipped_configs_parse():
    for name in ("double_pendulum", "double_pendulum_all"):
        cfg = load_fit_config(ROOT / "experiments" / "fits" / f"{name}.toml")
        assert cfg.name == name and set(cfg.train).isdisjoint(cfg.test)
    cfg = load_fit_config(ROOT / "experiments" / "fits" / "double_pendulum.toml")
    for run in cfg.train + cfg.test:
        assert (DATA / f"{run}.csv.gz").exists()  # the README example runs on a fresh clone


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"filter": {"cutof_hz": 5}}, r"unknown key 'filter.cutof_hz'.*Did you mean 'cutoff_hz'"),
        ({"fitt": {}}, r"unknown section \[fitt\].*Did you mean 'fit'"),
        ({"estimators": {"use": ["idim_lss"]}}, r"unknown estimator 'idim_lss'.*Did you mean 'idim_ls'"),
        (
            {"estimators": {"use": ["output_error"], "output_error": {"segments": 3}}},
            r"estimators.output_error.segments",
        ),
        ({"split": {"train": ["a"], "test": ["a"]}}, "in both train and test"),
        ({"split": {"train": []}}, "split.train must list"),
        ({"filter": {"cutoff_hz": -1}}, "filter.cutoff_hz"),
        ({"fit": {"name": "x", "model": "table2"}}, r"fit.model is replaced by the \[arm\] table"),
        ({"arm": {"preset": "table2"}}, r"arm.preset.*table2"),
        ({"fit": {"name": "x", "reference": "lab.txt"}}, "fit.reference 'lab.txt' is neither a preset"),
        (
            {"fit": {"name": "x", "reference": "point_mass"}},
            r"fit.reference 'point_mass' has l1 = 1 but \[arm\] has 0.2",
        ),
        ({"log": {"angle_unit": "grad"}}, 'log.angle_unit must be "rad" or "deg"'),
        ({"validation": {"band_hz": 0}}, "validation.band_hz must be a positive number"),
    ],
)
def test_config_errors_name_the_key(edit, message):
    raw = {
        "fit": {"name": "x"},
        "arm": {"preset": "double_pendulum"},
        "split": {"train": ["a"], "test": ["b"]},
        "validation": {"headline": "idim_ls"},
    }
    for section, values in edit.items():
        raw.setdefault(section, {}).update(values)
    with pytest.raises(ConfigError, match=message):
        parse_fit_config(raw)


def test_unknowns_must_be_base_parameters():
    from jaxid.fit.model import build_model

    raw = {
        "fit": {"name": "x", "unknowns": ["I1", "m2"]},
        "arm": {"preset": "double_pendulum", "terms": ["rotor", "coulomb", "offset"]},
        "split": {"train": ["a"]},
        "validation": {"headline": "idim_ls"},
    }
    with pytest.raises(ConfigError, match=r"fit.unknowns: 'm2' is not a base parameter.*Did you mean 'm2r2'"):
        build_model(parse_fit_config(raw))
    raw["fit"] = {"name": "x", "unknowns": ["I1"], "fixed": {"I1": 1.0}}
    with pytest.raises(ConfigError, match="fit.fixed: 'I1' must be a base parameter not in fit.unknowns"):
        build_model(parse_fit_config(raw))


def test_missing_log_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "fit.toml"
    path.write_text(TINY.replace('"trajectory_00"', '"trajectory_99"'))
    assert main(["fit", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "log 'trajectory_99' not found" in capsys.readouterr().err


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_end_to_end_fit_on_a_real_run(tmp_path, capsys):
    path = tmp_path / "fit.toml"
    path.write_text(TINY)
    out = tmp_path / "out"
    assert main(["fit", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Results in" in captured.out
    assert "jaxid fit: warning: estimator output_error failed" in captured.err
    # Progress on stderr as each stage ends: the logs, the cut-off, each estimator's start and end, the default.
    progress = [line.split("] ", 1)[1] for line in captured.err.splitlines() if line.startswith("jaxid fit: [")]
    assert progress[0] == "read 2 runs at 500 Hz, 2 joints: 3.0 s to fit (1 run), 3.0 s held out (1); 10 unknowns"
    assert progress[1] == "cut-off 6.4 Hz (given)" and progress[2] == "idim_ls: fitting"
    assert progress[3].startswith("idim_ls: ok in ") and "default estimate: idim_ls" in progress
    assert any(line.startswith("output_error: failed (") and "shorter than one segment" in line for line in progress)
    for name in (
        "parameters.csv",
        "validation.csv",
        "summary.csv",
        "consistency.csv",
        "lines.csv",
        "excitation.csv",
        "warnings.csv",
        "identified/idim_ls_bounded.toml",
        "identified/base_parameters.toml",
        "manifest.json",
    ):
        assert (out / name).exists(), name
    for fig in ("torque_trajectory_00.png", "angles_trajectory_00.png", "residual_spectra.png"):
        assert (out / "figures" / fig).exists(), fig
    params = pd.read_csv(out / "parameters.csv")
    assert set(params["estimator"]) == {"idim_ls", "idim_ls_bounded"} and len(params) == 22
    assert params["reference"].notna().all()
    off2 = params[params["parameter"] == "off2"]
    assert off2["fixed"].all() and (off2["value"] == 0).all() and (off2["std"] == 0).all()
    validation = pd.read_csv(out / "validation.csv")
    assert set(validation["model"]) == {"idim_ls", "idim_ls_bounded", "reference"}
    assert set(validation["role"]) == {"train", "test"}
    assert validation["torque_rmse"].between(0, 1).all() and validation["angle_rmse_0.5s"].notna().all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cutoff_hz"] == 6.4 and manifest["estimators"]["idim_ls"]["rank"] == 10
    assert "shorter than one segment" in manifest["failed_estimators"]["output_error"]
    assert len(manifest["unknowns"]) == 10 and manifest["fixed"] == {"off2": 0.0}
    # Three seconds of one single-joint run do not identify the arm, and the fit says so.
    warned = pd.read_csv(out / "warnings.csv")
    assert {"short_training", "inconsistent", "worse_than_reference", "not_exported"} <= set(warned["kind"])
    assert "idim_ls: physically inconsistent" in captured.err and manifest["warnings"]
    lines = pd.read_csv(out / "lines.csv")
    assert set(lines["harmonic"]) == {1, 2}
    # A second run refuses to overwrite without --overwrite.
    assert main(["fit", str(path), "--out", str(out)]) == 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("horizons_s = [0.5]", "horizons_s = [5.0]"),
            r"trajectory_\d\d: its usable part .* not longer than the longest",
        ),
        (
            ("[validation]", "[validation]\nband_hz = 300.0"),
            r"validation.band_hz = 300 Hz is not below 0.45/Δ = 225 Hz",
        ),
    ],
)
def test_refused_before_anything_is_written(tmp_path, capsys, edit, message):
    path = tmp_path / "fit.toml"
    path.write_text(TINY.replace(*edit))
    assert main(["fit", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two fits through the CLI
def test_a_kalman_filter_beside_the_others_equals_one_after_another(tmp_path, monkeypatch, capsys):
    """The EKF runs in the background (its scan holds one core) while IDIM-IV and output error (which fails here: its
    segment is longer than the window) run in turn; the numbers are those they have all run in turn, bit for bit,
    and the failure is the same status."""
    import jaxid.fit.runner as runner

    path = tmp_path / "fit.toml"
    use = 'use = ["idim_ls", "idim_iv", "ekf", "output_error"]'
    path.write_text(TINY.replace('use = ["idim_ls", "idim_ls_bounded", "output_error"]', use))
    assert main(["fit", str(path), "--out", str(tmp_path / "side"), "--no-figures"]) == 0
    side = capsys.readouterr().err
    assert side.index("ekf: fitting") < side.index("idim_iv: ok in")  # started before IDIM-IV ended
    assert all(line.count("jaxid fit:") == 1 for line in side.splitlines() if "jaxid fit:" in line)  # lines whole
    monkeypatch.setattr(runner, "KINDS", ())  # no filter in the background: all in turn
    assert main(["fit", str(path), "--out", str(tmp_path / "turn"), "--no-figures"]) == 0
    turn = capsys.readouterr().err
    assert turn.index("idim_iv: ok in") < turn.index("ekf: fitting")
    for name in ("parameters.csv", "validation.csv", "warnings.csv"):
        assert (tmp_path / "side" / name).read_bytes() == (tmp_path / "turn" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "side" / "manifest.json").read_text())
    assert set(manifest["estimators"]) == {"idim_ls", "idim_iv", "ekf"}
    assert "shorter than one segment" in manifest["failed_estimators"]["output_error"]
