"""The solvers of multiple shooting on its normal equations (``jaxid.estimate.logs.shooting``).

``gauss_newton``: Levenberg–Marquardt-damped Gauss–Newton (Nielsen's damping update) with a pluggable step
(``plain_step``; output_error_consistent's constrained one), stopping on a stationarity certificate (the
undamped linearised problem's largest decrease, relative to the cost), ``ftol`` or ``xtol``: the loop of
plain and physically consistent output error.

``trust_region_steps``: ``scipy.optimize.least_squares(method="trf", x_scale="jac")`` without bounds, step
for step (scaling ``D`` = the largest column norms of ``J`` met so far; radius update; Moré's
iteration for the Levenberg–Marquardt parameter ``α`` of the step on the trust region's boundary,
``scipy.optimize._lsq.common.solve_lsq_trust_region``), with each ``α`` solved on the normal
equations instead of an SVD of ``J``. It stops as scipy does: ``ftol`` (relative cost decrease with a
gain ratio above 1/4), ``xtol`` (step norm against the unknowns' norm), ``gtol`` (largest gradient
entry), or after ``max_evaluations`` passes.

**Passes.** Both solvers are generators (``gauss_newton_steps``, ``trust_region_steps``): they yield each
pass they need as a request ``(kind, φ, x)`` (``LINEARISE``: the normal equations there; ``EVALUATE``: the
cost alone) and are sent its answer, and they return their ``Solution``. ``solve`` runs one on one fit's
pass functions (``gauss_newton`` wraps it for Gauss–Newton); ``jaxid.estimate.logs.output_error_batch`` runs many
fits in lockstep, each round's passes of all of them as one compiled program over their segments. The
iterates do not depend on who answers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import NamedTuple

import numpy as np

from .shooting import (
    Factor,
    NormalEquations,
    _normal_product,
    decrease_holds,
    model_decrease,
    parameter_step,
    undamped_decrease,
)

__all__ = [
    "EVALUATE",
    "LINEARISE",
    "Solution",
    "solve",
    "gauss_newton_steps",
    "trust_region_steps",
    "Step",
    "STATIONARITY",
    "SETTLED_COST",
    "gauss_newton",
    "plain_step",
    "converged_message",
    "start_diverged",
    "termination_code",
]


#: A solver's request for the normal equations at a point (answer: ``(NormalEquations, extra)`` or ``None``).
LINEARISE = "linearise"
#: A solver's request for the cost ``½ |r|²`` alone at a point (answer: a float or ``None``).
EVALUATE = "evaluate"


def solve(steps: Generator, linearise: Callable, evaluate: Callable | None = None):
    """Run a solver's generator (``gauss_newton_steps``, ``trust_region_steps``) to its result, answering
    each ``LINEARISE`` request by ``linearise(φ, x)`` and each ``EVALUATE`` request by ``evaluate(φ, x)``."""
    answer = {LINEARISE: linearise, EVALUATE: evaluate}
    request = next(steps)
    while True:
        kind, par, states = request
        try:
            request = steps.send(answer[kind](par, states))
        except StopIteration as stop:
            return stop.value


def gauss_newton(linearise: Callable, par: np.ndarray, states: np.ndarray, *, evaluate: Callable, **options):
    """``gauss_newton_steps(par, states, **options)`` on one fit's passes (``solve``): ``linearise(φ, x)``
    gives ``(NormalEquations, extra)`` or ``None``, ``evaluate(φ, x)`` the cost or ``None``."""
    return solve(gauss_newton_steps(par, states, **options), linearise, evaluate)


def start_diverged() -> ValueError:
    """Output error's error where the start's segment simulations are not finite (both solvers)."""
    return ValueError(
        "output_error: the start's simulations diverged (residuals not finite at the start): its model cannot "
        "be simulated on these logs (e.g. its mass matrix is not positive definite there); start from a "
        "physically consistent estimate (idim_ls_consistent) or check the logs."
    )


def _trust_region_step(ne: NormalEquations, scale_par, scale_x, radius, alpha, rtol=0.01, max_iter=10):
    """``scipy.optimize._lsq.common.solve_lsq_trust_region`` on the normal equations: the step ``δ``
    minimising ``|J δ + r|`` within ``|D δ| ≤ radius`` (``D = diag(scale)``), and its
    Levenberg–Marquardt parameter ``α`` (``(JᵀJ + α D²) δ = −Jᵀr``, Moré's iteration on
    ``φ(α) = |D δ(α)| − radius``)."""
    from scipy.linalg import LinAlgError

    d2_par, d2_x = scale_par**2, scale_x**2

    def step(a, factor=None):
        factor = factor or Factor(ne, a * d2_par, a * d2_x)
        d_par, d_x = factor.solve(-ne.g_par, -ne.g_x)
        norm = np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2))
        q_par, q_x = factor.solve(d2_par * d_par, d2_x * d_x)
        prime = -(np.sum(d2_par * d_par * q_par) + np.sum(d2_x * d_x * q_x)) / norm
        return d_par, d_x, norm - radius, prime

    try:
        gauss_newton = Factor(ne, 0 * d2_par, 0 * d2_x, strict=True)
        full_rank = True
    except LinAlgError:
        full_rank = False
    if full_rank:
        d_par, d_x, phi, prime = step(0.0, gauss_newton)
        if phi <= 0:
            return d_par, d_x, 0.0
    g_norm = np.sqrt(np.sum((ne.g_par / scale_par) ** 2) + np.sum((ne.g_x / scale_x) ** 2))
    upper = g_norm / radius
    lower = -phi / prime if full_rank else 0.0
    if alpha is None or (not full_rank and alpha == 0):
        alpha = max(0.001 * upper, (lower * upper) ** 0.5)
    for _ in range(max_iter):
        if alpha < lower or alpha > upper:
            alpha = max(0.001 * upper, (lower * upper) ** 0.5)
        d_par, d_x, phi, prime = step(alpha)
        if phi < 0:
            upper = alpha
        ratio = phi / prime
        lower = max(lower, alpha - ratio)
        alpha -= (phi + radius) * ratio / radius
        if abs(phi) < rtol * radius:
            break
    d_par, d_x, _, _ = step(alpha)
    shrink = radius / np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2))
    return d_par * shrink, d_x * shrink, alpha


class Solution(NamedTuple):
    """What a solver ends with: the unknowns, the normal equations and whatever the linearisation
    returned beside them (at the last accepted point), the passes made, the Jacobians used (accepted
    points, the start included), status and message."""

    par: np.ndarray
    states: np.ndarray
    normal: NormalEquations
    extra: object
    evaluations: int
    jacobians: int
    status: str
    message: str


_MESSAGES = {
    0: "The maximum number of function evaluations is exceeded.",
    1: "`gtol` termination condition is satisfied.",
    2: "`ftol` termination condition is satisfied.",
    3: "`xtol` termination condition is satisfied.",
    4: "Both `ftol` and `xtol` termination conditions are satisfied.",
}

#: ``gauss_newton``'s stationarity test: stop when the linearised problem (undamped) cannot lower ``½ |r|²``
#: by more than this fraction of it.
STATIONARITY = 1e-6
#: ``gauss_newton``'s convergence in the parameters is tested only where the undamped linearised problem
#: cannot lower the cost by more than this fraction of it (the stds it measures steps against then hold).
SETTLED_COST = 1e-3


class Step(NamedTuple):
    """One damped step of ``gauss_newton`` (what its ``step`` returns): ``d_par``, ``d_x`` the step in the
    linearisation's unknowns (``φ`` and the states); ``carry`` what the loop keeps if the step is accepted
    (e.g. the standard parameters of a constrained step); ``bound`` a certified upper bound on the decrease
    of the **undamped** linearised problem at the current point (``None``: no certificate from this step);
    ``info`` whatever the caller wants back about the accepted steps."""

    d_par: np.ndarray
    d_x: np.ndarray
    carry: object = None
    bound: float | None = None
    info: object = None


def plain_step(ne: NormalEquations, factor: Factor, mu: float, par: np.ndarray, carry=None) -> Step:
    """``gauss_newton``'s unconstrained step: ``(JᵀJ + μ D²) δ = −Jᵀr`` (``factor``), with the undamped model's
    largest decrease (``undamped_decrease``) as its stationarity bound (none where ``decrease_holds`` fails)."""
    d_par, d_x = factor.solve(-ne.g_par, -ne.g_x)
    bound = undamped_decrease(ne)
    return Step(d_par, d_x, carry, bound if decrease_holds(ne, bound) else None)


def termination_code(reduction, ratio, cost, d_par, d_x, par, states, ftol, xtol) -> int:
    """scipy's stopping test after a trial step: 2 (``ftol``: an accepted step with gain ratio > 1/4 lowering
    the cost by less than ``ftol`` of it), 3 (``xtol``: the step against the unknowns' norm), 4 (both), else 0."""
    step_norm = np.sqrt(np.sum(d_par**2) + np.sum(d_x**2))
    x_norm = np.sqrt(np.sum(par**2) + np.sum(states**2))
    small_cost = reduction < ftol * cost and ratio > 0.25
    small_step = step_norm < xtol * (xtol + x_norm)
    return 4 if small_cost and small_step else 2 if small_cost else 3 if small_step else 0


def gauss_newton_steps(
    par: np.ndarray,
    states: np.ndarray,
    *,
    max_evaluations: int,
    step: Callable[[NormalEquations, "Factor", float, np.ndarray, object], Step] = plain_step,
    carry: object = None,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    damping: float = 1e-4,
    stationarity: float = STATIONARITY,
    parameter_tolerance: float | None = None,
    dof: int | None = None,
) -> Generator[tuple[str, np.ndarray, np.ndarray], object, tuple[Solution, object, list, float]]:
    """Minimise ``½ |r|²`` over ``(φ, x)`` by Gauss–Newton damped à la Levenberg–Marquardt with Nielsen's
    update of the damping: the one loop of plain and physically consistent output error.

    A generator of pass requests (module docstring, "Passes"; ``gauss_newton`` runs it on one fit's
    passes). At the iterate a pass gives the normal equations (a ``LINEARISE`` request, answered with
    ``(NormalEquations, extra)``, ``None`` where not finite). ``step(ne, factor, μ, φ, carry)`` (``factor``: ``JᵀJ + μ D²`` factorised, ``D²`` the
    largest diagonal of ``JᵀJ`` met so far) proposes ``(δφ, δx)`` (``plain_step``: the damped Gauss–Newton
    step; ``output_error_consistent``'s: a constrained one). The trial point is simulated without the
    Jacobian (an ``EVALUATE`` request: the cost, ``None`` where not finite); its gain ratio ``ρ`` (actual over predicted decrease of the undamped model,
    ``model_decrease``) accepts it (any decrease; then one Jacobian pass there) and sets ``μ`` (Nielsen:
    accepted ``μ × max(1/3, 1 − (2ρ − 1)³)``; rejected ``μ × ν``, ``ν`` doubling with each rejection in a
    row), starting at ``damping``.

    Stops (status ``"ok"``) on **stationarity**, before the trial: the step's ``bound`` (a certified upper
    bound on the decrease of the undamped linearised problem at the iterate) at most ``stationarity``
    times the cost; with a ``parameter_tolerance`` (and the residuals' degrees of freedom ``dof``), when the
    undamped step moves no fitted parameter by more than that many of its standard deviations
    (``parameter_step``: converged in the parameters while the nuisance states may still creep, the slow
    tail of a large-residual problem), tested once the step's ``bound`` is at most ``SETTLED_COST`` of the
    cost (``σ̂²``, hence the stds, then within 0.1 % of the optimum's); or on ``ftol`` (a trial point with ``ρ > 1/4`` lowering the cost by less than ``ftol``
    times it) or ``xtol`` (the step's norm against the unknowns'), scipy's tests, where an accepted last
    step is still taken. Else ``"max_iterations"`` after ``max_evaluations`` passes (trial points and the
    start; the last point reached is tested first, with no pass left).

    Returns ``(Solution, carry, infos, μ)``: the solution at the last accepted point (``par``: its ``φ``),
    its ``carry``, the accepted steps' ``info`` and the last damping. Raises ``ValueError`` if the start is
    not finite."""
    first = yield LINEARISE, par, states
    if first is None:
        raise start_diverged()
    ne, extra = first
    evaluations = jacobians = 1
    d2_par, d2_x = (np.where(c > 0, c, 1.0) ** 2 for c in ne.column_norms())
    mu, nu = float(damping), 2.0
    termination, certified, infos, checked = None, None, [], None
    while termination is None:
        proposal = step(ne, Factor(ne, mu * d2_par, mu * d2_x), mu, par, carry)
        if proposal.bound is not None and proposal.bound <= stationarity * ne.cost:
            termination, certified = 5, max(proposal.bound, 0.0) / ne.cost
            break
        # Convergence in the parameters, once the cost (so σ̂² and the stds) can fall by at most
        # ``SETTLED_COST`` of itself: a far-off start's inflated σ̂² must not make its steps look small.
        settled = proposal.bound is not None and proposal.bound <= SETTLED_COST * ne.cost
        if parameter_tolerance is not None and settled and ne is not checked:  # once per iterate
            checked, moved = ne, parameter_step(ne, dof)
            if moved <= parameter_tolerance:
                termination, certified = 6, moved
                break
        if evaluations >= max_evaluations:  # after the tests: the last point linearised is certified too
            break
        d_par, d_x = proposal.d_par, proposal.d_x
        predicted = model_decrease(ne, d_par, d_x)
        trial_cost = yield EVALUATE, par + d_par, states + d_x
        evaluations += 1
        reduction = -np.inf if trial_cost is None or not np.isfinite(trial_cost) else ne.cost - trial_cost
        ratio = reduction / predicted if predicted > 0 else (1.0 if reduction == predicted == 0 else 0.0)
        termination = termination_code(reduction, ratio, ne.cost, d_par, d_x, par, states, ftol, xtol) or termination
        trial = (yield LINEARISE, par + d_par, states + d_x) if reduction > 0 else None
        if trial is None:
            mu, nu = mu * nu, 2.0 * nu
            continue
        par, states, carry = par + d_par, states + d_x, proposal.carry
        ne, extra = trial
        jacobians += 1
        infos.append(proposal.info)
        mu, nu = mu * max(1 / 3, 1 - (2 * ratio - 1) ** 3), 2.0
        col_par, col_x = ne.column_norms()
        d2_par, d2_x = np.maximum(d2_par, col_par**2), np.maximum(d2_x, col_x**2)
    status = "max_iterations" if termination is None else "ok"
    message = converged_message(termination, certified)
    return Solution(par, states, ne, extra, evaluations, jacobians, status, message), carry, infos, mu


def converged_message(termination: int | None, certified: float | None = None) -> str:
    """A solver's message for its ``termination`` code: scipy's (0-4), or 5 (stationary: the undamped
    linearised problem lowers the cost by at most ``certified`` of it), 6 (converged in the parameters: the
    undamped step moves none by more than ``certified`` of its standard deviation)."""
    if termination == 5:
        return f"stationary: the linearised problem lowers the cost by at most {certified:.1e} of it"
    if termination == 6:
        return (
            f"converged in the parameters: the undamped Gauss–Newton step moves none by more than "
            f"{certified:.1e} of its standard deviation"
        )
    return _MESSAGES[termination or 0]


def trust_region_steps(
    par: np.ndarray,
    states: np.ndarray,
    *,
    max_evaluations: int,
    evaluate_first: bool = True,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    gtol: float = 1e-8,
    handoff: tuple[float, float] | None = None,
    resume: tuple | None = None,
) -> Generator[tuple[str, np.ndarray, np.ndarray], object, Solution]:
    """Minimise ``½ |r|²`` over ``(φ, x)``: ``scipy.optimize.least_squares(method="trf", x_scale="jac")``
    without bounds, step for step, its trust-region subproblem solved on the normal equations
    (module docstring).

    A generator of pass requests (module docstring, "Passes"): a ``LINEARISE`` request is answered with
    ``(NormalEquations, extra)`` at that point, or ``None`` where the residuals are not finite (the radius
    then shrinks); a pass at a trial point gives its Jacobian too, so an accepted point costs no second
    pass. With ``evaluate_first`` (default) a trial point is first only evaluated (an ``EVALUATE`` request:
    the cost ``½ |r|²`` alone, or ``None`` where not finite; a pass without the Jacobian), and linearised
    once accepted: rejected steps then cost a residual pass, not a Jacobian. The iterates are the same.
    Raises ``ValueError`` if the start is not finite. ``status``: ``"ok"`` (a tolerance met) or
    ``"max_iterations"`` (``max_evaluations`` passes made). ``solve`` runs it on one fit's passes.
    ``handoff = (near, crawl)``: also stop (status ``"handoff"``) at an iterate where the undamped Gauss–Newton
    model promises a decrease of at most ``near`` times the cost, or where the last step lowered the cost by
    less than ``crawl`` times what that model promised before it (``shooting_hybrid``'s first phase);
    ``resume = (ne, extra, evaluations, jacobians)``: start from a point already linearised (its normal
    equations and extra), with the passes and Jacobians already spent (``shooting_hybrid`` going back)."""
    if resume is None:
        first = yield LINEARISE, par, states
        if first is None:
            raise start_diverged()
        ne, extra = first
        evaluations = jacobians = 1
    else:
        ne, extra, evaluations, jacobians = resume
    scale_par, scale_x = (np.where(c > 0, c, 1.0) for c in ne.column_norms())
    radius = float(np.sqrt(np.sum((par * scale_par) ** 2) + np.sum((states * scale_x) ** 2))) or 1.0
    alpha = 0.0
    termination, previous = None, None
    while True:
        if max(np.abs(ne.g_par).max(initial=0.0), np.abs(ne.g_x).max(initial=0.0)) < gtol:
            termination = 1
        if termination is not None or evaluations >= max_evaluations:
            break
        if handoff is not None and (resume is None or jacobians > resume[3]):  # resumed: one step first
            promised = undamped_decrease(ne)
            crawling = previous is not None and previous[1] - ne.cost < handoff[1] * previous[0]
            if promised <= handoff[0] * ne.cost or crawling:
                return Solution(par, states, ne, extra, evaluations, jacobians, "handoff", "handed over")
            previous = (promised, ne.cost)
        reduction, trial = -1.0, None
        while reduction <= 0 and evaluations < max_evaluations:
            d_par, d_x, alpha = _trust_region_step(ne, scale_par, scale_x, radius, alpha)
            n_par, n_x = _normal_product(ne, d_par, d_x)
            predicted = -(0.5 * (d_par @ n_par + np.sum(d_x * n_x)) + ne.g_par @ d_par + np.sum(ne.g_x * d_x))
            if not evaluate_first:
                trial = yield LINEARISE, par + d_par, states + d_x
                trial_cost = None if trial is None else trial[0].cost
            else:
                trial, trial_cost = None, (yield EVALUATE, par + d_par, states + d_x)
            evaluations += 1
            step_h = float(np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2)))
            if trial_cost is None or not np.isfinite(trial_cost):
                radius = 0.25 * step_h
                continue
            reduction = ne.cost - trial_cost
            if predicted > 0:
                ratio = reduction / predicted
            else:
                ratio = 1.0 if predicted == reduction == 0 else 0.0
            new_radius = radius
            if ratio < 0.25:
                new_radius = 0.25 * step_h
            elif ratio > 0.75 and step_h > 0.95 * radius:
                new_radius = 2.0 * radius
            termination = (
                termination_code(reduction, ratio, ne.cost, d_par, d_x, par, states, ftol, xtol) or termination
            )
            if termination:
                break
            alpha *= radius / new_radius
            radius = new_radius
        if reduction > 0 and trial is None:
            trial = yield LINEARISE, par + d_par, states + d_x
            if trial is None:  # finite residuals but a Jacobian that is not: a rejected step
                radius = 0.25 * step_h
                continue
        if reduction > 0:
            par, states = par + d_par, states + d_x
            ne, extra = trial
            jacobians += 1
            col_par, col_x = ne.column_norms()
            scale_par, scale_x = np.maximum(scale_par, col_par), np.maximum(scale_x, col_x)
    status = "max_iterations" if termination is None else "ok"
    return Solution(par, states, ne, extra, evaluations, jacobians, status, _MESSAGES[termination or 0])
