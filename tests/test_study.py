"""The study runner end to end: shipped smoke settings, resume after a crash, trials that depend
on their own inputs only (not on the chunk size, the device count, other trials or settings),
overwrite protection, float64, and the CLI."""

import json
import math
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _env import child_env

import jaxid
import jaxid.study.runner as runner
from jaxid.cli import main
from jaxid.config import parse_experiment
from jaxid.experiment import run_experiment
from jaxid.study import RunExists

ROOT = Path(__file__).parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))


def tiny(chunk=3, trials=5, estimators=("equation_error", "ml"), extra_setting=False, sets=3, only=None):
    """Two settings; ``b`` has ``sets`` sampled parameter sets whose transient lengths differ
    (``discard_periods = "auto"`` per set: friction ±60 %). ``only``: keep just these settings
    (a trial's rows depend on its setting's name, not on the other settings)."""
    settings = {
        "a": {"scale": 0.25},
        "b": {
            "scale": 0.5,
            "sample": {"m2": {"dist": "uniform", "width": 0.1}, "fv1": {"dist": "uniform", "width": 0.6}},
            "parameter_sets": sets,
            "discard_periods": "auto",
        },
    }
    if extra_setting:  # inserted before the others: must not change them
        settings = {"c": {"scale": 0.3}, **settings}
    if only is not None:
        settings = {k: v for k, v in settings.items() if k in only}
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


def assert_same_trials(left, right, close=None):
    """The same rows bit for bit, except the columns named in ``close`` (column -> rtol)."""
    close = close or {}
    pd.testing.assert_frame_equal(left.drop(columns=list(close)), right.drop(columns=list(close)), check_exact=True)
    for column, rtol in close.items():
        np.testing.assert_allclose(right[column], left[column], rtol=rtol, atol=0, err_msg=column)


#: equation_error's reported std (from its covariance) moves by up to 2 ulp with the chunk's
#: width: XLA vectorises a reduction in it differently for a different vmap width. Its estimate
#: and every other column are exact.
CHUNK_WIDTH = {"std": 1e-15}

#: The sharded simulation runs a device's share of the parameter sets as one vmap: a share of
#: width 1 compiles to scalar code, ~1e-17 rad away from width 2 and up (jaxid/simulation/batch.py), and
#: the estimators carry that into the last digits of their estimates.
SHARE_WIDTH = {"estimate": 1e-9, "std": 1e-9}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    run_experiment(tiny(), out, progress=False)
    return out


def _linear_crlb_numpy(excitation, sample_step: float, periods: int, sigma: float, m=(5.0, 1.5), fv=(5.0, 2.0)):
    """√CRLB of (m1, m2, fv1, fv2) for the point-mass arm linearised hanging down, from the
    Fisher information written out by hand: the steady state ``q = irfft(H rfft(τ))`` of
    ``M q'' + F q' + K q = τ`` on the sample grid, its exact derivatives
    ``∂Q = −H (∂A) Q`` with ``A(ω) = K − ω² M + jω F``, and ``F = P Σ_n ∂qᵀ∂q / σ²``."""
    l1, l2, g = 1.0, 0.8, 9.81
    n = round(float(excitation.period) / sample_step)
    tau = np.asarray(excitation.torque(np.arange(n) * sample_step))  # (N, 2)
    omega = 2 * np.pi * np.fft.rfftfreq(n, d=sample_step)
    mass = lambda m1, m2: np.array(
        [
            [m1 * l1**2 + m2 * (l1**2 + l2**2 + 2 * l1 * l2), m2 * (l2**2 + l1 * l2)],
            [m2 * (l2**2 + l1 * l2), m2 * l2**2],
        ]
    )
    stiff = lambda m1, m2: g * np.array([[(m1 + m2) * l1 + m2 * l2, m2 * l2], [m2 * l2, m2 * l2]])
    a = stiff(*m) - omega[:, None, None] ** 2 * mass(*m) + 1j * omega[:, None, None] * np.diag(fv)
    h = np.linalg.inv(a)
    big_q = np.einsum("kij,kj->ki", h, np.fft.rfft(tau, axis=0))
    d_a = [
        stiff(1, 0) - omega[:, None, None] ** 2 * mass(1, 0),  # ∂A/∂m1 (A is linear in m)
        stiff(0, 1) - omega[:, None, None] ** 2 * mass(0, 1),
        1j * omega[:, None, None] * np.diag([1.0, 0.0]),
        1j * omega[:, None, None] * np.diag([0.0, 1.0]),
    ]
    jac = np.stack([np.fft.irfft(-np.einsum("kij,kjl,kl->ki", h, da, big_q), n, axis=0) for da in d_a], -1)
    fisher = periods * np.einsum("ncp,ncq->pq", jac, jac) / sigma**2
    return np.sqrt(np.diag(np.linalg.inv(fisher))), mass(*m), stiff(*m)


