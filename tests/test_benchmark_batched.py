"""The benchmark's batched least-squares family (``jaxid.benchmark.batched``) against the trial-by-trial
path (``run_estimators``, the reference), a trial's numbers independent of its chunk, and the one
least-squares kernel (``ls_kernel``) against an independent numpy solution.

Uses the two-joint benchmark of ``tests/test_benchmark.py`` (same config, same chunk width), so the
closed loop compiles once for both files.
"""

import jax
import numpy as np
import pandas as pd
import pytest
from test_benchmark import write_config

from jaxid.benchmark import load_benchmark
from jaxid.benchmark.batched import _log, _start, batched_fits
from jaxid.benchmark.chunk import run_chunk
from jaxid.benchmark.trial import estimate_rows, make_plan, run_estimators, setting_estimator, simulate_trials
from jaxid.estimate import make_estimator
from jaxid.estimate.logs.ls_kernel import _ls_kernel_jit as ls_kernel


def _tiny_plan(tmp_path_factory, folder: str, **options):
    """The plan of the tiny benchmark's first setting (``write_config``'s ``options``)."""
    exp = load_benchmark(write_config(tmp_path_factory.mktemp(folder) / "tiny.toml", **options))
    return make_plan(exp, exp.settings[0])


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return _tiny_plan(tmp_path_factory, "batched")


@pytest.mark.slow
def test_batched_equals_the_trial_by_trial_path(plan):
    """Same statuses; IDIM-LS, consistent LS and IDIM-IV (started from the batched IDIM-LS) to 1e-10
    relative; RLS to 1e-7: its recursion from ``P₀ = 1e8 𝟙`` amplifies the rows' last-bit differences
    (the batched rows are ``F Y``, the per-trial ones a ``sosfiltfilt`` of ``Y``: ~1e-14 apart)."""
    trials = np.arange(2)
    run = simulate_trials(plan, trials)
    reference = pd.DataFrame([r for k in trials for r in run_estimators(plan, run, int(k), int(k))])
    batched = pd.DataFrame(run_chunk(plan, run, trials))
    assert len(reference) == len(batched)
    key = ["trial", "estimator", "parameter"]
    merged = reference.merge(batched, on=key, suffixes=("_ref", "_new"))
    assert len(merged) == len(reference)
    assert (merged.status_ref == merged.status_new).all()
    assert (merged.status_ref == "ok").all()
    for e, g in merged.groupby("estimator"):
        tol = 1e-7 if e == "rls" else 1e-10
        for column in ("estimate", "std"):
            a, b = g[f"{column}_ref"].to_numpy(), g[f"{column}_new"].to_numpy()
            per_trial = g.groupby("trial")[f"{column}_ref"].transform(lambda x: np.linalg.norm(x)).to_numpy()
            assert np.max(np.abs(a - b) / per_trial) < tol, (e, column)
        heldout = g.groupby("trial")[["heldout_rmse_ref", "heldout_rmse_new"]].first().to_numpy()
        np.testing.assert_allclose(heldout[:, 1], heldout[:, 0], rtol=tol)


@pytest.fixture(scope="module")
def filter_plan(tmp_path_factory):
    """The tiny benchmark with IDIM-LS, the EKF and the UKF (the UKF on trials 0 and 1 only)."""
    return _tiny_plan(
        tmp_path_factory, "filters", estimators='["idim_ls", "ekf", "ukf"]', extra="estimator_trials = {ukf = 2}"
    )


def _relative_gap(reference: pd.DataFrame, batched: pd.DataFrame, column: str) -> pd.Series:
    """Per estimator: ``max |a − b| / ‖a‖`` over the trials (``‖a‖`` the trial's vector's norm)."""
    key = ["trial", "estimator", "parameter"]
    merged = reference.merge(batched, on=key, suffixes=("_ref", "_new"))
    assert len(merged) == len(reference) == len(batched)
    assert (merged.status_ref == merged.status_new).all()
    norm = merged.groupby(["trial", "estimator"])[f"{column}_ref"].transform(lambda x: np.linalg.norm(x))
    gap = (merged[f"{column}_ref"] - merged[f"{column}_new"]).abs() / norm
    return gap.groupby(merged.estimator).max()


