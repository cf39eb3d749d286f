"""Multiple shooting's hybrid solver: Gauss–Newton steps with a line search along the undamped direction, the
trust region where that direction fails (``output_error(solver="hybrid")``, the ``OutputError`` default).

**Why.** With stiff continuity rows (``continuity_weight`` 100: a gap of one noise std costs 10⁴ angle samples)
the cost has narrow curved valleys: a step along the linearisation opens the gaps quadratically. The undamped
Gauss–Newton direction is still good over a fraction of its length (measured on ``benchmark_panda``'s poorly
exciting trials: at a stopped trust region's last iterate, a step of 0.3 of it realised 0.8 of the model's
decrease at that length; the whole step raised the cost), while a damped step turns towards the scaled gradient,
along which the cost curves sharply (a step of 1e-6 of the unknowns' norm along it realised 1/8 of the linear
decrease). The trust region (scipy's ``trf``, ``shooting_solvers.trust_region_steps``) then crawls: on 12 such
trials 6 ended at 30 passes, one with its undamped step still 15 standard deviations long. Far from the optimum
the roles turn: there the Gauss–Newton step can leave the region where the simulations are finite, and the trust
region's robustness is needed.

**The rule.** Line-search phase: at each iterate the undamped step ``d`` (``(JᵀJ) d = −Jᵀr``, the states
eliminated), its length ``t`` first ``min(1, 4 t_last)``, accepted where the cost falls by at least ``ARMIJO`` of
what the model predicts for ``t d``, else shortened to the minimiser of the quadratic through the cost at 0
(value and slope) and at ``t``, kept within ``[0.1 t, 0.5 t]`` (a non-finite cost: ``0.1 t``). An accepted step
shorter than ``HANDBACK``, or none above ``MIN_STEP``, hands over to the trust region, which goes on until the
undamped model promises at most ``HANDOFF[0]`` of the cost or a step of it realises less than ``HANDOFF[1]`` of
that model's promise (it crawls), then back. It stops as ``gauss_newton_steps`` does (stationarity
``STATIONARITY``; convergence in the parameters, ``parameter_tolerance`` standard deviations once the model
promises at most ``SETTLED_COST``; scipy's ``ftol``, ``xtol`` after an accepted step, ``gtol``), in either phase,
with status ``"max_iterations"`` after ``max_evaluations`` passes (trial points and the start, both phases) where
the last point reached does not pass those tests (checked with no pass left).

Measured (``benchmark_panda``'s ``consistency_poor``, 12 trials, 30 passes, from consistent LS): ``ok`` in 9
against the trust region's 6; ``consistency_rich`` (6 trials): ``ok`` in 4-6 passes. Of the three left, given
80 passes: one is ``ok`` after 36; one creeps (its undamped step 0.09 standard deviations after 80, above the
0.05 tolerance); one stays in a valley 18-19 standard deviations from the optimum, where the trust region's
steps lead from its far start (cost 5e4 × the optimum's: the Gauss–Newton steps there are not finite).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from .shooting import Factor, decrease_holds, model_decrease, parameter_step
from .shooting_solvers import (
    EVALUATE,
    LINEARISE,
    SETTLED_COST,
    STATIONARITY,
    Solution,
    converged_message,
    start_diverged,
    termination_code,
    trust_region_steps,
)

__all__ = ["HANDOFF", "HANDBACK", "ARMIJO", "MIN_STEP", "hybrid_steps"]

#: The trust region hands back to the line search where the undamped Gauss–Newton model promises at most
#: ``HANDOFF[0]`` of the cost, or where one of its steps realised less than ``HANDOFF[1]`` of what that model
#: promised before it (the crawl).
HANDOFF = (1e-2, 0.1)
#: A line-search step is accepted where the cost falls by at least this fraction of the model's prediction.
ARMIJO = 0.1
#: Below this step length (of the undamped step) the line search has found no step: back to the trust region.
MIN_STEP = 1e-8
#: An accepted step shorter than this (of the undamped step) says the Gauss–Newton model is poor here: back to the
#: trust region after it.
HANDBACK = 0.1


def hybrid_steps(
    par: np.ndarray,
    states: np.ndarray,
    *,
    max_evaluations: int,
    parameter_tolerance: float | None = None,
    dof: int | None = None,
    stationarity: float = STATIONARITY,
    handoff: tuple[float, float] = HANDOFF,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    gtol: float = 1e-8,
) -> Generator[tuple[str, np.ndarray, np.ndarray], object, Solution]:
    """Minimise ``½ |r|²`` over ``(φ, x)``: Gauss–Newton steps with a line search, the trust region where they
    fail (module docstring). A generator of pass requests like ``trust_region_steps`` (``shooting_solvers``, "Passes");
    returns its ``Solution`` (``jacobians``: the accepted points of both phases). ``parameter_tolerance``
    with ``dof`` (the residuals' degrees of freedom) as in ``gauss_newton_steps``; ``None``: stationarity only.
    Raises ``ValueError`` if the start is not finite."""
    tolerances = dict(ftol=ftol, xtol=xtol, gtol=gtol)
    first = yield LINEARISE, par, states
    if first is None:
        raise start_diverged()
    sol = Solution(par, states, *first, 1, 1, "handoff", "start")
    while True:
        sol = yield from _line_search(sol, max_evaluations, parameter_tolerance, dof, stationarity, **tolerances)
        if sol.status != "handback":
            return sol
        resume = (sol.normal, sol.extra, sol.evaluations, sol.jacobians)
        sol = yield from trust_region_steps(
            sol.par, sol.states, max_evaluations=max_evaluations, handoff=handoff, resume=resume, **tolerances
        )
        if sol.status == "max_iterations":  # the last point's own tests (the trust region has none of them)
            return (yield from _line_search(sol, max_evaluations, parameter_tolerance, dof, stationarity, **tolerances))
        if sol.status != "handoff":
            return sol


def _line_search(sol: Solution, max_evaluations, parameter_tolerance, dof, stationarity, ftol, xtol, gtol):
    """``hybrid_steps``' line-search phase from a ``Solution`` (the start's, or the trust region's hand-off):
    Gauss–Newton steps with a line search (module docstring); its ``Solution``, status ``"handback"`` after a step
    shorter than ``HANDBACK`` or a line search that found no step (the trust region goes on from there)."""
    par, states, ne, extra = sol.par, sol.states, sol.normal, sol.extra
    evaluations, jacobians, t = sol.evaluations, sol.jacobians, 1.0
    termination, certified = None, None
    while termination is None:
        if max(np.abs(ne.g_par).max(initial=0.0), np.abs(ne.g_x).max(initial=0.0)) < gtol:
            termination = 1
            break
        d_par, d_x = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x)).solve(-ne.g_par, -ne.g_x)
        bound = model_decrease(ne, d_par, d_x)
        holds = decrease_holds(ne, bound)  # else the factorisation lost it: no certificate
        if holds and bound <= stationarity * ne.cost:
            termination, certified = 5, max(bound, 0.0) / ne.cost
            break
        if holds and parameter_tolerance is not None and bound <= SETTLED_COST * ne.cost:
            moved = parameter_step(ne, dof)
            if moved <= parameter_tolerance:
                termination, certified = 6, moved
                break
        if evaluations >= max_evaluations:  # after the tests: the last point linearised is certified too
            break
        t, accepted = min(1.0, 4.0 * t), None
        while evaluations < max_evaluations and t >= MIN_STEP:
            cost = yield EVALUATE, par + t * d_par, states + t * d_x
            evaluations += 1
            predicted = model_decrease(ne, t * d_par, t * d_x)
            finite = cost is not None and np.isfinite(cost)
            if finite and ne.cost - cost >= ARMIJO * predicted:
                accepted = yield LINEARISE, par + t * d_par, states + t * d_x
                if accepted is not None:
                    break
                finite = False  # finite residuals, a Jacobian that is not: a shorter step
            if not finite:
                t *= 0.1
                continue
            # c(t) = c₀ − 2 P t + κ t² through the trial (P = bound: the whole step's predicted decrease; slope −2P).
            kappa = (cost - ne.cost + 2 * bound * t) / t**2
            t = float(np.clip(bound / kappa if kappa > 0 else 0.1 * t, 0.1 * t, 0.5 * t))
        if accepted is None:
            if t < MIN_STEP:
                return Solution(par, states, ne, extra, evaluations, jacobians, "handback", "no step")
            break
        reduction = ne.cost - accepted[0].cost
        ratio = reduction / max(predicted, np.finfo(float).tiny)  # the accepted trial's prediction
        termination = termination_code(reduction, ratio, ne.cost, t * d_par, t * d_x, par, states, ftol, xtol) or None
        par, states = par + t * d_par, states + t * d_x
        ne, extra = accepted
        jacobians += 1
        if termination is None and t < HANDBACK:
            return Solution(par, states, ne, extra, evaluations, jacobians, "handback", "short step")
    status = "max_iterations" if termination is None else "ok"
    return Solution(par, states, ne, extra, evaluations, jacobians, status, converged_message(termination, certified))
