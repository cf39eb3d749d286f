"""Physically consistent output error: multiple shooting over physically consistent arms.

The cost is ``output_error``'s (``½ |r|²``: the angle residuals of every segment and the continuity
gaps, ``jaxid.estimate.logs.output_error``), minimised over the initial states ``x`` and the standard
parameters ``φ`` of a **physically consistent** arm (``θ = to_model(φ)``, ``J_i ⪰ 0``, ``Ia, fv, fc ≥ 0``:
``jaxid.estimate.consistency``), the boundary of that set included.

**Solver: constrained Gauss–Newton** (Levenberg–Marquardt damped). At the iterate ``(φ_k, x_k)`` a pass
gives the normal equations of the ``θ`` problem (``shooting.normal_equations``); the damped model
``½ δᵀ(JᵀJ + μ D²)δ + gᵀδ`` minimised over the states' steps is a convex quadratic in ``δθ`` (the
Schur complement ``S_μ`` and the reduced gradient, ``shooting.Factor``), and ``δθ = to_model(φ) − θ_k`` is
minimised over consistent ``φ`` by ``consistent_least_squares`` on the rows ``Lᵀ K`` (``S_μ = L Lᵀ``,
``K = ∂θ/∂φ``), its prior ``φ_k`` (a proximal term ``ρ`` times the mean curvature, which vanishes at a
fixed point and keeps the directions ``θ`` does not see where they are): the interior-point solver
with its certified duality gap, so a step may end on the consistent set's boundary (a singular
``J_i``, a friction at 0) in one go. The states follow (``δx = C_μ⁻¹(−g_x − Bᵀδθ)``). A trial point is
simulated without the Jacobian; the gain ratio (actual over predicted decrease of the undamped model)
accepts it and updates ``μ`` (Nielsen's rule; ``D²`` the largest diagonal of ``JᵀJ`` met): the loop
``shooting_solvers.gauss_newton``, shared with plain output error, this module giving its step. It stops
(status ``"ok"``) as the plain solver does, ``ftol`` (an accepted step with gain ratio > 1/4 lowering
the cost by less than ``ftol`` times it) or ``xtol`` (step against the unknowns' norm), or on
**stationarity**: with ``μ ≤ 1e-9`` (undamped to working precision), the step's predicted decrease
plus half its subproblem's certified duality gap (in ``‖·‖²``) below ``stationarity`` (1e-6) times
the cost: the linearised constrained problem cannot lower the cost by more, a first-order (KKT)
certificate, checked before the trial point (that step is not taken), far below the statistical resolution of the cost (1e-6 of it is 0.09-0.3 on the UR5
benchmark, where ``σ̂² / 2``, the cost of one standard deviation in any direction, is 37-140: residuals
of 9-17 angle-noise stds). Else ``"max_iterations"`` after
``max_iterations`` trial points. The subproblem's gap cannot be certified much below ~5e-8 of the cost
(cancellation in the dual bound against ``θᵀ S θ``), and the interior point's centres stop short of the
boundary by that much, so near a boundary optimum the steps gain ~1e-8-1e-7 of the cost each: the
stationarity test ends that tail.

Measured (``benchmark_ur5``, trials 0-2 of ``consistency_rich`` / ``consistency_poor``, load 4.5-5.5 on 2
cores): all ``"ok"`` in 17-19 / 37-75 passes, 15-21 s / 24-62 s (the log-Cholesky route: all
``max_iterations`` at 100, 66-150 s), costs 2.6-36 % lower than that route's last iterate, 16-74 % above
the plain fit's; held-out torque 0.096-0.157 / 0.055-0.087 N m (plain 0.105-0.172 / 0.083-0.121).

Why not ``output_error`` with a parametrisation (``θ = to_model(standard_from_unconstrained(z))``,
log-Cholesky ``z``)? Where the constrained optimum lies on the boundary (some ``z → −∞``) its gradients
vanish and the trust region crawls: on ``benchmark_ur5``'s ``consistency_rich`` trial 0 the cost still
190 595 after 100 passes (every step accepted), against 156 043 for the plain fit in 6.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ...types import Status
from ..consistency import consistent_least_squares, is_physically_consistent
from .data import FilteredLog, Known, Regressor
from .idim import Identification
from .output_error import CHUNK_SEGMENTS, _covariance, shooting_identification
from .shooting import model_decrease
from .shooting_passes import shooting_problem
from .shooting_solvers import STATIONARITY, Step, gauss_newton

__all__ = ["output_error_consistent"]

#: ``ρ`` of the step's proximal term ``λ ‖φ − φ_k‖²``, ``λ = ρ · tr(WᵀW) / 14 n``: it only makes the step
#: unique along the directions ``θ`` does not see. Larger, it makes the steps crawl where the
#: constraints couple those directions to ``θ``'s (UR5 ``consistency_poor`` trial 0: ``ρ = 1e-9`` or a
#: ``1e-6`` on the null space of ``K`` alone, 20-30 lower per step at a cost of 2.2e5, ``max_iterations``).
PROXIMAL = 1e-15

#: The steps' certified duality gap, relative to the fit's ``‖r‖²`` (well below ``ftol``).
GAP = 1e-7


def output_error_consistent(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    consistent,
    start_standard,
    *,
    segment_s: float = 0.5,
    stride: int = 5,
    continuity_weight: float = 100.0,
    max_iterations: int = 100,
    known: Known | None = None,
    chunk_segments: int = CHUNK_SEGMENTS,
    substeps: int | None = None,
    lags: int | None = None,
    covariance: str = "inputs",
    torque_std=None,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    damping: float = 1e-4,
    stationarity: float = STATIONARITY,
) -> Identification:
    """Physically consistent multiple-shooting output error (module docstring).

    Args:
        logs, regressor, names: as ``output_error``. consistent: the model's ``ConsistentMap`` (its
            ``arm`` and ``to_model``). start_standard: ``(14 n,)`` a physically consistent start (e.g. the
            consistent least squares on IDIM-LS's rows; the boundary allowed).
        segment_s, stride, continuity_weight, known, chunk_segments, substeps, lags, covariance,
            torque_std: as ``output_error``.
        max_iterations: trial points (passes) allowed. ftol, xtol: the stopping tolerances.
        damping: the starting ``μ`` (relative to ``D²``).

    Returns ``output_error``'s ``Identification`` with ``standard`` the fitted standard parameters; the
    notes add the steps, ``μ``, the number of active constraints and the largest duality gap of the
    steps' subproblems. Raises ``ValueError`` as ``output_error`` does, or for an inconsistent start.
    """
    names = tuple(names)
    covariance = _covariance(covariance, lags, torque_std, logs)
    phi = jnp.asarray(start_standard, dtype=float)
    if not bool(is_physically_consistent(phi)):
        raise ValueError("output_error_consistent: start_standard must be a physically consistent arm.")
    to_model = consistent.to_model  # e.g. a bound method of a module holding arrays: not jit's static key
    jacobian = jax.jacfwd(to_model)
    theta = np.asarray(to_model(phi), dtype=float)
    if theta.shape != (len(names),):
        raise ValueError(f"output_error_consistent: to_model gives {theta.shape}, not the {len(names)} parameters.")
    problem = shooting_problem(
        logs, regressor, theta, segment_s, stride, continuity_weight, known, None, chunk_segments, substeps
    )

    def constrained_step(ne, factor, mu, theta_k, phi):
        """The step ``δθ = to_model(φ_t) − θ`` with ``φ_t`` the consistent least squares on the damped
        model's Schur rows (module docstring); the states follow. Its stationarity bound (undamped to
        working precision, ``μ ≤ 1e-9``, and the subproblem solved): predicted decrease + ½ duality gap."""
        rhs, y = factor.eliminate(-ne.g_par, -ne.g_x)
        lower = _scaled_cholesky(factor.schur)
        rows = lower.T @ np.asarray(jacobian(phi), dtype=float)
        target = lower.T @ theta_k + np.linalg.solve(lower, rhs)
        # A zero row with target √(2 cost): the subproblem's duality gap is then certified relative to
        # the fit's own ‖r‖² (its rows alone fit exactly where 14 n > p: a relative gap of nothing).
        sub = consistent_least_squares(
            np.vstack([rows, np.zeros((1, rows.shape[1]))]),
            np.append(target, np.sqrt(2 * ne.cost)),
            consistent.arm,
            prior=phi,
            start=phi,
            regularisation=PROXIMAL,
            gap_tolerance=GAP,
        )
        d_par = np.asarray(to_model(sub.standard), dtype=float) - theta_k
        d_x = factor.states(y, d_par)
        bound = None
        if mu <= 1e-9 and int(sub.status) == 0:
            bound = model_decrease(ne, d_par, d_x) + 0.5 * float(sub.duality_gap)
        info = (int(sub.active), float(sub.duality_gap) / max(float(sub.cost), 1e-300), int(sub.status))
        return Step(d_par, d_x, sub.standard, bound, info)

    sol, phi, infos, mu = gauss_newton(
        problem.linearise,
        theta,
        problem.x0,
        max_evaluations=max_iterations,
        evaluate=problem.evaluate,
        step=constrained_step,
        carry=phi,
        ftol=ftol,
        xtol=xtol,
        damping=damping,
        stationarity=stationarity,
    )
    steps = sol.evaluations - 1
    active = infos[-1][0] if infos else 0
    worst_gap = max((i[1] for i in infos), default=0.0)
    unfinished = sum(i[2] != int(Status.SUCCESS) for i in infos)
    sol = sol._replace(par=np.asarray(phi))
    ne, extra = sol.normal, sol.extra
    blocks, theta_hat = extra
    note = (
        f"solver: constrained Gauss–Newton, {steps} steps, μ = {mu:.2g}, {active} active consistency constraints, "
        f"subproblems' relative duality gap ≤ {worst_gap:.1e} ({unfinished} of the accepted at their step limit); "
        f"{sol.message}"
    )
    return shooting_identification(
        problem, names, ne, blocks, theta_hat, sol, (*covariance, logs), note, standard=np.asarray(phi, dtype=float)
    )


def _scaled_cholesky(s: np.ndarray) -> np.ndarray:
    """``L`` with ``L Lᵀ = s`` (symmetric positive semi-definite), by a Cholesky factorisation of the
    Jacobi-scaled matrix (a ridge of 1e-12 where that is not positive definite)."""
    d = np.sqrt(np.abs(np.diag(s)))
    d = np.where(d > 0, d, 1.0)
    scaled = 0.5 * (s + s.T) / np.outer(d, d)
    try:
        lower = np.linalg.cholesky(scaled)
    except np.linalg.LinAlgError:
        lower = np.linalg.cholesky(scaled + 1e-12 * np.eye(len(d)))
    return d[:, None] * lower