@pytest.mark.slow
def test_batched_filters_equal_the_trial_by_trial_path(filter_plan):
    """The EKF and UKF of a chunk, one ``kalman_filter_batch`` call each, against each trial alone:

    * ``setting_estimator(plan, e)([log], model, start=...)`` (the setting's options: its torque noise) on the same
      log and start (the batched consistent LS:
      ``_start``'s rule for an estimator that simulates): estimates, stds and held-out RMSE to 1e-10 of the
      trial's vector, the UKF's to 1e-8 (measured: EKF ~2e-15; UKF 2.3e-10, 4.8e-10 and 6.3e-9 for the held-out
      RMSE, ~1e-11 from IDIM-LS's start: the vmapped program's round-off through the UKF's sigma points);
    * ``run_estimators`` (its own filtering, IDIM-LS and consistent LS, ~6e-14 apart in the start's std): same
      statuses and the same tolerances (measured: EKF 9e-14, UKF 2.2e-10, 4.6e-10, 6.0e-9: the UKF amplifies
      the start's last bits ~4000-fold).

    And a trial's rows do not depend on its chunk: trial 1 in ``[0, 1]`` and in ``[1, 2]`` (there
    the UKF runs on trial 1 alone, padded to the same width), bit for bit."""
    plan = filter_plan
    names = ["idim_ls", "ekf", "ukf"]
    run = simulate_trials(plan, np.arange(2))
    batched = pd.DataFrame(run_chunk(plan, run, [0, 1]))
    assert set(batched.estimator) == set(names)
    assert (batched.status == "ok").all()
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    alone = []
    for k in range(2):
        out = {"idim_ls": (fits["ls_theta"][k], fits["ls_cov"][k], "ok", 0.0, 0.0)}
        for e in names[1:]:
            start = _start(plan, fits, k, e)
            np.testing.assert_array_equal(start.value, fits["consistent_theta"][k])  # it converged on these trials
            est = setting_estimator(plan, e)([_log(plan, run, fits, k)], plan.model, start=start)
            out[e] = (est.value, est.covariance, est.status, 0.0, 0.0)
        alone += estimate_rows(plan, k, names, out)
    reference = pd.DataFrame([r for k in range(2) for r in run_estimators(plan, run, k, k)])
    tolerance = {"idim_ls": 1e-10, "ekf": 1e-10, "ukf": 1e-8}
    for column in ("estimate", "std", "heldout_rmse"):
        for against in (pd.DataFrame(alone), reference):
            gap = _relative_gap(against, batched, column)
            assert all(gap[e] < tolerance[e] for e in names), (column, gap.to_dict())
    other = pd.DataFrame(run_chunk(plan, simulate_trials(plan, np.asarray([1, 2])), [1, 2]))
    assert set(other[other.trial == 2].estimator) == {"idim_ls", "ekf"}
    for e in names[1:]:
        a = batched[(batched.trial == 1) & (batched.estimator == e)]
        b = other[(other.trial == 1) & (other.estimator == e)]
        for column in ("estimate", "std"):
            np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy(), err_msg=f"{e} {column}")
    seconds = batched.groupby(["estimator", "trial"]).seconds.first().loc["ekf"].to_numpy()
    assert seconds[0] == seconds[1] > 0  # the call's time shared by its trials


@pytest.mark.slow
def test_a_trial_does_not_depend_on_its_chunk(plan):
    """Trial 1 in the chunk ``[0, 1]`` and in ``[1, 2]`` and alone (padded): the same bits."""
    fits = [batched_fits(plan, simulate_trials(plan, np.asarray(t))) for t in ([0, 1], [1, 2], [1])]
    where = [1, 0, 0]
    for k in ("ls_theta", "ls_cov", "rls_theta", "consistent_theta"):
        first = fits[0][k][where[0]]
        for f, i in zip(fits[1:], where[1:], strict=True):
            np.testing.assert_array_equal(f[k][i], first, err_msg=k)


