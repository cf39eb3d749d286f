"""Time-domain output error with multiple shooting on measured logs.

Simulate the model ``Y(q, q', q'') θ = τ`` under the measured (low-passed) torque and fit the
measured angles. One simulation over a whole 10-s record of a lightly damped, chaotic double
pendulum is not a well-posed fit (the sensitivity to ``θ`` grows exponentially), so the usable
part of each log is cut into segments of ``segment_s`` seconds, each with its **own initial state**
``x_s = (q, q')`` (unknowns, started at the filtered measured state). The residual vector holds

- the angle errors ``(q_sim − q_meas) / σ_j`` every ``stride`` samples of every segment (the
  segment's first sample included, its end excluded: that is the next segment's start), with
  ``σ_j`` the per-joint standard deviation of the measured angle about its filtered value;
- the continuity gaps between consecutive segments of the same log,
  ``w · ((q_end − q_next)/σ, (q'_end − q'_next) · T_seg/σ)`` (a velocity gap times the segment
  length is the angle error it would cause), with ``w = continuity_weight``.

**Streamed normal equations.** The Jacobian in ``(θ, x_1 … x_S)`` is never formed: for ten 50-s runs
of a six-joint arm at 100 Hz it would be 72 000 × 12 000 (7 GB). Each segment's angle block depends
only on ``θ`` and its own ``x_s``, so one compiled program (``_shooting_blocks``) takes a *chunk* of
``chunk_segments`` segments, simulates each with its ``2 n × (p + 2 n)`` sensitivities to ``(θ, x_s)``
(``jaxid.estimate.logs.sensitivities``; ``n`` joints: ``x_s`` has ``2 n`` entries) under ``vmap`` and
returns them already reduced: ``Σ R_θᵀR_θ``, ``Σ R_θᵀr`` and per segment ``R_θᵀR_x``, ``R_xᵀR_x``,
``R_xᵀr``, the end state and its Jacobian. The continuity rows couple consecutive segments, so the
normal matrix ``JᵀJ`` is *bordered block-tridiagonal*: a dense ``θ`` block, a ``θ``–state border, and
a state block that is banded (half-bandwidth ``4 n − 1``). ``jaxid.estimate.logs.shooting`` eliminates
the states by a banded Cholesky factorisation and solves the ``θ`` Schur complement
``A − B C⁻¹ Bᵀ``: memory O(chunk + S (p + 2 n) 2 n), not O(rows × columns). A pass's chunks are at least
one per host thread (they run side by side), a multiple of 8 segments (``shooting_passes.chunk_size``), the last
padded by repeating a segment (its blocks dropped): one compiled program per model and chunk shape, whatever
the logs' lengths. Many independent fits can run in lockstep, each round's passes of all of them as one
program (``jaxid.estimate.logs.output_error_batch``).

**Solver** (``solver="gauss_newton"``, the default): ``shooting_solvers.gauss_newton``, shared with the
physically consistent variant: each step solves ``(JᵀJ + μ D²) δ = −Jᵀr`` on the normal equations (``D²`` the
largest diagonal of ``JᵀJ`` met, ``μ`` from ``damping`` = 1e-6 by Nielsen's rule); a trial point is first
simulated without the Jacobian (``_shooting_residuals``) and linearised only once accepted. It stops (``"ok"``) on
**stationarity** (the undamped model cannot lower the cost by more than ``1e-6`` of it, ``½ gᵀ(JᵀJ)⁻¹g``, far
below the cost of one standard deviation, ``σ̂²/2 ≈ cost/dof``), on **convergence in the parameters** (the
undamped step moves no parameter by more than ``parameter_tolerance`` = 0.05 of its standard deviation, the
states eliminated; tested once the cost can fall by at most ``shooting_solvers.SETTLED_COST`` = 1e-3 of itself),
or on scipy's ``ftol = 1e-8`` / ``xtol = 1e-10``; else ``"max_iterations"`` after ``max_iterations`` passes.
``solver="trust_region"``: ``scipy.optimize.least_squares(method="trf", x_scale="jac")`` step for step
(``shooting_solvers.trust_region_steps``: the dense route's iterates to round-off). ``solver="hybrid"``
(``shooting_hybrid``): Gauss–Newton steps with a line search along the undamped direction, the trust region
where they fail, the same stops; at continuity weight 100 it converges where the others crawl.

**Large residuals: the continuity weight.** Gauss–Newton's model drops ``Σ r_i ∇²r_i``; that is harmless
while the residuals are small, not where the continuity rows stay large at the optimum. On 100-Hz
closed-loop logs with torque noise (``scripts/bench_fit_cost.py``'s UR5 campaign: 0.2 N m, filtered at
5 Hz) the simulation under the measured torque drifts ~1e-2 rad from the next segment's start within
0.5 s (errors in variables), ~100 angle-noise stds: with ``continuity_weight = 100`` the gaps cannot
close, the fit is pulled towards one simulation per 50-s log, and along a damped step the gap rows'
second-order term is ~7× their Gauss–Newton curvature (~200× along the undamped step). Measured on 2 of
its runs (198 segments): the trust region and Gauss–Newton end at ``max_iterations`` (held-out torque RMSE
0.70 N m against 0.32 for the start); with ``continuity_weight = 1`` (a gap of one noise std costs one angle
sample) Gauss–Newton is ``"ok"`` after 6 passes, held-out 0.32 N m; on the campaign's 8 training runs (792
segments) ``"ok"`` after 20 passes (334 s at load ~5 on 2 cores), held-out 0.316 N m (start 0.315). The weight
is the model's statement of how far a segment may miss the next one's start; for such logs pass a small one.

The sensitivities: ``sensitivities`` (on a ``SerialArm``'s base columns its unrolled scalar dynamics). The chunk
program is compiled once per model (``regressor`` and ``known`` static, hashed by identity), step, stride and
chunk shape: every pass, and every later call on logs with the same segment length, reuses it.

**Covariance.** The residuals are not white: a simulation driven by the measured (noisy, low-passed)
torque drifts from the measured angles by a smooth error that dominates them (about 10 angle-noise
stds on the UR5 benchmark), and most of the torque noise's effect on the estimate is absorbed by the
fitted initial states, where no residual shows it. The default (``covariance="inputs"``) propagates it:
``jaxid.estimate.logs.shooting_inputs``, the first-order covariance with the angle noise and the torque
reading's noise (``torque_std``, default ``data.torque_noise_std``: the raw torque above the cut-off) as
an error in the simulation's input, reported as its envelope with the segment sandwich
(``shooting.covariance_envelope``: never below what the residuals show); a fit stopped before an optimum
reports the sandwich. Measured (20 trials of ``benchmark_panda``'s ``consistency_rich``,
69 parameters, the median over parameters of Monte Carlo std / reported std): 1.00 with the setting's
torque noise, 0.87 with the estimate (which also holds the controller's reaction to the angle noise: an
upper bound in closed loop, 16× too large on ``encoder_limited``, whose encoder noise is 10× larger);
the segment sandwich 1.9. ``covariance="sandwich"`` keeps the residual-based forms: the **segment
sandwich** (``shooting.segment_sandwich``, the scores of each segment's residuals, states eliminated, as
independent clusters, ``lags=0``, or Bartlett-weighted over ``lags`` neighbouring segments), or
``σ̂² (JᵀJ)⁻¹`` (``lags=-1``, white residuals); on the UR5 benchmark the z-scores' std is 6-8 white, 3.1 with
clusters, 3.3-5.9 with 1-8 lags. Formed from the normal equations the covariance carries their squared
condition number: on a 2-s UR5 log the white stds agree with the dense route's SVD to 0.2 %.

**Rates.** ``stride`` counts samples: the default 5 puts residuals every 50 ms at 100 Hz and every
10 ms at 500 Hz, both far above the band of the motion an arm is excited with; a pass costs the
simulation of every sample (one RK4 step per sample, or ``substeps`` of them for a stiff model:
``jaxid.estimate.logs.stepping.stable_substeps``), not the residual count.

**Another parametrisation** (``parametrisation = g``, ``start_z``): the solver moves ``z`` and the
initial states, with ``θ = g(z)`` and the ``θ`` columns of the Jacobian times ``∂g/∂z``; the
result is ``g(ẑ)``, its covariance, rank and condition those of the ``θ`` problem at ``g(ẑ)``. With
``g`` the base values of ``jaxid.estimate.consistency.standard_from_unconstrained(z)`` (``z`` the ``14 n``
log-Cholesky / log coordinates of a ``SerialArm``'s standard parameters) every iterate is the model
of a physically consistent arm: physically consistent output error. ``z`` may hold directions ``θ``
does not see (``14 n`` against ``p`` base parameters); the damping keeps their steps small.
Started on the consistent set's boundary (some coordinates near ``−∞``, as a consistent
least-squares fit often ends), those coordinates have vanishing gradients: start from a point
projected inside (``jaxid.estimate.consistency.project_to_consistent`` with a ``floor``). Where the
constrained optimum lies on that boundary the fit crawls (``z → −∞``): the estimator's consistent
variant (``OutputError(constraint="consistent")``) is ``jaxid.estimate.logs.output_error_consistent``
instead, a constrained Gauss–Newton on the same cost over ``θ`` and the states.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .data import FilteredLog, Known, Regressor, torque_noise_std
from .idim import Identification
from .shooting import MISFIT_NOTE, covariance_envelope, normal_equations, schur_complement, segment_sandwich
from .shooting_hybrid import hybrid_steps
from .shooting_inputs import INPUT_NOISE_NOTE, input_noise_covariance
from .shooting_passes import ShootingProblem, shooting_problem
from .shooting_solvers import gauss_newton_steps, solve, trust_region_steps

__all__ = ["output_error", "output_error_fit", "OutputErrorFit"]

#: Segments per compiled call (the chunk): the memory of a pass grows with it, not with the logs.
CHUNK_SEGMENTS = 64
#: Gauss–Newton stops once its undamped step moves no parameter by more than this many standard deviations
#: (``output_error``'s ``parameter_tolerance``): an estimate 0.05 std from the optimum adds at most 0.25 % to
#: its mean squared error. Where the residuals are large (closed-loop logs, errors in variables) the
#: nuisance states keep creeping long after: on the UR5 campaign of ``scripts/bench_fit_cost.py`` the
#: stationarity certificate took 15 passes, with every parameter within 0.012 of its std of the final
#: value after 5; the undamped step (0.075 std there, 0.034 one pass later) overstates what is left.
PARAMETER_TOLERANCE = 0.05
#: ``output_error``'s solvers (``solver=``).
SOLVERS = ("gauss_newton", "trust_region", "hybrid")


def _covariance(covariance: str, lags: int | None, torque_std, logs) -> tuple[int, np.ndarray | None]:
    """``(lags, torque noise)`` for ``shooting_identification``: with ``covariance="inputs"`` the torque noise
    ``(n,)`` (``torque_std`` or its estimate ``torque_noise_std``), with ``"sandwich"`` ``None`` and ``lags``
    (default 0). ``ValueError`` for another ``covariance``, ``lags`` with the inputs' covariance or below -1 or
    not whole, a ``torque_std`` with the sandwich or not finite, positive, one or ``n`` numbers."""
    if covariance not in ("sandwich", "inputs"):
        raise ValueError(f"output_error: covariance must be 'sandwich' or 'inputs', got {covariance!r}.")
    if covariance == "sandwich":
        lags = 0 if lags is None else lags
        if int(lags) != lags or lags < -1:
            raise ValueError(
                f"output_error: lags must be -1 (white residuals) or a whole number of segments ≥ 0, got {lags}."
            )
        if torque_std is not None:
            raise ValueError("output_error: torque_std goes with covariance='inputs'; drop it or change covariance.")
        return int(lags), None
    if lags is not None:
        raise ValueError("output_error: lags goes with covariance='sandwich'; add covariance='sandwich' or drop lags.")
    n = logs[0].joints
    if torque_std is None:
        return 0, torque_noise_std(logs)
    std = np.asarray(torque_std, dtype=float)
    std = np.broadcast_to(std, (n,)) if std.ndim == 0 else std
    if std.shape != (n,) or not np.all(np.isfinite(std) & (std > 0)):
        raise ValueError(
            f"output_error: torque_std must be one positive number or {n} (one per joint) [N m], got {torque_std!r}."
        )
    return 0, std


def output_error(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification | None = None,
    segment_s: float = 0.5,
    stride: int = 5,
    continuity_weight: float = 100.0,
    max_iterations: int = 50,
    known: Known | None = None,
    parametrisation: Callable[[Array], Array] | None = None,
    start_z: ArrayLike | None = None,
    return_z: bool = False,
    chunk_segments: int = CHUNK_SEGMENTS,
    substeps: int | None = None,
    lags: int | None = None,
    covariance: str = "inputs",
    torque_std: ArrayLike | None = None,
    solver: str = "gauss_newton",
    damping: float = 1e-6,
    parameter_tolerance: float | None = PARAMETER_TOLERANCE,
) -> Identification | tuple[Identification, np.ndarray]:
    """Multiple-shooting output error (see the module docstring).

    Args:
        logs: filtered logs sharing one ``sample_step``. regressor, names: the model.
        start: the starting estimate (IDIM-LS); required unless a ``parametrisation`` is given.
        segment_s: segment length [s].
        stride: angle residuals every ``stride`` samples. continuity_weight: ``w``.
        max_iterations: passes over the segments allowed to the solver (each gives the residuals and
            the Jacobian's blocks at one trial point).
        known: torque of fixed parameters (default none).
        parametrisation: ``z -> θ`` (pure JAX, ``(k,) -> (p,)``): fit ``z`` instead of ``θ`` (module
            docstring), e.g. ``θ`` = the base values of ``standard_from_unconstrained(z)`` for
            physically consistent output error. Hashed by identity: pass the same function to reuse
            its compiled Jacobian. start_z: the start of ``z``, ``(k,)``; required with a
            ``parametrisation`` (then ``start`` is not used).
        return_z: also return the fitted ``z`` (``θ`` without a parametrisation), e.g. to check or
            report the standard parameters of a consistent fit.
        chunk_segments: segments per compiled call (memory ∝ it; the result does not depend on it
            beyond round-off).
        substeps: RK4 steps per log sample (``jaxid.estimate.logs.stepping.model_step``); default: the
            stiffness rule ``stable_substeps`` on the start model (``θ`` of the start) and the logs,
            fixed for the whole fit (one compiled program). Stated in the notes when above 1.
        lags: with ``covariance="sandwich"``: ``L ≥ 0`` the segment sandwich (``shooting.segment_sandwich``) over
            ``L`` neighbouring segments (default 0: segments as independent clusters); ``-1``: ``σ̂² (JᵀJ)⁻¹``,
            white residuals.
        covariance: ``"inputs"`` (default): the first-order covariance with the angle noise and the torque
            reading's noise as an error in the simulation's input (``shooting_inputs.input_noise_covariance``;
            ``lags`` not used); ``"sandwich"``: as ``lags`` says.
        torque_std: with ``covariance="inputs"``, the reading noise's std per joint [N m] (a number or ``(n,)``);
            default ``data.torque_noise_std`` of the logs.
        solver: ``"gauss_newton"`` (default), ``"trust_region"`` or ``"hybrid"`` (what ``OutputError`` runs):
            module docstring, "Solver".
        damping: Gauss–Newton's starting ``μ`` (relative to ``D²``; ``shooting_solvers.gauss_newton``).
        parameter_tolerance: Gauss–Newton also stops (``"ok"``) once its undamped step moves no parameter by
            more than this many of its standard deviations (``shooting.parameter_step``; default
            ``PARAMETER_TOLERANCE`` = 0.05); ``None``: only the stationarity certificate, ``ftol`` and ``xtol``. The
            hybrid's line search too. Not used with a parametrisation (its ``z`` need not be determined) or the
            trust region.

    Returns an ``Identification`` (with ``return_z``: ``(Identification, z)``) of ``θ`` (of ``θ(z)`` with a
    parametrisation) whose ``residual_std`` is the per-joint angle RMS error [rad], whose ``iterations``
    are the passes made and whose ``notes`` state the largest continuity gap; its covariance, rank and
    condition are those of the ``θ`` problem at the solution. Raises ``ValueError`` for logs with
    different steps, a missing start, a parametrisation whose output does not have ``len(names)``
    entries, a ``chunk_segments`` below 1, or residuals that are not finite at the start.
    """
    fit = output_error_fit(**locals())  # the arguments, by name
    return fit.finish(solve(fit.steps, fit.problem.linearise, fit.problem.evaluate))


class OutputErrorFit(NamedTuple):
    """One output-error fit set up (``output_error_fit``): its passes (``problem``), its solver as a generator of
    pass requests (``steps``: ``shooting_solvers.gauss_newton_steps`` or ``trust_region_steps``) and ``finish``,
    which makes the estimate of the solver's result."""

    problem: ShootingProblem
    steps: Generator
    finish: Callable


def output_error_fit(
    logs,
    regressor,
    names,
    *,
    start,
    segment_s,
    stride,
    continuity_weight,
    max_iterations,
    known,
    parametrisation,
    start_z,
    return_z,
    chunk_segments,
    substeps,
    lags,
    covariance,
    torque_std,
    solver,
    damping,
    parameter_tolerance,
) -> OutputErrorFit:
    """``output_error`` up to its solver (the same arguments, all given): the checks, the set-up and the solver's
    generator, not yet started (``output_error`` runs it on the fit's own passes; ``output_error_batch`` many
    fits' passes together). Raises ``ValueError`` as ``output_error`` does, except at the start's pass."""
    names = tuple(names)
    p = len(names)
    if parametrisation is None:
        if start is None:
            raise ValueError("output_error needs start= (e.g. the IDIM-LS estimate).")
        if start_z is not None:
            raise ValueError(
                "output_error: start_z goes with a parametrisation; pass parametrisation= or drop start_z."
            )
        z_start = np.asarray(start.value, dtype=float)
    else:
        if start_z is None:
            raise ValueError("output_error: a parametrisation needs start_z= (the start of its argument z).")
        z_start = np.asarray(start_z, dtype=float).reshape(-1)
        shape = jax.eval_shape(parametrisation, jax.ShapeDtypeStruct(z_start.shape, z_start.dtype)).shape
        if shape != (p,):
            raise ValueError(
                f"output_error: parametrisation(z) has shape {shape}; it must give the {p} parameters {names[:3]}...."
            )
    covariance = _covariance(covariance, lags, torque_std, logs)
    if solver not in SOLVERS:
        raise ValueError(f"output_error: solver must be one of {', '.join(SOLVERS)}; got {solver!r}.")
    theta0 = z_start if parametrisation is None else np.asarray(parametrisation(jnp.asarray(z_start)))
    problem = shooting_problem(
        logs, regressor, theta0, segment_s, stride, continuity_weight, known, parametrisation, chunk_segments, substeps
    )
    if solver == "gauss_newton":
        steps = gauss_newton_steps(
            z_start,
            problem.x0,
            max_evaluations=max_iterations,
            damping=damping,
            parameter_tolerance=parameter_tolerance if parametrisation is None else None,
            dof=problem.dof,
        )
    elif solver == "hybrid":
        tolerance = parameter_tolerance if parametrisation is None else None
        steps = hybrid_steps(
            z_start, problem.x0, max_evaluations=max_iterations, parameter_tolerance=tolerance, dof=problem.dof
        )
    else:
        steps = trust_region_steps(z_start, problem.x0, max_evaluations=max_iterations)

    def finish(result):
        if solver == "gauss_newton":
            sol, _, _, mu = result
            note = f"solver: Gauss–Newton, {sol.evaluations - 1} steps, μ = {mu:.2g}; {sol.message}"
        else:
            sol = result
            note = f"solver: {f'hybrid, {sol.evaluations} passes; ' if solver == 'hybrid' else ''}{sol.message}"
        blocks, theta_hat = sol.extra
        # The θ problem at the solution (with a parametrisation: its θ columns, not the z ones).
        theta_normal = (
            sol.normal
            if parametrisation is None
            else normal_equations(blocks, sol.states, problem.linked, problem.scale_c)
        )
        est = shooting_identification(problem, names, theta_normal, blocks, theta_hat, sol, (*covariance, logs), note)
        return (est, sol.par.copy()) if return_z else est

    return OutputErrorFit(problem, steps, finish)


def shooting_identification(problem, names, theta_normal, blocks, theta_hat, sol, covariance, solver_note, **extra):
    """``output_error``'s ``Identification`` of a solution ``sol`` (``shooting_solvers.Solution``: its ``normal``
    gives the cost, its ``states``, ``jacobians``, ``status`` the rest) with ``theta_normal`` the normal
    equations in ``θ`` there, ``blocks`` its pass, ``covariance`` ``(lags, torque noise or None, logs)``: the
    covariance (``output_error``'s ``lags``; with a torque noise ``covariance="inputs"``);
    ``solver_note`` ends the notes; ``extra`` goes to ``Identification`` (e.g. ``standard``)."""
    segments, m = sol.states.shape
    n = m // 2
    reduced = schur_complement(theta_normal)
    rows = problem.rows
    dof = max(problem.dof, 1)
    s2 = 2 * sol.normal.cost / dof
    d = np.sqrt(np.abs(np.diag(reduced)))
    d = np.where(d > 0, d, 1.0)
    ev, vec = np.linalg.eigh(reduced / np.outer(d, d))
    rank = int(np.sum(ev > ev.max() * 1e-14))
    cond = float(np.sqrt(ev.max() / max(ev.min(), 1e-300)))
    lags, noise, logs = covariance
    theta_hat = np.asarray(theta_hat, dtype=float)  # the request's θ: ``sol.par`` is ``z`` or, consistent, the arm's
    lags_note = ""
    if noise is not None and sol.status != "ok":  # the first-order propagation holds at an optimum only
        noise, lags = None, 0
        lags_note = "covariance: the segment sandwich (not at an optimum, where the inputs' holds)"
    if noise is not None:  # at least what the residuals show: a misfit (model error) is not hidden
        model = input_noise_covariance(
            problem, logs, theta_normal, blocks, problem.request(sol.par, sol.states)._replace(theta=theta_hat), noise
        )[0]
        cov = covariance_envelope(model, rows / dof * segment_sandwich(theta_normal, blocks, problem.owner, 0)[0])
    elif lags < 0:
        cov = s2 * ((vec / np.maximum(ev, 1e-300)) @ vec.T) / np.outer(d, d)
    else:
        cov = rows / dof * segment_sandwich(theta_normal, blocks, problem.owner, int(lags))[0]
    res_blocks = blocks.res.reshape(segments, -1, n) * problem.sigma
    gaps = sol.normal.gaps[problem.linked] / problem.scale_c
    gap_q = float(np.abs(gaps[:, :n]).max()) if gaps.size else 0.0
    gap_v = float(np.abs(gaps[:, n:]).max()) if gaps.size else 0.0
    notes = (
        f"{segments} segments of {problem.length * problem.sample_step:.3g} s; largest continuity gap "
        f"{gap_q:.2e} rad, {gap_v:.2e} rad/s; {solver_note}"
    )
    if noise is not None:
        notes += f"; {INPUT_NOISE_NOTE} = {np.array2string(noise, precision=3)} N m"
    elif lags_note:
        notes += "; " + lags_note
    if sol.status != "ok":  # far above 1: the misfit is not the encoder's noise (jaxid fit's not_converged warning)
        notes += f"; {MISFIT_NOTE} {float(np.sqrt(np.mean(np.square(blocks.res)))):.3g} × the angle noise σ"
    if problem.substeps > 1:
        why = "" if problem.stiffness is None else f" (h λ_max = {problem.stiffness:.3g} at the start)"
        notes += f"; {problem.substeps} RK4 substeps per sample{why}"
    return Identification(
        "output_error",
        names,
        np.asarray(theta_hat, dtype=float),
        cov,
        rank,
        cond,
        np.sqrt(np.mean(res_blocks.reshape(-1, n) ** 2, axis=0)),
        int(res_blocks.shape[0] * res_blocks.shape[1]),
        sol.jacobians,
        notes,
        sol.status,
        **extra,
    )
