"""The benchmark's batched IDIM-IV (``jaxid.benchmark.batched_iv``) against the trial-by-trial
``idim_iv`` (the reference: ``make_estimator("idim_iv")`` on the same log and start, ``run_chunk``'s: the
consistent LS), a trial's
numbers independent of its chunk, its restarts, more substeps and errors as the trial-by-trial call's.

Uses the two-joint benchmark of ``tests/test_benchmark.py`` with the chunk width of
``tests/test_benchmark_batched.py`` (same config), so the closed loop, the batched IDIM-LS and the
trial-by-trial IDIM-IV compile to the same programs as there.
"""

import importlib

import equinox as eqx
import numpy as np
import pandas as pd
import pytest
from test_benchmark import write_config

from jaxid.benchmark import chunk as chunk_module
from jaxid.benchmark import load_benchmark
from jaxid.benchmark.batched import _log, _start, batched_fits
from jaxid.benchmark.batched_iv import batched_iv
from jaxid.benchmark.chunk import run_chunk
from jaxid.benchmark.trial import make_plan, simulate_trials
from jaxid.estimate import make_estimator


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    config = write_config(tmp_path_factory.mktemp("batched_iv") / "tiny.toml")
    exp = load_benchmark(config)
    return make_plan(exp, exp.settings[0])


@pytest.fixture(scope="module")
def chunk(plan):
    """Three trials (more than the plan's width of 2: two blocks of simulations) with their logs and starts."""
    parts = [simulate_trials(plan, np.asarray(t)) for t in ([0, 1], [2])]  # the closed loop's width is 2
    run = {f: np.concatenate([p[f] for p in parts]) for f in parts[0]}
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    starts = [_start(plan, fits, k, "idim_iv") for k in range(3)]
    assert all(np.array_equal(s.value, fits["consistent_theta"][k]) for k, s in enumerate(starts))
    return run, fits, [_log(plan, run, fits, k) for k in range(3)], starts


@pytest.mark.slow
def test_batched_iv_equals_idim_iv_trial_by_trial(plan, chunk):
    """Estimate and covariance to 1e-9 of the trial's norm (measured: 8e-14 and 8e-13 here; on 100 Panda
    trials estimates to 2.5e-11, stds to 9e-12: the segments simulated in another ``vmap``), the same
    status, notes, rows and rank; also with the measured side from the batched IDIM-LS program
    (``run_chunk``'s: its rows ``F Y``)."""
    run, _, logs, starts = chunk
    fits = batched_fits(plan, run, ("idim_ls", "idim_iv"))
    measured = (fits["ls_rows"], fits["y"], fits["rows"])
    for out in (batched_iv(plan, logs, starts), batched_iv(plan, logs, starts, measured=measured)):
        for k, (log, start) in enumerate(zip(logs, starts, strict=True)):
            reference = make_estimator("idim_iv")([log], plan.model, start=start)
            got = out[k]
            assert got is not None and got.method == "idim_iv"
            assert (got.status, got.notes) == (reference.status, reference.notes) == ("ok", "")
            assert np.max(np.abs(got.value - reference.value)) < 1e-9 * np.linalg.norm(reference.value)
            assert np.max(np.abs(got.covariance - reference.covariance)) < 1e-9 * np.linalg.norm(reference.covariance)
            assert (got.samples, got.rank, got.iterations) == (reference.samples, reference.rank, reference.iterations)


@pytest.mark.slow
def test_a_trial_does_not_depend_on_its_chunk(plan, chunk):
    """Trial 1 first, second, alone (padded) and with a trial at another start in its block: the same bits."""
    _, _, logs, starts = chunk
    picks = ([0, 1, 2], [1, 2], [1], [2, 1])
    results = [batched_iv(plan, [logs[k] for k in pick], [starts[k] for k in pick]) for pick in picks]
    first = results[0][1]
    for pick, result in zip(picks[1:], results[1:], strict=True):
        got = result[pick.index(1)]
        np.testing.assert_array_equal(got.value, first.value)
        np.testing.assert_array_equal(got.covariance, first.covariance)


def _close(got, reference, tol=1e-9):
    """Estimate and covariance of two estimates to ``tol`` of the reference's norm."""
    for a, b in ((got.value, reference.value), (got.covariance, reference.covariance)):
        assert np.max(np.abs(np.asarray(a) - np.asarray(b))) < tol * np.linalg.norm(b)