def test_ls_kernel_against_numpy():
    """Weighted LS by its definition in numpy (normal equations of the weighted rows) and the rank of
    a duplicated column: ``first_rank`` says so (the caller's status), no exception, no NaN in rank."""
    rng = np.random.default_rng(0)
    rows, n, p = 60, 2, 5
    w = rng.normal(size=(rows, n, p)) * np.array([1.0, 10.0, 0.1, 3.0, 1.0])
    theta = rng.normal(size=p)
    y = np.einsum("rnp,p->rn", w, theta) + rng.normal(size=(rows, n)) * np.array([0.1, 0.5])
    fit = ls_kernel(w, y, True, True)
    a = w.reshape(-1, p)
    x = np.linalg.solve(a.T @ a, a.T @ y.reshape(-1))
    resid = y - np.einsum("rnp,p->rn", w, x)
    sigma = np.sqrt(np.sum(resid**2, axis=0) / (rows - p / n))
    aw = (w / sigma[None, :, None]).reshape(-1, p)
    bw = (y / sigma).reshape(-1)
    xw = np.linalg.solve(aw.T @ aw, aw.T @ bw)
    rw = bw - aw @ xw
    cov = rw @ rw / (rows * n - p) * np.linalg.inv(aw.T @ aw)
    np.testing.assert_allclose(np.asarray(fit.theta), xw, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(fit.covariance), cov, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(fit.sigma), sigma, rtol=1e-10)
    assert int(fit.rank) == int(fit.first_rank) == p
    singular = np.concatenate([w, w[..., :1]], axis=-1)
    assert int(ls_kernel(singular, y, True, True).first_rank) == p


def test_bounded_solve_equals_scipy_s_bvls():
    """``bounded_solve`` against scipy's ``lsq_linear(method="bvls")`` on 30 random problems (bounds below, above,
    on both sides and none; columns of different scales): the same solution to 1e-12 of its norm, within its bounds,
    converged; without bounds it is the least-squares solution."""
    from scipy.optimize import lsq_linear

    from jaxid.estimate.logs.ls_kernel import bounded_solve

    solve = jax.jit(bounded_solve)
    rng = np.random.default_rng(1)
    active = 0
    for k in range(30):
        a = rng.standard_normal((80, 9)) * rng.uniform(0.01, 10.0, 9)
        b = a @ rng.standard_normal(9) + rng.standard_normal(80)
        lower = np.where(rng.random(9) < 0.5, rng.uniform(-0.5, 0.5, 9), -np.inf)
        upper = np.where(rng.random(9) < 0.3, np.where(np.isfinite(lower), lower, 0.0) + 0.5, np.inf)
        if k == 0:
            lower, upper = np.full(9, -np.inf), np.full(9, np.inf)
        reference = lsq_linear(a, b, bounds=(lower, upper), method="bvls", tol=1e-14).x
        x, passes, converged = solve(a, b, lower, upper)
        x = np.asarray(x)
        assert bool(converged) and int(passes) <= 3 * 9
        assert np.max(np.abs(x - reference)) < 1e-12 * np.linalg.norm(reference), k
        assert np.all(x >= lower) and np.all(x <= upper)
        active += int(np.sum((x == lower) | (x == upper)))
        if k == 0:
            np.testing.assert_allclose(x, np.linalg.lstsq(a, b, rcond=None)[0], rtol=1e-10)
    assert active > 10  # the bounds bind: the test is not the unbounded problem's


