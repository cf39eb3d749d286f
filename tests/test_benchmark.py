"""The N-joint benchmark (``[experiment] kind = "benchmark"``): end to end through the CLI, resume
after an interruption, one-line config errors before anything is written, the Cramér–Rao bound
against the Monte Carlo spread of IDIM-LS on exact states, a diverging trial as a status.

Every run uses the shipped two-joint URDF (``data/robots/two_link.urdf``) with the same period,
sample step and harmonics, so the closed loop and the estimators compile once for the whole file
(the five tests that simulate are marked slow: the file takes ~30 s on two idle cores, compiles
included, ~2 min when the cores are shared);
the shipped UR5 and Panda benchmarks are checked for parsing and a smoke setting here, and their
results are committed under ``results/benchmark_<arm>/``.
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxid
from jaxid.benchmark import base_parameter_crlb, load_benchmark, run_benchmark
from jaxid.benchmark import runner as benchmark_runner
from jaxid.cli import main
from jaxid.config import ConfigError
from jaxid.excitation.fourier import random_fourier_trajectory
from jaxid.experiment import load_config, run_experiment
from jaxid.model.urdf import load_arm

ROOT = Path(__file__).resolve().parent.parent
TWO_LINK = ROOT / "data" / "robots" / "two_link.urdf"
SHIPPED = [ROOT / "experiments" / "benchmark_ur5.toml", ROOT / "experiments" / "benchmark_panda.toml"]

CONFIG = """
[experiment]
kind = "benchmark"
name = "tiny"
seed = 3
trials = {trials}
chunk = {chunk}

[arm]
urdf = "{urdf}"

[defaults]
period = 4.0
harmonics = 3
sample_step = 0.002
torque_std = 0.02
estimators = {estimators}

[settings.smoke]
{extra}
"""

ESTIMATORS = '["idim_ls", "idim_iv", "rls", "idim_ls_consistent"]'
#: The held-out torque RMSE every estimator must reach, relative to the held-out torque's RMS (the
#: estimates are biased by the filtering of closed-loop data, ~1 % here; the truth's own is 1e-14).
HELDOUT_RELATIVE = 0.03


def write_config(path: Path, *, trials=3, chunk=2, estimators=ESTIMATORS, extra="", urdf=TWO_LINK) -> Path:
    path.write_text(CONFIG.format(trials=trials, chunk=chunk, estimators=estimators, extra=extra, urdf=urdf))
    return path


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One CLI run of the tiny benchmark (3 trials, chunks of 2): its directory and what it printed."""
    root = tmp_path_factory.mktemp("bench")
    config = write_config(root / "tiny.toml")
    out = root / "run"
    code = main(["run", str(config), "--out", str(out), "--quiet"])
    return out, code


@pytest.mark.slow
def test_smoke_through_the_cli(smoke_run):
    out, code = smoke_run
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["settings"]["smoke"]["chunks"] == 2
    trials = pd.read_parquet(out / "trials.parquet")
    names = json.loads((out / "chunks" / "smoke" / "extras.json").read_text())["labels"]
    assert set(trials["estimator"]) == {"idim_ls", "idim_iv", "rls", "idim_ls_consistent"}
    assert len(trials) == 3 * 4 * len(names) and set(trials["trial"]) == {0, 1, 2}
    assert (trials["status"] == "ok").all()
    assert np.isfinite(trials[["estimate", "std", "heldout_rmse"]].to_numpy()).all()
    summary = pd.read_csv(out / "summary.csv")
    assert np.isfinite(summary["sqrt_crlb"]).all() and (summary["sqrt_crlb"] > 0).all()
    # The estimators identify the arm: the held-out torque is predicted to a small fraction of its size.
    table = pd.read_csv(out / "estimators.csv")
    extras = json.loads((out / "chunks" / "smoke" / "extras.json").read_text())
    assert (table["ok"] == 3).all() and (table["heldout_truth"] < 1e-9).all()
    assert (table["heldout_rmse"] < HELDOUT_RELATIVE * extras["validation_torque_rms"]).all(), table
    for f in ("summary.md", "estimators.md", "figures/rmse_over_crlb_smoke.png", "figures/heldout_torque.png"):
        assert (out / f).exists(), f


