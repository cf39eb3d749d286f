"""``shooting_hybrid.hybrid_steps`` (the trust region, then Gauss–Newton with a line search) on a small least
squares problem given as normal equations: a Rosenbrock valley in two parameters ``φ`` with one segment's state
``x`` tied to ``φ₁`` and an inconsistent row (a residual that stays at the optimum), against
``scipy.optimize.least_squares`` run to tight tolerances on the same residuals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import least_squares

from jaxid.estimate.logs.shooting import NormalEquations
from jaxid.estimate.logs.shooting_hybrid import hybrid_steps
from jaxid.estimate.logs.shooting_solvers import gauss_newton_steps, solve


def _residuals(z):
    a, b, x = z
    return np.array([10 * (b - a**2), 1 - a, 3 * (x - b), x - 1.5])


def _jacobian(z):
    a, b, x = z
    return np.array([[-20 * a, 10, 0], [-1, 0, 0], [0, -3, 3], [0, 0, 1.0]])


def _normal(par, states):
    z = np.concatenate([par, states.ravel()])
    r, jac = _residuals(z), _jacobian(z)
    jp, jx = jac[:, :2], jac[:, 2:]
    ne = NormalEquations(
        jp.T @ jp,
        (jp.T @ jx)[None],
        (jx.T @ jx)[None],
        np.zeros((0, 1, 1)),
        jp.T @ r,
        (jx.T @ r)[None],
        0.5 * r @ r,
        np.zeros((1, 1)),
    )
    return ne, None


def _cost(par, states):
    r = _residuals(np.concatenate([par, states.ravel()]))
    return 0.5 * r @ r


START = (np.array([-1.2, 1.0]), np.array([[0.0]]))


def test_the_hybrid_reaches_the_least_squares_optimum():
    """From Rosenbrock's start (scipy's tolerances off) the hybrid stops ``ok`` on its stationarity certificate,
    which only its second phase gives, at scipy's optimum to 1e-6 within 40 passes."""
    reference = least_squares(
        _residuals, np.concatenate([START[0], START[1].ravel()]), jac=_jacobian, xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    sol = solve(hybrid_steps(*START, max_evaluations=40, stationarity=1e-12, ftol=0, xtol=0, gtol=0), _normal, _cost)
    assert sol.status == "ok" and sol.message.startswith("stationary"), sol.message
    np.testing.assert_allclose(np.concatenate([sol.par, sol.states.ravel()]), reference.x, atol=1e-6)
    assert sol.normal.cost == pytest.approx(reference.cost, rel=1e-9)


def test_the_hybrid_s_budget_counts_both_phases():
    """A budget too small for the valley ends ``max_iterations`` with exactly that many passes."""
    sol = solve(hybrid_steps(*START, max_evaluations=6), _normal, _cost)
    assert sol.status == "max_iterations" and sol.evaluations == 6


@pytest.mark.parametrize("solver", ["hybrid", "gauss_newton"])
def test_the_last_point_is_tested_when_the_budget_is_spent(solver):
    """The stopping tests run at the last point reached even with no pass left: given exactly the passes an
    unlimited fit takes, the fit ends ``ok`` at the same point with the same certificate (it ended at the limit
    with the point untested). One pass fewer ends ``max_iterations``."""

    def fit(budget):
        if solver == "hybrid":
            steps = hybrid_steps(*START, max_evaluations=budget, stationarity=1e-12, ftol=0, xtol=0, gtol=0)
            return solve(steps, _normal, _cost)
        steps = gauss_newton_steps(*START, max_evaluations=budget, stationarity=1e-12, ftol=0, xtol=0)
        return solve(steps, _normal, _cost)[0]

    free = fit(200)
    assert free.status == "ok" and free.message.startswith("stationary") and free.evaluations < 200
    exact = fit(free.evaluations)
    assert (exact.status, exact.message, exact.evaluations) == (free.status, free.message, free.evaluations)
    np.testing.assert_array_equal(exact.par, free.par)
    assert fit(free.evaluations - 1).status == "max_iterations"


def test_a_lost_decrease_certifies_nothing():
    """``decrease_holds``: a computed undamped decrease below ``½ |g|² / tr(JᵀJ)`` (no gradient ``Jᵀr`` has a smaller
    one) is the factorisation's loss, not stationarity: the exact decrease of the Rosenbrock problem's normal
    equations holds; the same equations with a gradient outside the range of ``JᵀJ`` (a broken factorisation's
    view: its pseudo-inverse gives 0) hold no certificate, so Gauss–Newton's step carries no bound there."""
    from jaxid.estimate.logs.shooting import Factor, decrease_holds, undamped_decrease
    from jaxid.estimate.logs.shooting_solvers import plain_step

    ne, _ = _normal(*START)
    bound = undamped_decrease(ne)
    assert (
        bound > 0
        and decrease_holds(ne, bound)
        and plain_step(ne, Factor(ne, 0 * ne.g_par, 0 * ne.g_x), 0.0, START[0]).bound == bound
    )
    assert not decrease_holds(ne, 0.0) and not decrease_holds(ne, -1.0)
    singular = ne._replace(a=np.diag([1.0, 0.0]), b=np.zeros_like(ne.b), g_par=np.array([0.0, 2.0]), g_x=0 * ne.g_x)
    assert undamped_decrease(singular) <= 1e-12 and not decrease_holds(singular, undamped_decrease(singular))
    assert plain_step(singular, Factor(singular, 0 * singular.g_par, 0 * singular.g_x), 0.0, START[0]).bound is None
    assert decrease_holds(ne._replace(g_par=0 * ne.g_par, g_x=0 * ne.g_x), 0.0)  # no gradient: stationary