def test_ls_kernel_newey_west_against_its_definition():
    """``lags = L``: the sandwich ``(AᵀA)⁻¹ M (AᵀA)⁻¹ · N/(N − p)`` on the weighted rows, with ``M`` written
    as the double sum ``Σ_{|t−s| ≤ L} (1 − |t−s|/(L+1)) g_t g_sᵀ`` over row times (``g_t``: the scores
    of one row time's joints); the estimate itself does not change."""
    rng = np.random.default_rng(1)
    rows, n, p, lags = 50, 2, 4, 3
    w = rng.normal(size=(rows, n, p))
    y = np.einsum("rnp,p->rn", w, rng.normal(size=p)) + rng.normal(size=(rows, n))
    plain, fit = ls_kernel(w, y, True, True), ls_kernel(w, y, True, True, lags)
    np.testing.assert_array_equal(np.asarray(fit.theta), np.asarray(plain.theta))
    sigma = np.asarray(fit.sigma)
    aw = w / sigma[None, :, None]
    resid = y / sigma - np.einsum("rnp,p->rn", aw, np.asarray(fit.theta))
    g = np.einsum("rnp,rn->rp", aw, resid)
    meat = sum(
        (1 - abs(t - s) / (lags + 1)) * np.outer(g[t], g[s])
        for t in range(rows)
        for s in range(rows)
        if abs(t - s) <= lags
    )
    inverse = np.linalg.inv(aw.reshape(-1, p).T @ aw.reshape(-1, p))
    expected = rows * n / (rows * n - p) * inverse @ meat @ inverse
    np.testing.assert_allclose(np.asarray(fit.covariance), expected, rtol=1e-9)


def test_ls_kernel_newey_west_covers_under_correlated_noise():
    """Monte Carlo: noise that is a moving average over 4 rows (as low-passed, decimated rows are) on
    smooth rows. The plain covariance understates the spread (z-scores' std ≈ 2); the Newey-West one
    over ``L = 4`` rows covers 95 % intervals in 0.85-0.99 of 400 trials for every parameter (0.88-0.90
    here: Bartlett's weights shrink the lag-1..3 correlations of this noise by 20-60 %, so its variance
    is 3/4 of the truth's)."""
    rng = np.random.default_rng(2)
    rows, n, p, trials, lags = 400, 2, 3, 400, 4
    t = np.arange(rows)[:, None, None]  # smooth rows, as low-passed signals are: periods of 40-200 rows
    w = np.cos(2 * np.pi * t / rng.uniform(40, 200, size=(1, n, p)) + rng.uniform(0, 6, size=(1, n, p)))
    theta = np.array([1.0, -2.0, 0.5])
    white = rng.normal(size=(trials, rows + lags - 1, n))
    noise = sum(white[:, k : k + rows] for k in range(lags)) / 2.0
    y = np.einsum("rnp,p->rn", w, theta)[None] + noise
    plain = jax.vmap(lambda yy: ls_kernel(w, yy, True, False))(y)
    hac = jax.vmap(lambda yy: ls_kernel(w, yy, True, False, lags))(y)

    def z(fit):
        return (np.asarray(fit.theta) - theta) / np.sqrt(np.diagonal(np.asarray(fit.covariance), axis1=1, axis2=2))

    assert np.all(np.std(z(plain), axis=0) > 1.4)
    inside = np.mean(np.abs(z(hac)) < 1.96, axis=0)
    assert np.all((inside >= 0.85) & (inside <= 0.99)), inside


def test_full_run_picks_the_marked_settings(tmp_path):
    """``--full`` (``Benchmark.select_full``): the settings marked ``full`` (not ``smoke``), ``full_trials``
    each, ``full_estimator_trials`` where given, chunks of at least ``FULL_CHUNK``; a bad key is one line."""
    from jaxid.config import ConfigError
    from jaxid.config.benchmark import FULL_CHUNK

    text = write_config(tmp_path / "a.toml").read_text()
    text = text.replace("chunk = 2", "chunk = 2\nfull_trials = 7")
    text += "\n[settings.rich]\nfull_estimator_trials = {idim_iv = 3}\n\n[settings.designed]\nfull = false\n"
    (tmp_path / "b.toml").write_text(text)
    full = load_benchmark(tmp_path / "b.toml").select_full()
    assert [s.name for s in full.settings] == ["rich"]
    assert full.settings[0].trials == 7 and full.chunk == FULL_CHUNK
    assert full.settings[0]["estimator_trials"] == {"idim_iv": 3}
    (tmp_path / "c.toml").write_text(text.replace("full = false", 'full = "no"'))
    with pytest.raises(ConfigError, match="full must be true or false"):
        load_benchmark(tmp_path / "c.toml")


