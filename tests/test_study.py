"""The study runner end to end: shipped smoke settings, resume after a crash, trials that depend
on their own inputs only (not on the chunk size, the device count, other trials or settings),
overwrite protection, float64, and the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxid.study.runner as runner
from jaxid.cli import main
from jaxid.config import load_experiment, parse_experiment
from jaxid.experiment import run_experiment
from jaxid.study import RunExists

ROOT = Path(__file__).parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))


def tiny(chunk=3, trials=5, estimators=("equation_error", "ml"), extra_setting=False):
    """Two settings; ``b`` has three sampled parameter sets whose transient lengths differ
    (``discard_periods = "auto"`` per set: friction ±60 %)."""
    settings = {
        "a": {"scale": 0.25},
        "b": {
            "scale": 0.5,
            "sample": {"m2": {"dist": "uniform", "width": 0.1}, "fv1": {"dist": "uniform", "width": 0.6}},
            "parameter_sets": 3,
            "discard_periods": "auto",
        },
    }
    if extra_setting:  # inserted before the others: must not change them
        settings = {"c": {"scale": 0.3, "lines": "same"}, **settings}
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
            "settings": settings,
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
    # trial -> parameter set mapping: trial i uses set i mod 3; truth shared within a set
    b = trials[(trials.setting == "b") & (trials.estimator == "ml") & (trials.parameter == "m2")]
    assert list(b.param_set) == [0, 1, 2, 0, 1]
    assert b.truth.iloc[0] == b.truth.iloc[3] != b.truth.iloc[1]
    manifest = json.loads((reference / "manifest.json").read_text())
    # each set's transient from its own arm: the sampled friction gives the sets different lengths
    assert manifest["settings"]["a"]["discard_periods"] == 2
    assert isinstance(manifest["settings"]["b"]["discard_periods"], list)
    assert manifest["complete"] and manifest["versions"]["jax"]
    assert "compile_seconds" in manifest["settings"]["a"]
    assert (reference / "figures" / "estimators.png").exists()
    assert (trials.status == "ok").all()


def test_chunk_size_does_not_change_results(reference, tmp_path):
    run_experiment(tiny(chunk=5), tmp_path / "run", progress=False, figures=False)
    pd.testing.assert_frame_equal(trials_table(reference), trials_table(tmp_path / "run"))


def test_added_trials_and_settings_leave_existing_rows_unchanged(reference, tmp_path):
    """A trial's row is a function of (seed, setting, trial) and its own parameters only."""
    run_experiment(tiny(trials=7, extra_setting=True), tmp_path / "run", progress=False, figures=False)
    more = trials_table(tmp_path / "run")
    assert set(more.setting) == {"a", "b", "c"} and more.trial.max() == 6
    old = more[(more.setting != "c") & (more.trial < 5)].reset_index(drop=True)
    pd.testing.assert_frame_equal(trials_table(reference), old)


def test_parameter_sets_keyed_by_index_and_name():
    import jax

    from jaxid.study import build_arm, parameter_set_of, sample_arms, set_discard_periods, set_key
    from jaxid.study.sampling import set_keys

    assert list(parameter_set_of(np.arange(7), 3)) == [0, 1, 2, 0, 1, 2, 0]
    one = tiny().setting("b")
    nominal = build_arm(one)
    keys = set_keys(5, "b", np.arange(4))
    arms = sample_arms(one, nominal, keys)
    # set i's parameters from its own key: drawing set 2 alone gives the same arm
    alone = sample_arms(one, nominal, set_keys(5, "b", np.asarray([2])))
    np.testing.assert_array_equal(jax.random.key_data(set_key(5, "b", 2)), jax.random.key_data(keys[2]))
    np.testing.assert_array_equal(np.asarray(arms.masses[2]), np.asarray(alone.masses[0]))
    # a sampled parameter's draws do not depend on which other parameters are sampled
    only_m2 = parse_experiment(
        {
            "experiment": {"name": "t"},
            "settings": {"b": {"sample": {"m2": {"dist": "uniform", "width": 0.1}}, "parameter_sets": 3}},
        }
    ).setting("b")
    np.testing.assert_array_equal(np.asarray(sample_arms(only_m2, nominal, keys).masses), np.asarray(arms.masses))
    # each set's transient from its own arm alone
    discard = set_discard_periods(one, arms, runner.build_excitation(one, 5))
    single = [
        set_discard_periods(one, jax.tree.map(lambda x, i=i: x[i : i + 1], arms), runner.build_excitation(one, 5))[0]
        for i in range(4)
    ]
    assert list(discard) == single


