"""DIDIM, the benchmark's closed-loop output error (``jaxid.benchmark.didim``): the truth is its fixed point on
a noise-free closed-loop run (an exact, independent answer: IDIM-LS on the same log is off by its
filtering), the chunk's rows and the trial-by-trial path agree, a trial's numbers do not depend on its
chunk, and a model whose closed loop diverges is a status.

Uses the two-joint benchmark of ``tests/test_benchmark.py`` (same config, so the closed loop of the
trials compiles to the same program as there).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from test_benchmark_batched import _tiny_plan

from jaxid.benchmark import didim
from jaxid.benchmark.batched import batched_fits
from jaxid.benchmark.chunk import run_chunk
from jaxid.benchmark.didim import didim_chunk
from jaxid.benchmark.trial import run_estimators, simulate_trials, validation_rmse

ESTIMATORS = '["idim_ls", "idim_ls_consistent", "didim"]'


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return _tiny_plan(tmp_path_factory, "didim", estimators=ESTIMATORS)


@pytest.mark.slow
def test_the_truth_is_the_fixed_point_of_a_noise_free_closed_loop(tmp_path_factory):
    """No measurement noise: the model's closed loop at the true parameters is the logged one, so the
    truth is DIDIM's fixed point: it ends within 1e-5 of the largest parameter (measured 1.3e-5; its
    passes are consistent least squares, whose interior point stops at a duality gap and whose prior
    pulls a little where the data leave no residual; with plain least-squares passes 3e-14), where
    IDIM-LS on the same log is 1.5 % off (its filtered derivatives); ``run_chunk``'s rows carry it."""
    noise_free = "angle_std = 0.0\nvelocity_std = 0.0\ntorque_std = 0.0\n"
    plan = _tiny_plan(
        tmp_path_factory,
        "didim_exact",
        estimators=ESTIMATORS,
        extra=noise_free + "true_viscous = 0.3\ntrue_coulomb = 0.5",
    )
    run = simulate_trials(plan, np.arange(2))
    rows = pd.DataFrame(run_chunk(plan, run, [0, 1]))
    scale = np.abs(plan.truth).max()
    for k in range(2):
        got = rows[(rows.trial == k) & (rows.estimator == "didim")]
        ls = rows[(rows.trial == k) & (rows.estimator == "idim_ls")]
        assert (got.status == "ok").all()
        assert np.max(np.abs(got.estimate.to_numpy() - plan.truth)) < 3e-5 * scale
        assert np.max(np.abs(ls.estimate.to_numpy() - plan.truth)) > 1e-3 * scale


@pytest.mark.slow
def test_chunk_and_trial_by_trial_paths_agree_and_a_trial_does_not_depend_on_its_chunk(plan):
    """Trial 1 in the chunk ``[0, 1]``, in ``[1, 2]`` and through ``run_estimators``: the same bits; with
    noise DIDIM stops on its own rule (``ok``) and its held-out torque is below IDIM-LS's."""
    first = pd.DataFrame(run_chunk(plan, simulate_trials(plan, np.asarray([0, 1])), [0, 1]))
    run = simulate_trials(plan, np.asarray([1, 2]))
    second = pd.DataFrame(run_chunk(plan, run, [1, 2]))
    alone = pd.DataFrame(run_estimators(plan, run, 0, 1))
    pick = [frame[(frame.trial == 1) & (frame.estimator == "didim")] for frame in (first, second, alone)]
    assert all((p.status == "ok").all() for p in pick)
    for p in pick[1:]:
        np.testing.assert_array_equal(p.estimate.to_numpy(), pick[0].estimate.to_numpy())
        np.testing.assert_array_equal(p["std"].to_numpy(), pick[0]["std"].to_numpy())
    held = first.groupby(["estimator", "trial"]).heldout_rmse.first()
    assert (held.loc["didim"] < held.loc["idim_ls"]).all(), held