def test_the_panda_full_run_is_the_study_issue_28_asks_for():
    """``jaxid run benchmark_panda --full``: 1000 trials of three settings with IDIM-LS, IDIM-IV, RLS and consistent
    LS on every trial, the EKF and output error (and DIDIM) on at least 100 trials of each setting."""
    from pathlib import Path

    full = load_benchmark(Path(__file__).resolve().parent.parent / "experiments" / "benchmark_panda.toml").select_full()
    assert len(full.settings) == 3
    for s in full.settings:
        assert s.trials == 1000
        assert {"idim_ls", "idim_iv", "rls", "idim_ls_consistent"} <= set(s["estimators"]), s.name
        for e in ("ekf", "output_error", "didim"):
            assert e in s["estimators"] and s["estimator_trials"].get(e, s.trials) >= 100, (s.name, e)
        for e in ("idim_ls", "idim_iv", "rls", "idim_ls_consistent"):
            assert s["estimator_trials"].get(e, s.trials) == s.trials, (s.name, e)


@pytest.mark.slow
def test_a_diverged_trial_in_a_chunk_is_a_status(plan):
    """A chunk with one diverged log (non-finite): that trial's rows say ``sim_diverged``, the other's
    estimates are those of the clean chunk, bit for bit."""
    from jaxid.types import Status

    run = simulate_trials(plan, np.arange(2))
    clean = pd.DataFrame(run_chunk(plan, run, [0, 1]))
    broken = {k: v.copy() for k, v in run.items()}
    broken["status"][1] = Status.DIVERGED
    broken["q"][1, 10:] = np.nan
    rows = pd.DataFrame(run_chunk(plan, broken, [0, 1]))
    assert (rows[rows.trial == 1].status == "sim_diverged").all()
    first, reference = rows[rows.trial == 0], clean[clean.trial == 0]
    assert (first.status == "ok").all()
    np.testing.assert_array_equal(first.estimate.to_numpy(), reference.estimate.to_numpy())


@pytest.fixture(scope="module")
def single_plan(tmp_path_factory):
    """The tiny benchmark with sign-bounded LS with an option of its own (so not in the batched program: trial by
    trial) and output error (in lockstep) on both trials."""
    return _tiny_plan(
        tmp_path_factory,
        "single",
        estimators='["idim_ls", "idim_ls_bounded", "output_error"]',
        extra='estimator_trials = {output_error = 2}\nestimator_options = {idim_ls_bounded = {weighting = "joint"}}',
    )


