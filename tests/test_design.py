"""Excitation design: predicted RMSE against scale for linear-model and nonlinear estimators."""

import math

import numpy as np
import pytest

import jaxid
from jaxid.design import NONLINEAR, design_scale

PAPER_STD = 0.1 / math.sqrt(12)
SCALES = (0.1, 0.3, 1.0, 2.0)


@pytest.fixture(scope="module")
def design(arm):
    # Δ = 0.02 s (the default is 0.01): half the samples to simulate, fit and differentiate, and the
    # same picture (the same best scales, bias to 1e-6, the 1/s² bound, the infeasible scale 2).
    return design_scale(
        arm,
        jaxid.table2("split"),
        noise_std=PAPER_STD,
        scales=SCALES,
        estimators=("ml", NONLINEAR),
        sample_step=0.02,
    )


def test_chosen_scale_minimises_predicted_rmse(design):
    table, best = design["table"], design["best"]
    for _, row in best.iterrows():
        rows = table[(table.estimator == row.estimator) & table.eligible]
        assert row.objective == pytest.approx(rows.objective.min())
        assert row.scale == pytest.approx(rows.loc[rows.objective.idxmin(), "scale"])
        assert np.isfinite(row.objective)


def test_nonlinear_optimum_at_larger_scale_than_linear(design):
    best = design["best"].set_index("estimator")
    assert best.loc[NONLINEAR, "scale"] > best.loc["ml", "scale"]
    assert best.loc[NONLINEAR, "objective"] < best.loc["ml", "objective"]


def test_bias_and_bound_behave(design):
    table = design["table"]
    ml = table[(table.estimator == "ml") & table.feasible].set_index(["scale", "parameter"])
    # The linear bound falls as 1/s² exactly (the linear model is linear in the torque).
    np.testing.assert_allclose(ml.loc[(0.1, "m2"), "crlb_std"] / ml.loc[(0.3, "m2"), "crlb_std"], 3.0, rtol=1e-9)
    # The linearisation bias grows with the scale.
    assert abs(ml.loc[(1.0, "m2"), "bias"]) > abs(ml.loc[(0.1, "m2"), "bias"])
    # The nonlinear estimator is unbiased where its fit converges.
    nl = table[(table.estimator == NONLINEAR) & table.feasible]
    assert np.all(np.abs(nl.bias / nl.truth) < 1e-6)


def test_over_the_top_scale_is_infeasible(design):
    # At twice Table 2 the simulated arm does not settle on the shooting orbit (link 2 goes over
    # the top): flagged, with an infinite objective, never silently used.
    rows = design["table"][design["table"].scale == 2.0]
    assert not rows.feasible.any()
    assert not rows.eligible.any()
    assert np.all(np.isinf(rows.objective))