@pytest.mark.slow
def test_restarts_and_more_substeps_run_batched_as_trial_by_trial(plan, chunk, monkeypatch):
    """A start whose simulations leave the measured trajectory (IDIM-LS's estimate negated: the mass
    matrix negative definite): ``batched_iv`` restarts it more often as ``idim_iv`` does and gives the
    trial-by-trial call's status, notes (restarted every 0.125 s) and estimate; its neighbour's numbers
    are unchanged, bit for bit, and ``run_chunk``'s rows are the batched ones. With no substep count
    allowed in a wide block (``IV_MAX_SUBSTEPS = 0``) every trial runs in a block of its own at its
    traced count: the trial-by-trial estimates again."""
    run, _, logs, starts = chunk
    run = {f: v[:2] for f, v in run.items()}
    fits = batched_fits(plan, run, tuple(plan.setting["estimators"]))  # run_chunk's program
    measured = (fits["ls_rows"], fits["y"], fits["rows"])
    bad = [starts[0], eqx.tree_at(lambda s: s.value, starts[1], -np.asarray(starts[1].value))]
    out = batched_iv(plan, logs[:2], bad, measured=measured)
    np.testing.assert_array_equal(out[0].value, batched_iv(plan, logs[:2], starts[:2], measured=measured)[0].value)
    reference = make_estimator("idim_iv")([logs[1]], plan.model, start=bad[1])
    assert "restarted every 0.125 s" in reference.notes
    assert (out[1].status, out[1].notes) == (reference.status, reference.notes)
    _close(out[1], reference)

    def negated(*args, **kwargs):
        fits = original(*args, **kwargs)
        for k in ("ls_theta", "consistent_theta"):  # IDIM-IV's start is the consistent LS
            fits[k] = fits[k] * np.asarray([[1.0], [-1.0]])
        return fits

    original = chunk_module.batched_fits
    with monkeypatch.context() as patch:
        patch.setattr(chunk_module, "batched_fits", negated)
        rows = pd.DataFrame(run_chunk(plan, run, [0, 1]))
    iv = rows[rows.estimator == "idim_iv"]
    assert list(iv.groupby("trial").status.first()) == ["ok", reference.status]
    np.testing.assert_array_equal(iv[iv.trial == 0].estimate, out[0].value)
    np.testing.assert_array_equal(iv[iv.trial == 1].estimate, out[1].value)

    monkeypatch.setattr(importlib.import_module("jaxid.benchmark.batched_iv"), "IV_MAX_SUBSTEPS", 0)
    alone = batched_iv(plan, logs, starts, measured=None)
    for k, (log, start) in enumerate(zip(logs, starts, strict=True)):
        reference = make_estimator("idim_iv")([log], plan.model, start=start)
        assert (alone[k].status, alone[k].notes) == (reference.status, reference.notes)
        _close(alone[k], reference)


@pytest.mark.slow
def test_a_trial_whose_call_raises_gets_its_error(plan, chunk):
    """A start whose simulations are not finite at any restart interval (NaN): the trial-by-trial call
    raises; ``batched_iv`` gives the same error in the trial's place and the other trial's estimate unchanged."""
    _, _, logs, starts = chunk
    wild = eqx.tree_at(lambda s: s.value, starts[1], np.full_like(starts[1].value, np.nan))
    with pytest.raises(ValueError) as raised:
        make_estimator("idim_iv")([logs[1]], plan.model, start=wild)
    out = batched_iv(plan, logs[:2], [starts[0], wild])
    assert isinstance(out[1], ValueError) and str(out[1]) == str(raised.value)
    np.testing.assert_array_equal(out[0].value, batched_iv(plan, logs[:2], starts[:2])[0].value)


@pytest.mark.slow
def test_a_setting_s_estimator_options_reach_its_estimators(tmp_path_factory, chunk):
    """``estimator_options`` of a setting: IDIM-IV (batched) with one pass and bounded LS (trial by trial)
    without the joint weighting give, in ``run_chunk``, what ``make_estimator(e, options)`` gives on the
    same log and start, and not what the defaults give."""
    options = {"idim_iv": {"iterations": 1}, "idim_ls_bounded": {"weighting": "none"}}
    config = write_config(
        tmp_path_factory.mktemp("options") / "tiny.toml",
        estimators='["idim_ls", "idim_iv", "idim_ls_bounded"]',
        extra='estimator_options = {idim_iv = {iterations = 1}, idim_ls_bounded = {weighting = "none"}}',
    )
    exp = load_benchmark(config)
    plan = make_plan(exp, exp.settings[0])
    assert plan.setting["estimator_options"] == options
    run, _, logs, starts = chunk
    rows = pd.DataFrame(run_chunk(plan, {f: v[:2] for f, v in run.items()}, [0, 1]))
    for e, opts in options.items():
        for k in range(2):
            got = rows[(rows.estimator == e) & (rows.trial == k)].estimate.to_numpy()
            reference = make_estimator(e, opts)([logs[k]], plan.model, start=starts[k]).value
            default = make_estimator(e)([logs[k]], plan.model, start=starts[k]).value
            assert np.max(np.abs(got - reference)) < 1e-9 * np.linalg.norm(reference), (e, k)
            assert np.max(np.abs(got - default)) > 1e-6 * np.linalg.norm(default), (e, k)