@pytest.mark.slow
@pytest.mark.parametrize("lockstep", [False, True])
def test_chunk_fits_equal_each_fit_alone(single_plan, monkeypatch, lockstep):
    """``run_chunk`` runs its trial-by-trial fits (bounded LS with an option of its own; output error on a CPU) over
    the host's threads, and output error's fits in lockstep on an accelerator (``chunk.lockstep``, forced here:
    ``fit_logs_batch``, each round's passes as one program): each row is the same call made alone on the same log
    and start (``_start``'s), with its status: bit for bit trial by trial, to round-off in lockstep (its chunks have
    another shape), where a trial's bits do not depend on its chunk. Each trial-by-trial fit's seconds are its own;
    in lockstep, the call's shared over its trials."""
    from jaxid.benchmark import chunk

    monkeypatch.setattr(chunk, "lockstep", lambda: lockstep)
    plan = single_plan
    run = simulate_trials(plan, np.arange(2))
    rows = pd.DataFrame(run_chunk(plan, run, [0, 1]))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    for k in (0, 1):
        assert set(rows[rows.trial == k].estimator) == {"idim_ls", "idim_ls_bounded", "output_error"}
        for e in ("idim_ls_bounded", "output_error"):
            est = setting_estimator(plan, e)([_log(plan, run, fits, k)], plan.model, start=_start(plan, fits, k, e))
            got = rows[(rows.trial == k) & (rows.estimator == e)]
            assert (got.status == est.status).all()
            # In lockstep its segments ran in chunks of another shape than alone: round-off (3e-11 of the largest
            # entry measured).
            tol = 1e-8 if lockstep and e == "output_error" else 0.0  # of the largest entry
            value, std = est.value, np.sqrt(np.diag(est.covariance))
            np.testing.assert_allclose(got.estimate, value, rtol=0, atol=tol * np.abs(value).max(), err_msg=f"{e} {k}")
            # The covariance, an inverse, carries that round-off times its condition number (4e-8 measured).
            np.testing.assert_allclose(got["std"], std, rtol=100 * tol, atol=tol * std.max())
    seconds = rows.groupby(["estimator", "trial"]).seconds.first()
    assert (seconds > 0).all()
    assert (seconds.loc[("output_error", 0)] == seconds.loc[("output_error", 1)]) == lockstep
    if lockstep:  # trial 1 in a chunk of its own: the bits it had beside trial 0 (one chunk shape in lockstep)
        alone = pd.DataFrame(run_chunk(plan, simulate_trials(plan, np.asarray([1])), [1]))
        mine = rows[(rows.trial == 1) & (rows.estimator == "output_error")].estimate.to_numpy()
        np.testing.assert_array_equal(alone[alone.estimator == "output_error"].estimate.to_numpy(), mine)
    # CPU seconds: the process's over the fits, shared by wall time (so they hold the compiled work, which a
    # thread's own clock misses: it gave output error 0.05 CPU s for 3.7 s of wall on the Panda).
    cpu = rows.groupby(["estimator", "trial"]).cpu_seconds.first()
    ratio = cpu / seconds.loc[cpu.index]
    assert ratio.loc[("idim_ls_bounded", 0)] == pytest.approx(ratio.loc[("idim_ls_bounded", 1)])
    assert ratio.loc[("idim_ls_bounded", 0)] > 0.2  # about 1 on idle cores, 0.5 with another process on them
    assert ratio.loc[("output_error", 0)] > 0.2


@pytest.fixture(scope="module")
def bounded_plan(tmp_path_factory):
    """The tiny benchmark with sign-bounded LS, which runs in the batched program (no options of its own)."""
    return _tiny_plan(tmp_path_factory, "bounded", trials=4, estimators='["idim_ls", "idim_ls_bounded"]')


@pytest.mark.slow
def test_batched_bounded_ls_equals_scipy_s_bvls_trial_by_trial(bounded_plan):
    """Sign-bounded LS in the batched program (``bounded_solve``) against ``idim_ls(bounds=…)`` (scipy's
    ``bvls``) on each trial's own log: estimates to 1e-10 of their norm, stds to 1e-8, ``ok``. The tiny arm
    has no friction, so its friction estimates straddle 0 and the bounds are active on some trials (checked:
    the test would pass vacuously otherwise), where the unbounded IDIM-LS is negative. A trial's numbers do
    not depend on its chunk."""
    plan = bounded_plan
    lower = np.asarray(plan.model.sign_bounds()[0])
    assert (lower == 0).sum() >= 4  # the friction and armature columns of the two joints
    active = 0
    for trials in ([0, 1], [2, 3]):  # chunks of the plan's width
        run = simulate_trials(plan, np.asarray(trials))
        rows = pd.DataFrame(run_chunk(plan, run, trials))
        fits = batched_fits(plan, run, ("idim_ls",))
        active += _bounded_against_scipy(plan, run, rows, fits, lower)
    assert active > 0
    # Trial 3 alone (padded to the width) gives the bits it gave in the chunk [2, 3].
    alone = batched_fits(plan, simulate_trials(plan, np.asarray([3])), ("idim_ls", "idim_ls_bounded"))
    in_chunk = batched_fits(plan, run, ("idim_ls", "idim_ls_bounded"))
    for key in ("bounded_theta", "bounded_cov"):
        np.testing.assert_array_equal(alone[key][0], in_chunk[key][1], err_msg=key)