@pytest.mark.slow
def test_only_the_trials_still_iterating_are_simulated_and_a_trial_keeps_its_bits(plan, monkeypatch):
    """Trial 0 started at its own DIDIM estimate stops at once; trial 1 then iterates alone in its block (its
    lane padded with copies of itself, after the start's pass beside trial 0): the passes simulate only it,
    and its estimate and covariance are bit for bit those it gets beside trial 0 all the way, and alone."""
    run = simulate_trials(plan, np.arange(2))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    both = didim_chunk(plan, run, fits, [0, 1])
    alone = didim_chunk(plan, run, fits, [1])[1]
    settled = dict(fits, consistent_theta=fits["consistent_theta"].copy())
    settled["consistent_theta"][0] = both[0][0]
    exact, moving = didim._pass, []

    def spy(plan, thetas, y, trials, *args):
        moving.append(tuple(trials))
        return exact(plan, thetas, y, trials, *args)

    monkeypatch.setattr(didim, "_pass", spy)
    out = didim_chunk(plan, run, settled, [0, 1])
    assert moving[0] == (0, 1) and set(moving[1:]) == {(1,)}, moving
    assert out[0][2] == out[1][2] == both[1][2] == alone[2] == "ok"
    for got in (both[1], alone):
        np.testing.assert_array_equal(out[1][0], got[0])
        np.testing.assert_array_equal(out[1][1], got[1])


@pytest.mark.slow
def test_a_lane_of_a_full_block_gets_the_same_bits_wherever_it_sits(plan):
    """A block of ``LANES`` lanes a device (4 models on one device, 8 on two; the starts scaled each by its own factor):
    reversed, every model's closed loop, fit and covariance are the same bits (each lane runs the vector loop;
    with 5 a device this test fails here, 25 of the 65 estimates differing, as on the Panda: docs/performance.md)."""
    ndev = len(jax.devices())
    run = simulate_trials(plan, np.arange(2))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    rows = tuple(int(r) for r in fits["rows"])
    s = plan.setting
    band = didim._band_matrix(int(fits["qf"].shape[1]), s["sample_step"], s["cutoff_hz"], rows)
    width = didim.LANES * ndev
    pick = np.arange(width) % 2
    thetas = fits["consistent_theta"][pick] * (1.0 + 0.01 * np.arange(width))[:, None]
    y = np.einsum("rs,tsn->trn", band, np.asarray(run["tau"], dtype=float)[pick])
    args = (width, band, jnp.asarray(np.ascontiguousarray(band.T)), didim._prior(plan), ndev)
    ahead = didim._pass(plan, thetas, y, np.arange(width), *args)
    back = didim._pass(plan, thetas, y, np.arange(width)[::-1], *args)
    assert ahead[2].all()  # every closed loop finite
    for a, b in zip(ahead, back, strict=True):
        np.testing.assert_array_equal(a, b[::-1])


@pytest.mark.slow
def test_a_model_whose_closed_loop_diverges_is_a_status(plan):
    """A start whose model cannot follow the reference (masses and inertias negated: its mass matrix is
    negative definite) is ``diverged`` with no estimate; its chunk neighbour is the same as alone."""
    run = simulate_trials(plan, np.arange(2))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    alone = didim_chunk(plan, run, fits, [0])[0]
    broken = dict(fits)
    broken["consistent_theta"] = fits["consistent_theta"].copy()
    broken["consistent_theta"][1] *= -1.0
    out = didim_chunk(plan, run, broken, [0, 1])
    assert out[1][:3] == (None, None, "diverged")
    assert out[0][2] == alone[2] == "ok"
    np.testing.assert_array_equal(out[0][0], alone[0])


@pytest.mark.slow
def test_a_step_that_raises_the_criterion_is_cut(plan, monkeypatch):
    """Each pass's fit made to overshoot fivefold (``θ + 5 (θ_fit − θ)``: as a plain iteration, a map whose
    slope at the fixed point is −4, which oscillates away from it) still ends ``ok``, its held-out torque
    below its start's (consistent LS) and IDIM-LS's: full steps that raise DIDIM's criterion are not taken,
    cut ones are. Not at the same point: the search stops at the first point from which no cut step lowers
    the criterion, and another path reaches another such point (a known weakness of a search along an
    approximate Gauss–Newton step; measured here: held-out 0.0412 N m against 0.0382 without the overshoot,
    up to 0.24 std apart in the parameters)."""
    run = simulate_trials(plan, np.arange(2))
    fits = batched_fits(plan, run, ("idim_ls", "idim_ls_consistent"))
    exact = didim._block

    def overshoot(plan, thetas, *args):
        theta, *rest = exact(plan, thetas, *args)
        return (thetas + 5.0 * (theta - thetas), *rest)

    monkeypatch.setattr(didim, "_block", overshoot)
    cut = didim_chunk(plan, run, fits, [0, 1])
    for k in (0, 1):
        assert cut[k][2] == "ok"
        held = validation_rmse(plan, cut[k][0])
        assert held < validation_rmse(plan, fits["consistent_theta"][k])
        assert held < validation_rmse(plan, fits["ls_theta"][k])