def test_linear_crlb_numpy_uses_the_arm_jaxid_linearises():
    """The hand-written M and K of the independent bound are the point-mass arm's (a wrong
    derivation would make the √CRLB check below compare two different arms)."""

    exc = runner.build_excitation(tiny().setting("a"), 5)
    _, mass, stiff = _linear_crlb_numpy(exc, 0.05, 1, 0.01)
    lin = jaxid.linearise(jaxid.point_mass())
    np.testing.assert_allclose(np.asarray(lin.mass), mass, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(lin.stiffness), stiff, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(lin.damping), np.diag([5.0, 2.0]), rtol=1e-14)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_summary_against_the_trial_rows_and_an_independent_bound(reference):
    """Every summary row against statistics counted from the per-trial table with plain Python,
    and √CRLB against the hand-written Fisher information of the linearised arm."""
    summary = pd.read_parquet(reference / "summary.parquet")
    trials = pd.read_parquet(reference / "trials.parquet")
    # 2 settings x 2 estimators x 4 parameters, 5 trials each
    assert len(summary) == 16 and len(trials) == 16 * 5
    exp = tiny()
    bound = {}
    for name in ("a", "b"):
        s = exp.setting(name)
        exc = runner.build_excitation(s, exp.seed)
        sqrt_crlb, _, _ = _linear_crlb_numpy(exc, s["sample_step"], s["measured_periods"], s["noise_level"])
        bound[name] = dict(zip(("m1", "m2", "fv1", "fv2"), sqrt_crlb, strict=True))
    for row in summary.itertuples():
        rows = [r for r in trials.itertuples() if (r.setting, r.estimator, r.parameter) == row[1:4]]
        ok = [r for r in rows if r.status == "ok"]
        errors = [r.estimate - r.truth for r in ok]
        n = len(ok)
        assert n == 5 and row.n_ok == n and row.failed == len(rows) - n == 0
        assert row.truth == pytest.approx(statistics.fmean(r.truth for r in rows), rel=1e-15)
        assert row.bias == pytest.approx(statistics.fmean(errors), rel=1e-12, abs=1e-15)
        assert row.std == pytest.approx(statistics.stdev(errors), rel=1e-12)
        assert row.rmse == pytest.approx(math.sqrt(sum(e * e for e in errors) / n), rel=1e-12)
        covered = sum(abs(r.estimate - r.truth) <= 1.96 * r.std for r in ok)
        assert row.coverage95 == covered / n
        assert row.sqrt_crlb == pytest.approx(bound[row.setting][row.parameter], rel=1e-9)
        assert row.std_over_sqrt_crlb == pytest.approx(
            statistics.stdev(errors) / bound[row.setting][row.parameter], rel=1e-9
        )
        # the nonlinear arm's bound exists (nonlinear simulator, physical unknowns) and is near the
        # linear one at these small amplitudes
        assert row.sqrt_crlb_nonlinear == pytest.approx(row.sqrt_crlb, rel=0.1)
    # coverage is not trivially 0 or 1 everywhere (the check above would then not see a wrong factor)
    assert 0 < summary.coverage95.mean() < 1
    # trial -> parameter set mapping: trial i uses set i mod 3; truth shared within a set
    b = trials[(trials.setting == "b") & (trials.estimator == "ml") & (trials.parameter == "m2")]
    assert list(b.param_set) == [0, 1, 2, 0, 1]
    assert b.truth.iloc[0] == b.truth.iloc[3] != b.truth.iloc[1]
    manifest = json.loads((reference / "manifest.json").read_text())
    # each set's transient from its own arm: the sampled friction gives the sets different lengths
    assert manifest["settings"]["a"]["discard_periods"] == 2
    assert isinstance(manifest["settings"]["b"]["discard_periods"], list)
    assert manifest["complete"] and manifest["versions"]["jax"]
    assert set(manifest["settings"]["a"]["compile_seconds"]) == {"equation_error", "ml"}
    assert (trials.status == "ok").all()