@pytest.mark.slow
def test_report_rebuilds_the_tables(smoke_run, capsys):
    out, _ = smoke_run
    before = pd.read_csv(out / "estimators.csv")
    assert main(["report", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "estimators.csv"), before)
    assert "Rebuilt tables" in capsys.readouterr().out


@pytest.mark.slow
def test_interrupted_run_resumes_without_redoing_chunks(tmp_path, smoke_run, monkeypatch):
    """A run killed in its second chunk keeps its first chunk; the same command finishes the rest and
    gives the uninterrupted run's rows (a trial depends on its own key only)."""
    config = write_config(tmp_path / "tiny.toml")
    exp = load_config(config)
    out = tmp_path / "run"
    real = benchmark_runner.run_chunk
    calls = []

    def interrupted(plan, run, trials):
        calls.extend(int(t) for t in trials)
        if 2 in calls:
            raise KeyboardInterrupt
        return real(plan, run, trials)

    monkeypatch.setattr(benchmark_runner, "run_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(exp, out, progress=False)
    first = out / "chunks" / "smoke" / "00000.parquet"
    assert first.exists() and not (out / "chunks" / "smoke" / "00001.parquet").exists()
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    stamp = first.stat().st_mtime_ns
    calls.clear()
    monkeypatch.setattr(benchmark_runner, "run_chunk", lambda *a: (calls.extend(int(t) for t in a[2]), real(*a))[1])
    run_experiment(exp, out, progress=False, figures=False)
    assert calls == [2], "only the missing chunk's trial runs again"
    assert first.stat().st_mtime_ns == stamp
    resumed = pd.read_parquet(out / "trials.parquet")
    reference = pd.read_parquet(smoke_run[0] / "trials.parquet")
    timing = ["seconds", "cpu_seconds"]
    pd.testing.assert_frame_equal(resumed.drop(columns=timing), reference.drop(columns=timing))


@pytest.mark.parametrize(
    "change, words",
    [
        ({"extra": "harmonic = 3"}, ["unknown key 'harmonic'", "Did you mean 'harmonics'"]),
        ({"estimators": '["idim_ls", "kalman"]'}, ["unknown estimator 'kalman'", "idim_iv"]),
        ({"urdf": "missing/arm.urdf"}, ["arm.urdf", "does not exist"]),
        ({"extra": "controller = 'pid'"}, ["controller", "'pd'"]),
        ({"extra": "sample_step = 0.003"}, ["sample_step", "does not divide"]),
        ({"extra": "true_coulomb = [1.0, 2.0, 3.0]"}, ["true_coulomb", "list of 2"]),
        ({"extra": "estimator_trials = {ekf = 2}"}, ["estimator_trials.ekf", "not among"]),
        ({"extra": "estimator_options = {ekf = {initial_relative_std = 0.1}}"}, ["estimator_options.ekf", "not among"]),
        ({"extra": "estimator_options = {idim_iv = {iteration = 1}}"}, ["no option 'iteration'", "'iterations'"]),
        ({"extra": "estimator_options = {rls = {forgetting = 0.99}}"}, ["estimator_options.rls", "default options"]),
        ({"extra": "estimator_options = {idim_iv = 1}"}, ["estimator_options.idim_iv", "table of options"]),
        (
            {"estimators": '["idim_ls", "didim"]', "extra": "estimator_options = {didim = {iterations = 3}}"},
            ["estimator_options.didim", "default options"],
        ),
    ],
)
def test_config_errors_are_one_line_and_write_nothing(tmp_path, capsys, change, words):
    config = write_config(tmp_path / "bad.toml", **change)
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxid run: error:") and "\n" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_a_benchmark_read_as_a_study_says_how_to_read_it(tmp_path):
    config = write_config(tmp_path / "b.toml")
    with pytest.raises(ConfigError, match="kind = 'benchmark'|load_config"):
        jaxid.load_experiment(config)


def _two_link_bound():
    """The two-joint arm's base regressor on 400 exact states of a Fourier trajectory, its noise stds
    and ``base_parameter_crlb`` of them: ``(arm, base, traj, w, sigma, bound)``."""
    arm = load_arm(TWO_LINK)
    base = jaxid.base_parameters(arm)
    traj = random_fourier_trajectory(arm, 3, 2.0, key=jax.random.key(5))
    q, qd, qdd = traj.evaluate(jnp.arange(400) * 0.005)
    w = np.asarray(jaxid.base_regressor(arm, q, qd, qdd, base))  # (N, n, p)
    sigma = np.array([0.05, 0.02])
    return arm, base, traj, w, sigma, base_parameter_crlb(w, sigma)


def test_crlb_equals_the_bound_designed_from_the_trajectory():
    """``base_parameter_crlb`` on the regressor's samples equals ``jaxid.excitation.fourier_information``'s
    bound from the trajectory itself (its equally spaced samples); a joint without noise has no bound."""
    from jaxid.excitation.fourier_information import base_parameter_bound

    arm, base, traj, w, sigma, bound = _two_link_bound()
    assert np.isnan(base_parameter_crlb(w, [0.0, 0.02])).all()  # no noise on a joint: no yardstick
    designed = base_parameter_bound(arm, base, traj, noise_std=jnp.asarray(sigma), samples=400)
    np.testing.assert_allclose(np.asarray(designed), bound, rtol=1e-7, atol=1e-12 * np.abs(bound).max())


@pytest.mark.slow  # statistical (4000 Monte Carlo draws): the quick tier leaves it out
def test_crlb_matches_the_spread_of_idim_ls_on_exact_states():
    """``base_parameter_crlb`` against an independent route: the covariance of ordinary least squares
    over 4000 torque-noise draws on the exact states of a two-joint arm (the model is linear, so OLS
    with white noise of known, equal std attains the bound). Diagonal within 8 % (the sampling error
    of a variance from 4000 draws is 2.2 %), correlations within 0.05."""
    arm, base, _, w, sigma, bound = _two_link_bound()
    theta = np.asarray(base.values(arm.standard_parameters()))
    a = (w / sigma[None, :, None]).reshape(-1, w.shape[-1])
    y = (np.einsum("knp,p->kn", w, theta)[..., None] + sigma[None, :, None] * _draws(w.shape[:2], 4000)) / sigma[
        None, :, None
    ]
    estimates = np.linalg.lstsq(a, y.reshape(-1, 4000), rcond=None)[0].T  # (draws, p)
    empirical = np.cov(estimates, rowvar=False)
    np.testing.assert_allclose(np.diag(empirical), np.diag(bound), rtol=0.08)
    corr = lambda c: c / np.sqrt(np.outer(np.diag(c), np.diag(c)))  # noqa: E731
    np.testing.assert_allclose(corr(empirical), corr(bound), atol=0.05)


def _draws(shape, count):
    return np.random.default_rng(0).standard_normal((*shape, count))


@pytest.mark.slow
def test_a_diverging_trial_is_a_status(tmp_path):
    """A controller far too stiff for its 500 Hz hold (400 Hz natural frequency) makes every trial
    diverge: each row says so, no estimate is a silent NaN, and the tables count the failures."""
    config = write_config(tmp_path / "unstable.toml", trials=2, extra="controller_frequency = 400.0")
    out = run_experiment(load_config(config), tmp_path / "run", progress=False, figures=False)
    trials = pd.read_parquet(out / "trials.parquet")
    assert (trials["status"] == "sim_diverged").all()
    assert trials["estimate"].isna().all()
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["n_ok"] == 0).all() and (summary["failed"] == 2).all()
    table = pd.read_csv(out / "estimators.csv")
    assert (table["ok"] == 0).all() and table["statuses"].str.contains("sim_diverged: 2").all()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_benchmarks_parse_with_a_smoke_setting(path):
    exp = load_benchmark(path)
    assert exp.setting("smoke").trials <= 3
    assert {s.name for s in exp.select(None).settings} >= {"consistency_rich", "consistency_poor"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_unmodelled_friction_runs_every_estimator_of_the_rich_setting(path):
    """``coulomb_unmodelled`` is ``consistency_rich`` with the Coulomb columns left out of the model: the study
    compares every estimator there, on as many trials as on the rich data (the UR5's ran three of nine)."""
    exp = load_benchmark(path)
    for run in (exp.select(None), exp.select_full()):
        settings = {s.name: s for s in run.settings}
        if "coulomb_unmodelled" not in settings:
            continue
        rich, unmodelled = settings["consistency_rich"], settings["coulomb_unmodelled"]
        assert unmodelled["estimators"] == rich["estimators"], path.stem
        assert unmodelled["estimator_trials"] == rich["estimator_trials"], path.stem


@pytest.mark.slow
def test_a_designed_excitation_lowers_the_bound(tmp_path):
    """``excitation = "bound"`` goes through ``jaxid.excitation.fourier_design``: the plan's reference is the
    designed one (inside the limits) and the Cramér–Rao bound of its closed-loop run is lower than the
    random reference's (trace, two-joint arm: 1.5e-5 against 7.4e-6 when written)."""
    from jaxid.benchmark import make_plan

    traces = {}
    for excitation in ("random", "bound"):
        exp = load_config(write_config(tmp_path / f"{excitation}.toml", extra=f'excitation = "{excitation}"'))
        plan = make_plan(exp, exp.settings[0])
        assert max(plan.info["limit_ratios"].values()) <= 0.9 + 1e-3
        traces[excitation] = np.trace(plan.crlb)
    assert traces["bound"] < 0.75 * traces["random"], traces


@pytest.mark.slow
def test_settings_of_one_arm_share_its_model(tmp_path):
    """``make_plan``'s arm and model objects (every compiled program that takes the model hashes it by identity)
    are one per URDF content, arm options and columns: settings with the same columns share them, so their
    programs compile once; a setting without the Coulomb columns has its own model of the same arm; an edited
    URDF (same path) is read again. The batched least-squares program is shared the same way."""
    from jaxid.benchmark import make_plan

    urdf = tmp_path / "arm.urdf"
    urdf.write_text(TWO_LINK.read_text())
    extra = "\n[settings.plain]\n\n[settings.without_coulomb]\nmodel_coulomb = false\n"
    exp = load_config(write_config(tmp_path / "shared.toml", extra=extra, urdf=urdf))
    plain, again, without = (make_plan(exp, exp.setting(k)) for k in ("plain", "smoke", "without_coulomb"))
    assert again.regressor is plain.regressor and again.standard is plain.standard
    assert again.nominal is plain.nominal is without.nominal and again.base is plain.base
    assert without.regressor is not plain.regressor and len(without.names) == len(plain.names) - 2
    assert without.regressor.arm is plain.regressor.arm
    # The batched least-squares program (``batched._program``) is then one for the settings with the same model.
    from jaxid.benchmark.batched import _program

    assert _program(again, True, True, 1) is _program(plain, True, True, 1)
    assert _program(without, True, True, 1) is not _program(plain, True, True, 1)
    assert _program(plain, True, False, 1) is not _program(plain, True, True, 1)
    urdf.write_text(TWO_LINK.read_text().replace('<mass value="1.5"/>', '<mass value="1.75"/>'))
    edited = make_plan(exp, exp.setting("plain"))
    assert edited.nominal is not plain.nominal and edited.regressor is not plain.regressor
    assert float(edited.nominal.inertial[1, 0]) == 1.75 and float(plain.nominal.inertial[1, 0]) == 1.5


def test_setting_estimator_gives_the_setting_torque_noise():
    # The benchmark tells output error's input covariance and the Kalman filters' process noise the setting's torque
    # noise (a data sheet's figure), unless the setting's options give one, or, for a filter, its own process noise.
    from jaxid.benchmark.trial import BenchmarkPlan, setting_estimator

    def estimator(name, **options):
        plan = object.__new__(BenchmarkPlan)  # setting_estimator reads the setting alone
        plan.setting = {"estimator_options": {name: options}, "torque_std": 0.3}
        return setting_estimator(plan, name)

    assert estimator("ekf").torque_std == estimator("ukf").torque_std == estimator("output_error").torque_std == 0.3
    assert estimator("ekf", torque_std=0.1).torque_std == 0.1
    assert estimator("ekf", velocity_process_std=1e-3).torque_std is None
    assert estimator("output_error_consistent").torque_std == 0.3
    assert estimator("output_error", covariance="sandwich").torque_std is None
    assert not hasattr(estimator("idim_ls"), "torque_std")
