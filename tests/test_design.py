"""Excitation design: predicted RMSE against scale for linear-model and nonlinear estimators."""

import math

import jax
import numpy as np
import pytest

import jaxid
from jaxid.estimate import ml
from jaxid.excitation.multisine_criteria import NONLINEAR
from jaxid.excitation.multisine_design import design_scale

# Every test here uses the module's design sweep (11 s warm): the quick tier leaves the file out (README, Development).
pytestmark = pytest.mark.slow

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


def _numpy_crlb_masses_friction(excitation, noise_std, sample_step, periods=1):
    """The linear model's Cramér–Rao bound for (m1, m2, fv1, fv2), written out in NumPy.

    Point-mass arm hanging at q0 = 0 (m = 5, 1.5 kg, l = 1, 0.8 m, Fv = diag(5, 2)), angle phasors
    Q(ω; θ) = (K − ω² M + jω C)⁻¹ U. On P whole periods of N samples each line's cosine and sine
    have Σ cos² = Σ sin² = N P / 2, so the Fisher information is
    F = (N P / (2σ²)) Σ_lines Σ_joints Re(∂Q/∂θ)ᴴ(∂Q/∂θ), with ∂Q/∂θ by central differences."""
    omega = np.asarray(excitation.line_frequencies)
    u = np.asarray(excitation.phasors())
    l1, l2, g = 1.0, 0.8, 9.81

    def phasors(theta):
        m1, m2, f1, f2 = theta
        mass = np.array(
            [[(m1 + m2) * l1**2 + m2 * l2**2 + 2 * m2 * l1 * l2, m2 * l2**2 + m2 * l1 * l2], [0.0, m2 * l2**2]]
        )
        mass[1, 0] = mass[0, 1]
        stiffness = g * np.array([[(m1 + m2) * l1 + m2 * l2, m2 * l2], [m2 * l2, m2 * l2]])
        damping = np.diag([f1, f2])
        return np.stack(
            [np.linalg.solve(stiffness - w**2 * mass + 1j * w * damping, uk) for w, uk in zip(omega, u, strict=True)]
        )

    theta = np.array([5.0, 1.5, 5.0, 2.0])
    jac = []
    for i in range(4):
        h = 1e-6 * theta[i]
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        jac.append(((phasors(up) - phasors(down)) / (2 * h)).ravel())
    jac = np.stack(jac, axis=1)  # (2L, p)
    n = round(excitation.period / sample_step)
    fisher = n * periods / (2 * noise_std**2) * np.real(jac.conj().T @ jac)
    return np.linalg.inv(fisher)


def test_objective_recomputed_independently_and_optimum_of_the_sweep(arm, design):
    # For "ml" at each feasible scale of the sweep: bias from ml run directly on the noise-free
    # simulated record, variance from the CRLB written out in NumPy; objective
    # sqrt(mean over (m1, m2) of (bias² + CRLB_ii) / θ_i²). The table's rows must agree, and the chosen
    # scale must be the minimiser of these independent values.
    table, best = design["table"], design["best"].set_index("estimator")
    truth = np.array([5.0, 1.5, 5.0, 2.0])
    discard = jaxid.transient_periods(arm, jaxid.table2("split"))
    base = jaxid.table2("split")

    @jax.jit
    @jax.vmap
    def noise_free_ml(scale):
        ex = base.replace(scale=scale)
        rec = jaxid.simulate(arm, ex, sample_step=0.02, discard_periods=discard)
        return ml(rec, ex, arm, unknowns=("m1", "m2", "fv1", "fv2"), noise_std=PAPER_STD).value

    values = np.asarray(noise_free_ml(np.asarray(SCALES[:3])))
    objectives = {}
    for scale, value in zip(SCALES[:3], values, strict=True):
        bias = value - truth
        var = np.diag(_numpy_crlb_masses_friction(jaxid.table2("split", scale), PAPER_STD, 0.02))
        objectives[scale] = math.sqrt(np.mean((bias[:2] ** 2 + var[:2]) / truth[:2] ** 2))
        rows = table[(table.estimator == "ml") & (table.scale == scale)].set_index("parameter")
        np.testing.assert_allclose(rows.loc[["m1", "m2"], "crlb_std"] ** 2, var[:2], rtol=1e-6)
        assert rows.objective.iloc[0] == pytest.approx(objectives[scale], rel=1e-6)
    assert best.loc["ml", "scale"] == min(objectives, key=objectives.get)
    assert best.loc["ml", "objective"] == pytest.approx(min(objectives.values()), rel=1e-6)


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