def test_summarise_counts_failures_and_uses_ok_trials_only():
    """Hand-computed answers on a small table: a failed trial is counted, never averaged."""
    from jaxid.report import summarise

    def rows(estimator, errors, stds, statuses):
        return pd.DataFrame(
            {
                "setting": "s",
                "trial": range(len(errors)),
                "estimator": estimator,
                "parameter": "m1",
                "truth": 2.0,
                "estimate": [2.0 + e for e in errors],
                "std": stds,
                "status": statuses,
                "seconds": 0.5,
            }
        )

    table = pd.concat(
        [
            rows("ml", [0.1, -0.3, 0.2, np.nan], [0.1, 0.1, 0.2, 0.1], ["ok", "ok", "ok", "nonfinite"]),
            rows("nonlinear_oe", [0.1, -0.3, 5.0], [0.1, 0.1, 0.1], ["ok", "ok", "sim_diverged"]),
            rows("rls", [1.0, 2.0], [0.1, 0.1], ["max_iterations", "sim_diverged"]),
        ]
    )
    out = summarise(table, {"s": {"m1": 0.5}}, {"s": {"m1": 0.25}}).set_index("estimator")
    ml, nl, rls = out.loc["ml"], out.loc["nonlinear_oe"], out.loc["rls"]
    assert (ml.n_ok, ml.failed, nl.n_ok, nl.failed, rls.n_ok, rls.failed) == (3, 1, 2, 1, 0, 2)
    assert ml.bias == pytest.approx(0.0, abs=1e-15)
    assert ml.rmse == pytest.approx(math.sqrt(0.14 / 3), rel=1e-14)
    assert ml["std"] == pytest.approx(math.sqrt(0.07), rel=1e-14)
    assert ml.coverage95 == pytest.approx(2 / 3)  # |-0.3| > 1.96 * 0.1
    assert ml.sqrt_crlb == 0.5 and ml.sqrt_crlb_nonlinear == 0.25
    assert ml.std_over_sqrt_crlb == pytest.approx(math.sqrt(0.07) / 0.5, rel=1e-14)  # the linear bound
    assert nl.std_over_sqrt_crlb == pytest.approx(math.sqrt(0.08) / 0.25, rel=1e-14)  # its nonlinear bound
    assert nl["mean"] == pytest.approx(1.9, rel=1e-14) and nl.coverage95 == 0.5
    assert ml.seconds_per_trial == 0.5
    assert np.isnan([rls.bias, rls.rmse, rls["std"], rls.coverage95, rls["mean"]]).all()