def test_killed_run_resumes_to_identical_table(reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    real = runner._run_chunk
    calls = []

    def crash_on_second(exp, plan, index, cache):
        calls.append((plan.setting.name, index))
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill")
        return real(exp, plan, index, cache)

    monkeypatch.setattr(runner, "_run_chunk", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(tiny(), out, progress=False, figures=False)
    done = sorted(p.name for p in (out / "chunks" / "a").glob("0*.parquet"))
    assert done == ["00000.parquet"]
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    monkeypatch.setattr(runner, "_run_chunk", real)
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
from jaxid.experiment import run_experiment
assert len(jax.devices()) == int(sys.argv[1])
run_experiment(tiny(chunk=int(sys.argv[4]), estimators=("equation_error",)), sys.argv[2], progress=False, figures=False)
"""


def test_four_devices_and_another_chunk_size_give_the_one_device_rows(reference, tmp_path):
    """Several parameter sets with their own transients, sharded over 4 host devices in chunks
    of 2: the rows equal the one-device, chunk-3 reference."""
    out = tmp_path / "dev4"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run(
        [sys.executable, "-c", _DEVICE_SCRIPT, "4", str(out), str(Path(__file__).parent), "2"],
        check=True,
        env=env,
        timeout=600,
    )
    assert json.loads((out / "manifest.json").read_text())["device_count"] == 4
    ref = trials_table(reference)
    ref = ref[ref.estimator == "equation_error"].reset_index(drop=True)
    pd.testing.assert_frame_equal(ref, trials_table(out))


def test_two_processes_give_the_one_process_table(reference, tmp_path):
    """The same experiment under jax.distributed (two processes, coordinator on localhost).

    equation_error only, as with four devices: what is tested is how trials are split over the
    processes and gathered, and ml would only add its compile in both processes."""
    import socket

    script = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
sys.path.insert(0, sys.argv[4])
from test_study import tiny
from jaxid.experiment import run_experiment
assert jax.process_count() == 2 and len(jax.devices()) == 2
run_experiment(tiny(estimators=("equation_error",)), sys.argv[3], progress=False, figures=False)
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
    ref = trials_table(reference)
    ref = ref[ref.estimator == "equation_error"].reset_index(drop=True)
    pd.testing.assert_frame_equal(ref, trials_table(out))


def test_float32_is_refused_with_a_one_line_message(tmp_path):
    """The public entry points refuse to run without float64 (the sincos range reduction and the
    estimators' tolerances assume it)."""
    import jax

    import jaxid
    from jaxid.estimators import get_estimator

    arm, exc = jaxid.point_mass(), jaxid.table2("split", 0.25)
    arms = jax.tree.map(lambda x: x[None], arm)
    record = jaxid.simulate(arm, exc, sample_step=0.5, discard_periods=0)
    calls = {
        "run_experiment": lambda: run_experiment(tiny(), tmp_path / "f32", progress=False),
        "simulate": lambda: jaxid.simulate(arm, exc, sample_step=0.5),
        "simulate_batch": lambda: jaxid.simulate_batch(arms, exc, sample_step=0.5),
        "fourier_coefficients": lambda: jaxid.fourier_coefficients(record, exc),
        "linear_crlb": lambda: jaxid.linear_crlb(arm, exc, ("m1",), noise_std=0.01),
        "ml": lambda: get_estimator("ml")(record, exc, arm, unknowns=("m1",)),
    }
    jax.config.update("jax_enable_x64", False)
    try:
        for who, call in calls.items():
            with pytest.raises(ValueError, match="jax_enable_x64") as err:
                call()
            assert who in str(err.value) and "\n" not in str(err.value)
    finally:
        jax.config.update("jax_enable_x64", True)
    assert not (tmp_path / "f32").exists()