def _bounded_against_scipy(plan, run, rows, fits, lower) -> int:
    active = 0
    for k in range(len(fits["ls_theta"])):
        est = make_estimator("idim_ls_bounded")([_log(plan, run, fits, k)], plan.model, start=_start(plan, fits, k))
        got = rows[(rows.trial == rows.trial.unique()[k]) & (rows.estimator == "idim_ls_bounded")]
        assert (got.status == "ok").all()
        value = got.estimate.to_numpy()
        assert np.max(np.abs(value - est.value)) < 1e-10 * np.linalg.norm(est.value)
        np.testing.assert_allclose(got["std"].to_numpy(), np.sqrt(np.diag(est.covariance)), rtol=1e-8)
        assert np.all(value[lower == 0] >= 0)
        at_bound = (lower == 0) & (est.value == 0)
        assert np.all(fits["ls_theta"][k][at_bound] < 0)
        active += int(at_bound.sum())
    return active


def test_estimators_that_simulate_start_from_the_consistent_fit():
    """``_start``: IDIM-IV, the Kalman filters and output error start from the trial's consistent LS where it
    converged (``jaxid fit``'s rule), with IDIM-LS's weights and covariance; the least-squares family, and every
    estimator on a trial whose consistent fit stopped at its limit or was not computed, from IDIM-LS."""
    from types import SimpleNamespace

    from jaxid.estimate import ESTIMATORS
    from jaxid.types import Status

    assert {n for n, c in ESTIMATORS.items() if c.simulates} == {
        "idim_iv",
        "ekf",
        "ukf",
        "output_error",
        "output_error_consistent",
    }
    rng = np.random.default_rng(0)
    plan, p = SimpleNamespace(names=("a", "b", "c")), 3
    fits = {
        "ls_theta": rng.normal(size=(2, p)),
        "ls_cov": np.stack([np.eye(p), 2 * np.eye(p)]),
        "ls_rank": np.array([p, p]),
        "ls_condition": np.array([3.0, 4.0]),
        "ls_residual_std": rng.uniform(1, 2, (2, 2)),
        "samples": 100,
        "consistent_theta": rng.normal(size=(2, p)),
        "consistent_status": np.array([int(Status.SUCCESS), int(Status.MAX_ITERATIONS)]),
    }
    for e in ESTIMATORS:
        start = _start(plan, fits, 0, e)
        expected = fits["consistent_theta"][0] if ESTIMATORS[e].simulates else fits["ls_theta"][0]
        np.testing.assert_array_equal(start.value, expected)
        np.testing.assert_array_equal(start.covariance, fits["ls_cov"][0])
        np.testing.assert_array_equal(start.residual_std, fits["ls_residual_std"][0])
        np.testing.assert_array_equal(_start(plan, fits, 1, e).value, fits["ls_theta"][1])  # not converged
    without = {k: v for k, v in fits.items() if not k.startswith("consistent")}
    np.testing.assert_array_equal(_start(plan, without, 0, "ekf").value, fits["ls_theta"][0])


@pytest.mark.slow
def test_an_estimator_that_simulates_starts_from_the_consistent_fit_by_default(plan):
    """The library's default start (``start=None``) follows the same rule: IDIM-IV called without a start equals
    IDIM-IV from ``simulation_start`` (the converged consistent LS, computed from IDIM-LS), not from IDIM-LS; on a
    model without a ``ConsistentMap`` it starts from IDIM-LS."""
    import dataclasses

    from jaxid.estimate import IdimIV, IdimLS, IdimLSConsistent
    from jaxid.estimate.abstract import simulation_start

    run = simulate_trials(plan, np.arange(1))
    logs = [_log(plan, run, batched_fits(plan, run, ("idim_ls",)), 0)]
    ls = IdimLS()(logs, plan.model)
    consistent = IdimLSConsistent()(logs, plan.model, start=ls)
    assert consistent.status == "ok"
    start = simulation_start(logs, plan.model, ls)
    np.testing.assert_array_equal(start.value, consistent.value)
    np.testing.assert_array_equal(start.covariance, ls.covariance)
    default = IdimIV(iterations=1)(logs, plan.model)
    np.testing.assert_array_equal(default.value, IdimIV(iterations=1)(logs, plan.model, start=start).value)
    assert not np.allclose(default.value, IdimIV(iterations=1)(logs, plan.model, start=ls).value, rtol=1e-8)
    bare = dataclasses.replace(plan.model, consistent=None)
    assert simulation_start(logs, bare, ls) is ls