def _drawn(run_dir):
    """Redraw a run's figures, keeping each matplotlib figure (by file name) for inspection."""
    import jaxid.report.figures as plots

    figures = {}
    real = plots._save

    def keep(fig, path):
        figures[path.name] = fig
        return real(fig, path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_save", keep)
        paths = plots.make_figures(run_dir)
    assert sorted(p.name for p in paths) == sorted(figures)
    return figures


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_figures_show_the_summary(reference):
    """Each figure's axes and plotted data, read back from the matplotlib objects."""
    assert sorted(p.name for p in (reference / "figures").glob("*.png")) == ["estimators.png", "rmse_vs_scale.png"]
    trials = pd.read_parquet(reference / "trials.parquet")
    err = trials.assign(err=trials.estimate - trials.truth).groupby(["setting", "estimator", "parameter"])
    rmse = err.err.apply(lambda e: math.sqrt(float(np.mean(e**2))))
    bias = err.err.mean()
    truth = err.truth.mean()
    summary = pd.read_parquet(reference / "summary.parquet").set_index(["setting", "estimator", "parameter"])
    figures = _drawn(reference)
    assert sorted(figures) == ["estimators.png", "rmse_vs_scale.png"]

    # estimators: one panel per setting, one bar per (estimator, parameter): RMSE / |truth|
    axes = figures["estimators.png"].axes
    assert [ax.get_title() for ax in axes] == ["setting = a", "setting = b"]
    assert axes[0].get_ylabel() == "RMSE / |truth|" and all(ax.get_xlabel() == "parameter" for ax in axes)
    legend = [t.get_text() for t in figures["estimators.png"].legends[0].get_texts()]
    assert legend == ["equation_error", "ml"]  # the bar colours, in the order of ax.containers
    for ax, setting in zip(axes, "ab", strict=True):
        assert ax.get_yscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["m1", "m2", "fv1", "fv2"]
        heights = {}
        for container, estimator in zip(ax.containers, legend, strict=True):
            for bar, par in zip(container, ["m1", "m2", "fv1", "fv2"], strict=True):
                heights[estimator, par] = bar.get_height()
        for (estimator, par), h in heights.items():
            key = (setting, estimator, par)
            assert h == pytest.approx(rmse[key] / abs(truth[key]), rel=1e-12)

    # rmse_vs_scale: one panel per parameter; per estimator RMSE and |bias| against the scale,
    # and the two √CRLB curves
    axes = figures["rmse_vs_scale.png"].axes
    assert [ax.get_title() for ax in axes] == ["m1", "m2", "fv1", "fv2"]
    assert all(ax.get_xlabel() == "scale" for ax in axes) and axes[0].get_ylabel() == "error"
    for ax in axes:
        par = ax.get_title()
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert sorted(lines) == sorted(
            [
                "equation_error RMSE",
                "equation_error |bias|",
                "ml RMSE",
                "ml |bias|",
                "√CRLB (linear model)",
                "√CRLB (nonlinear arm)",
            ]
        )
        for label, line in lines.items():
            np.testing.assert_array_equal(line.get_xdata(), [0.25, 0.5])
            if label.startswith("√CRLB"):
                column = "sqrt_crlb" if "linear model" in label else "sqrt_crlb_nonlinear"
                want = [summary.loc[(s, "ml", par), column] for s in "ab"]
            else:
                estimator, what = label.split()
                want = [rmse[s, estimator, par] if what == "RMSE" else abs(bias[s, estimator, par]) for s in "ab"]
            np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    assert axes[-1].get_legend() is not None


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_chunk_size_does_not_change_results(reference, tmp_path):
    run_experiment(tiny(chunk=5), tmp_path / "run", progress=False, figures=False)
    assert_same_trials(trials_table(reference), trials_table(tmp_path / "run"), CHUNK_WIDTH)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_added_trials_and_settings_leave_existing_rows_unchanged(reference, tmp_path):
    """A trial's row is a function of (seed, setting, trial) and its own parameters only."""
    # (chunks of 3 and the reference's line layout: the compiled estimators are the reference's)
    run_experiment(tiny(trials=6, extra_setting=True), tmp_path / "run", progress=False, figures=False)
    more = trials_table(tmp_path / "run")
    assert set(more.setting) == {"a", "b", "c"} and more.trial.max() == 5
    old = more[(more.setting != "c") & (more.trial < 5)].reset_index(drop=True)
    assert_same_trials(trials_table(reference), old, CHUNK_WIDTH)


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


_KILL_SCRIPT = """
import sys, time
from pathlib import Path
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[3])
import jaxid
import jaxid.study.runner as runner
from test_study import tiny
from jaxid.experiment import run_experiment
real, calls = runner._run_chunk, []
def run_chunk(exp, plan, index, cache):
    calls.append(index)
    if len(calls) == 4:  # inside setting b's second chunk: say so, then wait for the kill
        Path(sys.argv[2]).write_text(plan.setting.name + str(index))
        time.sleep(600)
    return real(exp, plan, index, cache)
runner._run_chunk = run_chunk
run_experiment(tiny(), sys.argv[1], progress=False, figures=False)
"""


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_sigkilled_run_resumes_to_identical_table(reference, tmp_path, monkeypatch):
    """A process killed with SIGKILL in the middle of a chunk (setting a finished, b half done):
    the same command finishes the run, redoes no finished chunk, and gives the uninterrupted table."""
    out, marker = tmp_path / "run", tmp_path / "in_chunk"
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(out), str(marker), str(Path(__file__).parent)], env=env
    )
    try:
        for _ in range(6000):
            if (marker.exists() and marker.read_text()) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.read_text() == "b1"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    finished = sorted(p.relative_to(out).as_posix() for p in (out / "chunks").glob("*/*"))
    assert finished == [
        "chunks/a/00000.parquet",
        "chunks/a/00001.parquet",
        "chunks/a/extras.json",
        "chunks/b/00000.parquet",
    ]
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    assert not (out / "trials.parquet").exists()
    written = {p: p.stat().st_mtime_ns for p in (out / "chunks").glob("*/*")}
    # the same command again: only the killed chunk is run
    real, calls = runner._run_chunk, []
    monkeypatch.setattr(
        runner,
        "_run_chunk",
        lambda exp, plan, i, cache: calls.append((plan.setting.name, i)) or real(exp, plan, i, cache),
    )
    run_experiment(tiny(), out, progress=False, figures=False)
    assert calls == [("b", 1)]
    assert {p: p.stat().st_mtime_ns for p in written} == written
    assert json.loads((out / "manifest.json").read_text())["complete"]
    assert_same_trials(trials_table(reference), trials_table(out))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_existing_runs_are_protected(reference, tmp_path):
    with pytest.raises(RunExists, match="--overwrite"):
        run_experiment(tiny(), reference, progress=False)
    other = tiny(trials=4)
    out = tmp_path / "partial"
    (out / "chunks").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"config_digest": "something-else", "complete": False}))
    with pytest.raises(RunExists, match="different configuration"):
        run_experiment(other, out, progress=False)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_report_rebuilds_from_tables(reference, capsys):
    """`jaxid report` rebuilds the summary tables and figures the run wrote, identically."""
    original = pd.read_csv(reference / "summary.csv")
    original_parquet = pd.read_parquet(reference / "summary.parquet")
    markdown = (reference / "summary.md").read_text()
    for name in ("summary.csv", "summary.parquet", "summary.md"):
        (reference / name).unlink()
    shutil.rmtree(reference / "figures")
    assert main(["report", str(reference)]) == 0
    pd.testing.assert_frame_equal(original, pd.read_csv(reference / "summary.csv"), check_exact=True)
    pd.testing.assert_frame_equal(original_parquet, pd.read_parquet(reference / "summary.parquet"), check_exact=True)
    assert (reference / "summary.md").read_text() == markdown
    assert sorted(p.name for p in (reference / "figures").glob("*.png")) == ["estimators.png", "rmse_vs_scale.png"]
    out = capsys.readouterr().out
    assert markdown in out and f"Rebuilt tables and 2 figure(s) in {reference}/" in out
    assert main(["report", str(reference.parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxid report: error:") and str(reference.parent) in err and "\n" not in err


def check_smoke_run(out: Path, exp, setting: str = "smoke") -> None:
    """A finished run of one setting: every estimator x unknown x trial row ok, the summary
    counting them, the manifest complete, a figure for each listed plot that has its data."""
    s = exp.setting(setting)
    trials = pd.read_parquet(out / "trials.parquet")
    summary = pd.read_csv(out / "summary.csv")
    assert list(trials.status.unique()) == ["ok"]
    assert len(trials) == s.trials * len(s["estimators"]) * len(s["unknowns"])
    assert sorted(zip(summary.estimator, summary.parameter, strict=True)) == sorted(
        (e, u) for e in s["estimators"] for u in s["unknowns"]
    )
    assert (summary.n_ok == s.trials).all() and (summary.failed == 0).all()
    assert np.isfinite(summary[["rmse", "bias", "sqrt_crlb"]].to_numpy()).all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and list(manifest["settings"]) == [setting]
    drawn = {p.stem for p in (out / "figures").glob("*.png")}
    for plot in exp.plots:
        if plot == "convergence" and not (out / "history.csv").exists():
            continue  # no recursive estimator in the setting
        assert any(name == plot or name.startswith(plot + "_") for name in drawn), (plot, drawn)


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_two_processes_give_the_one_process_table(reference, tmp_path):
    """The same experiment under jax.distributed (two processes, coordinator on localhost).

    equation_error on setting ``b`` only (three parameter sets with their own transients, the
    last chunk padded): what is tested is how sets and trials are split over the processes and
    gathered; ml or setting ``a`` would only add compiles, and process 1 compiles everything
    (its device id is in the cache key, so the persistent cache never serves it)."""
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
run_experiment(tiny(estimators=("equation_error",), only=("b",)), sys.argv[3], progress=False, figures=False)
"""
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "mp"
    env = child_env()
    args = lambda i: [sys.executable, "-c", script, f"localhost:{port}", str(i), str(out), str(Path(__file__).parent)]
    procs = [subprocess.Popen(args(i), env=env) for i in (0, 1)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device_count"] == 2 and manifest["complete"]
    ref = trials_table(reference)
    ref = ref[(ref.estimator == "equation_error") & (ref.setting == "b")].reset_index(drop=True)
    assert_same_trials(ref, trials_table(out), {**CHUNK_WIDTH, **SHARE_WIDTH})


def test_float32_is_refused_with_a_one_line_message(tmp_path):
    """The public entry points refuse to run without float64 (the sincos range reduction and the
    estimators' tolerances assume it)."""
    import jax

    from jaxid.estimate import get_estimator

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
