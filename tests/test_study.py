"""The study runner end to end: shipped smoke settings, resume after a crash, chunk- and
device-independence, overwrite protection, and the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxid.study as study
from jaxid.cli import main
from jaxid.config import load_experiment, parse_experiment
from jaxid.study import RunExists, run_experiment

ROOT = Path(__file__).parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))


def tiny(chunk=3, trials=5, estimators=("equation_error", "ml")):
    return parse_experiment(
        {
            "experiment": {
                "name": "tiny",
                "seed": 5,
                "trials": trials,
                "chunk": chunk,
                "plots": ["estimators", "rmse_vs_scale"],
            },
            "defaults": {
                "unknowns": ["m1", "m2", "fv1", "fv2"],
                "lines": "split",
                "sample_step": 0.05,
                "discard_periods": 2,
                "noise": "gaussian",
                "noise_level": 0.01,
                "estimators": list(estimators),
            },
            "settings": {
                "a": {"scale": 0.25},
                "b": {"scale": 0.5, "sample": {"m2": {"dist": "uniform", "width": 0.1}}, "parameter_sets": 2},
            },
        }
    )


def trials_table(run_dir):
    df = pd.read_parquet(Path(run_dir) / "trials.parquet")
    return (
        df.drop(columns=["seconds"]).sort_values(["setting", "estimator", "parameter", "trial"]).reset_index(drop=True)
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    run_experiment(tiny(), out, progress=False)
    return out


def test_run_writes_tables_and_statistics(reference):
    summary = pd.read_csv(reference / "summary.csv")
    trials = trials_table(reference)
    assert set(summary.columns) >= {
        "truth",
        "bias",
        "std",
        "rmse",
        "sqrt_crlb",
        "std_over_sqrt_crlb",
        "coverage95",
        "failed",
        "seconds_per_trial",
    }
    # 2 settings x 2 estimators x 4 parameters, 5 trials each
    assert len(summary) == 16 and len(trials) == 16 * 5
    # the summary is recomputed from the trial rows: check one group by hand
    g = trials[(trials.setting == "a") & (trials.estimator == "ml") & (trials.parameter == "m2")]
    err = g.estimate - g.truth
    row = summary[(summary.setting == "a") & (summary.estimator == "ml") & (summary.parameter == "m2")].iloc[0]
    assert row.rmse == pytest.approx(float(np.sqrt(np.mean(err**2))))
    assert row.bias == pytest.approx(float(err.mean()))
    # trial -> parameter set mapping: 5 trials over 2 sets -> 3 + 2 draws, truth shared within a set
    b = trials[(trials.setting == "b") & (trials.estimator == "ml") & (trials.parameter == "m2")]
    assert list(b.param_set) == [0, 0, 0, 1, 1]
    assert b.truth.iloc[0] == b.truth.iloc[2] != b.truth.iloc[3]
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["complete"] and manifest["versions"]["jax"]
    assert "compile_seconds" in manifest["settings"]["a"]
    assert (reference / "figures" / "estimators.png").exists()
    assert (trials.status == "ok").all()


def test_chunk_size_does_not_change_results(reference, tmp_path):
    run_experiment(tiny(chunk=5), tmp_path / "run", progress=False, figures=False)
    pd.testing.assert_frame_equal(trials_table(reference), trials_table(tmp_path / "run"))


def test_killed_run_resumes_to_identical_table(reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    real = study._run_chunk
    calls = []

    def crash_on_second(exp, plan, index, cache):
        calls.append((plan.setting.name, index))
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill")
        return real(exp, plan, index, cache)

    monkeypatch.setattr(study, "_run_chunk", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(tiny(), out, progress=False, figures=False)
    done = sorted(p.name for p in (out / "chunks" / "a").glob("0*.parquet"))
    assert done == ["00000.parquet"]
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    monkeypatch.setattr(study, "_run_chunk", real)
    # rerunning the same command finishes without redoing chunk 0
    before = (out / "chunks" / "a" / "00000.parquet").stat().st_mtime_ns
    run_experiment(tiny(), out, progress=False, figures=False)
    assert (out / "chunks" / "a" / "00000.parquet").stat().st_mtime_ns == before
    pd.testing.assert_frame_equal(trials_table(reference), trials_table(out))


def test_existing_runs_are_protected(reference, tmp_path):
    with pytest.raises(RunExists, match="--overwrite"):
        run_experiment(tiny(), reference, progress=False)
    other = tiny(trials=4)
    out = tmp_path / "partial"
    (out / "chunks").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"config_digest": "something-else", "complete": False}))
    with pytest.raises(RunExists, match="different configuration"):
        run_experiment(other, out, progress=False)


def test_report_rebuilds_from_tables(reference, capsys):
    (reference / "summary.csv").unlink()
    assert main(["report", str(reference)]) == 0
    assert (reference / "summary.csv").exists()
    assert "rmse" in capsys.readouterr().out
    assert main(["report", str(reference.parent)]) == 2


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_shipped_experiment_smoke_runs_end_to_end(path, tmp_path, capsys):
    out = tmp_path / path.stem
    assert main(["run", str(path), "--settings", "smoke", "--out", str(out), "--quiet"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    exp = load_experiment(path)
    assert set(summary.estimator) == set(exp.setting("smoke")["estimators"])
    assert "Results in" in capsys.readouterr().out


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["run", str(EXPERIMENTS[0]), "--settings", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "No setting 'nope'" in capsys.readouterr().err
    assert main(["list"]) == 0
    assert "paper" in capsys.readouterr().out


_DEVICE_SCRIPT = """
import os, sys, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=" + sys.argv[1]
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[3])
from test_study import tiny
from jaxid.study import run_experiment
assert len(jax.devices()) == int(sys.argv[1])
run_experiment(tiny(estimators=("equation_error",)), sys.argv[2], progress=False, figures=False)
"""


def test_one_and_four_devices_give_identical_tables(tmp_path):
    outs = []
    for n in (1, 4):
        out = tmp_path / f"dev{n}"
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        subprocess.run(
            [sys.executable, "-c", _DEVICE_SCRIPT, str(n), str(out), str(Path(__file__).parent)],
            check=True,
            env=env,
            timeout=600,
        )
        assert json.loads((out / "manifest.json").read_text())["device_count"] == n
        outs.append(trials_table(out))
    pd.testing.assert_frame_equal(outs[0], outs[1])


def test_two_processes_give_the_one_process_table(reference, tmp_path):
    """The same experiment under jax.distributed (two processes, coordinator on localhost)."""
    import socket

    script = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
sys.path.insert(0, sys.argv[4])
from test_study import tiny
from jaxid.study import run_experiment
assert jax.process_count() == 2 and len(jax.devices()) == 2
run_experiment(tiny(), sys.argv[3], progress=False, figures=False)
"""
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "mp"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = lambda i: [sys.executable, "-c", script, f"localhost:{port}", str(i), str(out), str(Path(__file__).parent)]
    procs = [subprocess.Popen(args(i), env=env) for i in (0, 1)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device_count"] == 2 and manifest["complete"]
    pd.testing.assert_frame_equal(trials_table(reference), trials_table(out))
