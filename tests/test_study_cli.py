"""The shipped experiments' smoke settings through the CLI, the CLI's errors, and one 4-device
study against the one-device rows of every estimator family (which shares the baselines smoke
run's compiled estimators, so it lives in this file)."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _env import child_env
from test_study import SHARE_WIDTH, assert_same_trials, check_smoke_run, trials_table

import jaxid
from jaxid.cli import main
from jaxid.config import load_experiment, parse_experiment
from jaxid.experiment import run_experiment

ROOT = Path(__file__).parent.parent
# Studies only: the benchmarks' (kind = "benchmark") smoke settings run in test_benchmark.py.
EXPERIMENTS = sorted(p for p in (ROOT / "experiments").glob("*.toml") if 'kind = "benchmark"' not in p.read_text())


#: Shipped studies whose smoke setting another file runs through the CLI with these same checks
#: (``main`` returns 0, "Results in", ``check_smoke_run``) and more: paper.toml by test_readme.py, as
#: the README's main command; own_arm.toml by test_arm_description.py, which also checks the arm it
#: records. Running them here too ran the same experiment twice (own_arm: ~23 s cold, ~11 s warm).
RUN_ELSEWHERE = {"paper": "test_readme.py", "own_arm": "test_arm_description.py"}


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if p.stem not in RUN_ELSEWHERE], ids=lambda p: p.stem)
def test_shipped_experiment_smoke_runs_end_to_end(path, tmp_path, capsys):
    out = tmp_path / path.stem
    assert main(["run", str(path), "--settings", "smoke", "--out", str(out), "--quiet"]) == 0
    check_smoke_run(out, load_experiment(path))
    assert f"Results in {out}" in capsys.readouterr().out


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and "missing.toml" in err and "\n" not in err
    assert main(["run", str(EXPERIMENTS[0]), "--settings", "nope", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "No setting 'nope'" in err and "\n" not in err
    assert not (tmp_path / "x").exists()
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(path.stem in listed for path in EXPERIMENTS)


def families(chunk=2, estimators=None):
    """baselines.toml's smoke setting (an estimator of every family: frequency domain linear and
    nonlinear, inverse-dynamics regressor recursive / least squares / instrumental variable,
    extended and unscented Kalman filters; or only ``estimators``) on eight trials of four
    sampled parameter sets. Two trials per chunk, as in the smoke run, so that the estimators'
    compiled functions are shared with it."""
    raw = tomllib.loads((ROOT / "experiments" / "baselines.toml").read_text())
    smoke = raw["settings"]["smoke"]
    raw["settings"] = {
        "smoke": {
            **smoke,
            "trials": 8,
            "sample": {"m2": {"dist": "uniform", "width": 0.1}, "fv1": {"dist": "uniform", "width": 0.6}},
            "parameter_sets": 4,
            "discard_periods": "auto",
        }
    }
    raw["experiment"].update(chunk=chunk, plots=[])
    if estimators is not None:
        raw["defaults"]["estimators"] = list(estimators)
    return parse_experiment(raw)


#: One estimator per way the runner feeds records to estimators: the spectrum (equation error),
#: the filtered record (IDIM-LS) and the raw record (EKF). Not the others: they take the same
#: inputs as one of these, and their compiles (a process with another device count cannot load
#: them from the persistent cache: its topology is in the key) would add nothing the subprocess
#: checks: every estimator runs on one device there as here.
FOUR_DEVICE_ESTIMATORS = ("equation_error", "idim_ls", "ekf")


_DEVICE_SCRIPT = """
import os, sys
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[2])
from test_study_cli import FOUR_DEVICE_ESTIMATORS, families
from jaxid.experiment import run_experiment
from jaxid.study.compiled import _EXECUTABLES
assert len(jax.devices()) == 4
run_experiment(families(estimators=FOUR_DEVICE_ESTIMATORS), sys.argv[1], progress=False, figures=False)
# Every estimator was compiled for inputs on one device (the records gathered off the 4 devices).
assert len(_EXECUTABLES) == len(FOUR_DEVICE_ESTIMATORS), list(_EXECUTABLES)
shardings = {leaf[2] for sig in _EXECUTABLES for leaf in sig[2]}
assert all(s.startswith("SingleDeviceSharding(device=CpuDevice(id=0)") for s in shardings), shardings
"""


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_four_devices_give_the_one_device_rows(tmp_path):
    """Each chunk's two parameter sets (with their own transients) are simulated in one batch
    sharded over 4 host devices; the records are gathered onto one device and an estimator of each
    input path runs on them: the rows equal a one-device run's (of every family) exactly."""
    one = run_experiment(families(), tmp_path / "dev1", progress=False, figures=False)
    out = tmp_path / "dev4"
    env = child_env()
    subprocess.run(
        [sys.executable, "-c", _DEVICE_SCRIPT, str(out), str(Path(__file__).parent)], check=True, env=env, timeout=900
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device_count"] == 4 and len(manifest["settings"]["smoke"]["discard_periods"]) > 1
    ref = trials_table(one)
    assert sorted(set(ref.estimator)) == sorted(set(jaxid.names_for("record")) - {"paper"})
    assert ref.param_set.nunique() == 4 and (ref.status == "ok").all()
    ref = ref[ref.estimator.isin(FOUR_DEVICE_ESTIMATORS)].reset_index(drop=True)
    assert_same_trials(ref, trials_table(out), SHARE_WIDTH)
