"""Nonlinear output-error estimator (``"nonlinear_oe"``) and its Cramér–Rao bound.

The model is the **nonlinear** arm's periodic steady state, not its linearisation, so large,
informative excitation carries no linearisation bias.

Data. The record's ``P`` whole periods are averaged into one period of ``N = T/Δ`` samples
``ȳ(nΔ)`` (for a periodic model this loses nothing: the least-squares cost over all samples is
``P`` times the cost on the average plus a constant). With ``fit_offset=True`` (default) a constant
angle offset per joint is a nuisance parameter — equivalently the mean of each joint is removed
from data and model — so a sensor bias or the non-zero mean of the paper's ``0.1*rand()`` noise
does not bias the fit; every other harmonic up to Nyquist (excited or not) is used.

Model. For parameters ``θ`` (the values of ``unknowns``; the rest from ``nominal``) the orbit
``q(nΔ; θ)`` is integrated with the same fixed-step RK4 and torque table as
``simulate(solver="rk4")`` (``jaxid.simulation.steady_state``). The applied torque is known: its mean over
the record is the holding offset ``tau0``.

Fit (default ``route="coarse"``). Levenberg-Marquardt on ``½ Σ_n ‖ȳ_n − q(nΔ; θ)‖²``, first on a
coarse RK4 grid (``coarse_step``, 0.04 s): every iteration integrates ``p + 1`` coarse periods in
one vmapped scan (``θ`` and forward differences), each started a quarter period early from the
previous iterate's state (the start error decays before the recorded window: no shooting), and
interpolates them to the samples; once the step is below one standard error, full-resolution
periods give the exact residual and the Gauss-Newton step with the coarse Jacobian is taken. A
start whose orbit does not close after the lead-in (at large amplitude a link may go over the top
once a period) is first replaced by a multiple-shooting fit on 2-s segments, each started from the
data's filtered state. ``route="shooting"``: every iteration integrates one period with ``4 + p``
forward-mode tangents and takes, at once, the Newton step for the orbit's ``x0`` and the LM step
for ``θ`` along the periodic manifold (``J = Q_θ + Q_x (I − Φ_x)⁻¹ Φ_θ``); 5-10× dearer. Both are
hand-written ``lax.while_loop`` loops (warm starts from one iteration to the next) with Marquardt's
diagonal scaling, accept if the cost does not rise, ``λ ← λ/3`` on success and ``λ ← 10 λ`` on
failure.

It starts from ``initial`` if given, else from the estimator named ``initial_estimator``
(default the frequency-domain ML estimate ``"ml"``, falling back to ``"equation_error"``) when it
is registered and converges, else from ``nominal``'s values (the starts: ``jaxid.estimate.nonlinear_start``).

Converged when the undamped Gauss-Newton step is below ``rtol`` relative in every parameter (or
the cost reduction it predicts is below rounding, ``1e-12`` relative) and the orbit's periodicity
defect is below ``state_tolerance``. Status ``MAX_ITERATIONS`` if that is
not reached in ``max_iterations`` period integrations, ``FAILED`` if the first model evaluation is
not finite or the damping runs away, ``SINGULAR`` if ``JᵀJ`` is numerically singular (e.g. an
unknown the data do not inform). Covariance ``σ² (JᵀJ)⁻¹ / P`` with ``σ = noise_std`` if given,
else from the residuals.

Physical unknowns only (``jaxid.PARAMETER_NAMES``; ``m1, m2, fv1, fv2`` is the usual set). Pure,
``jit``-compatible and ``vmap``-able over records (one compiled call for a batch of trials; the
``while_loop`` then runs until the slowest trial finishes, the finished ones frozen).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import linalg
from ..excitation.multisine import Multisine
from ..measure.derivatives import default_cutoff
from ..model import PARAMETER_NAMES, TwoLinkArm, validate_unknowns
from ..simulation.integrate import applied_offset
from ..simulation.open_loop import Record, steps_per_period
from ..simulation.steady_state import (
    period_map,
    period_sensitivities,
    torque_table,
)
from .base import CONVERGED, FAILED, MAX_ITERATIONS, SINGULAR, Estimate, register
from .nonlinear_bound import nonlinear_crlb, nonlinear_fisher
from .nonlinear_coarse import _COST_ROUNDING, _LAMBDA_MAX, _LAMBDA_MIN, _coarse_fit, _coarsening, _hermite  # noqa: F401 (_hermite: tests)
from .nonlinear_start import _start_candidates, filtered_derivatives, inverse_dynamics_start

__all__ = [
    "nonlinear_output_error",
    "nonlinear_crlb",
    "nonlinear_fisher",
    "inverse_dynamics_start",
    "filtered_derivatives",
]

ROUTES = ("coarse", "shooting")


def _check(record: Record, excitation: Multisine, unknowns) -> tuple[tuple[str, ...], int]:
    unknowns = validate_unknowns(unknowns, PARAMETER_NAMES)
    if abs(record.period - excitation.period) > 1e-9 * excitation.period:
        raise ValueError(
            f"The record's period {record.period} s differs from the excitation's {excitation.period} s; "
            "pass the multisine the record was measured under."
        )
    n = steps_per_period(record.period, record.sample_step)
    if record.q.shape[-2] != record.measured_periods * n:
        raise ValueError(
            f"record.q has {record.q.shape[-2]} samples, not measured_periods · T/Δ = {record.measured_periods * n}; "
            "the record must be whole periods."
        )
    return unknowns, n


def _normal_equations(sens, data, fit_offset):
    r = data - sens.q_corrected
    jac = sens.jacobian
    if fit_offset:
        r = r - jnp.mean(r, axis=0)
        jac = jac - jnp.mean(jac, axis=0)
    r = r.reshape(-1)
    jac = jac.reshape(-1, jac.shape[-1])
    return 0.5 * jnp.dot(r, r), jac.T @ jac, jac.T @ r


@register("nonlinear_oe")
def nonlinear_output_error(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    noise_std: float | Float[Array, ""] | None = None,
    initial: Float[ArrayLike, "p"] | None = None,  # noqa: F821
    initial_estimator: str | None = "ml",
    substeps: int = 1,
    fit_offset: bool = True,
    max_iterations: int = 30,
    rtol: float | Array = 1e-10,
    state_tolerance: float | Array = 1e-9,
    damping: float = 1e-4,
    derivative_cutoff: int | None = None,
    route: str = "coarse",
    step_tolerance: float | None = None,
    coarse_step: float = 0.04,
) -> Estimate:
    """Fit the nonlinear arm's periodic steady state to the record (see the module docstring).

    Args:
        record: measured record over whole periods (``q`` possibly noisy), unbatched (``vmap`` it).
        excitation: the multisine applied.
        nominal: the known parameters; its values of ``unknowns`` are the last-resort start.
        unknowns: static tuple of physical parameter names.
        q0: operating point [rad] (the starting orbit guess is the linearisation's there).
        noise_std: angle noise standard deviation [rad] for the covariance; ``None``: estimated.
        initial: ``(p,)`` starting value; ``None``: run ``initial_estimator``.
        initial_estimator: registered estimator giving the start (``"ml"`` by default) or ``None``.
        substeps: RK4 steps per sample (use the simulation's; 1 matches ``simulate``'s default).
        fit_offset: fit a constant angle offset per joint (drop each joint's mean).
        max_iterations: period integrations (LM iterations) at most.
        rtol: convergence threshold on the relative Gauss-Newton step.
        state_tolerance: periodicity defect ``max |Φ(x0) − x0|`` required at convergence.
        damping: initial Levenberg-Marquardt ``λ`` (relative to ``diag(JᵀJ)``).
        derivative_cutoff: harmonic up to which ``q', q''`` are formed for the inverse-dynamics
            start (default ``jaxid.measure.derivatives.default_cutoff``: ``4 ·`` the highest excited
            harmonic, at most ``N/4``).
        route: ``"coarse"`` (default): Levenberg-Marquardt first on a coarse RK4 grid (step
            ``coarse_step``): each iteration ``p + 1`` coarse periods (``θ`` and forward
            differences), Hermite-interpolated to the samples, every period starting a quarter
            period early from the previous iterate's state moved by its gain
            (``jaxid.simulation.steady_state.period_states``: the start error decays before the recorded
            window); once the step is below one standard error, one full-resolution period (half
            a period of lead-in) gives the exact residual and the Gauss-Newton step with the coarse
            Jacobian is taken (converged when that step is below three standard errors and the
            periodicity defect below ``state_tolerance``, else another full period). The optimum is
            that of the exact residual with a Jacobian good to ~1e-5 relative. The start is
            ``initial_estimator``'s estimate; if its coarse orbit's periodicity defect after the
            lead-in exceeds ``1e-2`` (it is not on the data's orbit, e.g. a link goes over the top
            once a period), a multiple-shooting fit on 2-s segments, each integrated from the
            data's filtered state, replaces it. ``step_tolerance`` does not apply.
            ``"shooting"``: every iteration relaxes the orbit one primal period and integrates one
            period with ``4 + p`` tangents (Newton shooting + implicit sensitivities); the start
            is the better of ``initial_estimator`` and the inverse-dynamics fit, each relaxed one
            period; 5-10× dearer than ``"coarse"`` (``scripts/bench_nonlinear.py``,
            ``docs/estimators.md``).
        step_tolerance: if set, also converged once every Gauss-Newton step component is below
            ``step_tolerance`` times its standard error (from the residuals): e.g. ``0.01`` stops
            when the optimisation error is 1 % of the statistical one. ``None`` (default): ``rtol``
            only.
        coarse_step: route ``"coarse"`` only: the coarse grid's step [s], rounded down to a whole
            number of samples dividing the period (``1`` sample: no coarsening).

    Returns an ``Estimate``; ``history`` is the ``(max_iterations, p)`` accepted iterate after each
    period integration (the final value repeated after convergence). Raises ``ValueError`` for a record that is
    not whole periods of this excitation or an unknown that is not a physical parameter.
    """
    unknowns, n_per = _check(record, excitation, unknowns)
    if route not in ROUTES:
        raise ValueError(f"route must be one of {list(ROUTES)}, got {route!r}.")
    coarsening = _coarsening(coarse_step, record.sample_step, n_per) if route == "coarse" else 1
    p = len(unknowns)
    periods = record.measured_periods
    data = jnp.mean(record.q.reshape(periods, n_per, 2), axis=0)
    offset = applied_offset(record, excitation)  # tau0, read off the record
    torque = torque_table(excitation, offset, sample_step=record.sample_step, substeps=substeps)
    torque_mean = jnp.mean(record.tau.reshape(periods, n_per, 2), axis=0)
    cutoff = default_cutoff(excitation.max_harmonic, n_per) if derivative_cutoff is None else derivative_cutoff
    if initial is not None:
        theta0 = jnp.asarray(initial, dtype=float)
        if theta0.shape != (p,):
            raise ValueError(f"initial must have shape ({p},) for {list(unknowns)}, got {theta0.shape}.")
        candidates = [theta0]
    else:
        candidates = _start_candidates(
            record,
            excitation,
            nominal,
            unknowns,
            q0,
            noise_std,
            data,
            torque_mean,
            initial_estimator,
            cutoff,
            first_only=route != "shooting",
        )
    # The orbit's starting state is the measured one (filtered), so that the fit follows the
    # periodic orbit the data are on even where the arm has several.
    q_ac, qd, _ = filtered_derivatives(data, excitation.period, cutoff)
    x_data = jnp.concatenate([jnp.mean(data, axis=0) + q_ac[0], qd[0]])

    def relax(theta, x):
        arm = nominal.with_parameters(unknowns, theta)
        return period_map(arm, torque, x, samples_per_period=n_per, substeps=substeps)[0]

    def start_cost(theta, x):
        q = period_map(
            nominal.with_parameters(unknowns, theta), torque, x, samples_per_period=n_per, substeps=substeps
        )[1]
        r = data - q
        if fit_offset:
            r = r - jnp.mean(r, axis=0)
        cost = jnp.sum(r**2)
        return jnp.where(jnp.isfinite(cost), cost, jnp.inf)

    if route == "coarse":
        lead_in = coarsening * -(-n_per // (4 * coarsening))
        lead_state = jnp.concatenate([jnp.mean(data, axis=0) + q_ac[n_per - lead_in], qd[n_per - lead_in]])
        coarse_torque = torque_table(excitation, offset, sample_step=coarsening * record.sample_step, substeps=substeps)
        return _coarse_fit(
            data,
            jnp.concatenate([jnp.mean(data, axis=0) + q_ac, qd], axis=1),
            lead_state,
            torque,
            coarse_torque,
            nominal,
            unknowns,
            candidates[0],
            n_per=n_per,
            sample_step=record.sample_step,
            substeps=substeps,
            coarsening=coarsening,
            lead_in=lead_in,
            fit_offset=fit_offset,
            periods=periods,
            noise_std=noise_std,
            max_iterations=max_iterations,
            rtol=rtol,
            state_tolerance=state_tolerance,
            damping=damping,
            step_tolerance=0.01 if step_tolerance is None else step_tolerance,
        )
    if len(candidates) == 1:
        theta0, x0 = candidates[0], relax(candidates[0], x_data)
    else:
        states = [relax(c, x_data) for c in candidates]
        best = jnp.argmin(jnp.stack([start_cost(c, x) for c, x in zip(candidates, states, strict=True)]))
        theta0, x0 = jnp.stack(candidates)[best], jnp.stack(states)[best]

    def evaluate(theta, x, s):
        x = relax(theta, x)  # one primal period first: the first-order x0 update is then tiny
        sens = period_sensitivities(nominal, unknowns, theta, x, torque, samples_per_period=n_per, substeps=substeps)
        cost, a, g = _normal_equations(sens, data, fit_offset)
        finite = jnp.isfinite(cost) & jnp.all(jnp.isfinite(a)) & jnp.all(jnp.isfinite(g))
        return cost, a, g, sens.next_state, sens.state_gain, sens.defect, finite

    def propose(state):
        theta, xbase, gain, a, g, lam = (
            state["theta"],
            state["xbase"],
            state["gain"],
            state["a"],
            state["g"],
            state["lam"],
        )
        step = linalg.solve(a + lam * jnp.diag(jnp.diag(a)), g)
        return theta + step, xbase + gain @ step

    def body(state):
        cost, a, g, xbase, gain, defect, finite = evaluate(state["theta_c"], state["x_c"], state["gain"])
        # Accept a cost that does not rise beyond rounding: near the optimum the last step changes
        # the cost by less than its rounding error, and rejecting it would stall the iteration.
        accept = finite & (cost <= state["cost"] * (1 + _COST_ROUNDING))
        new = dict(state)
        for key, value in (
            ("theta", state["theta_c"]),
            ("cost", cost),
            ("a", a),
            ("g", g),
            ("xbase", xbase),
            ("gain", gain),
            ("defect", defect),
        ):
            new[key] = jnp.where(accept, value, state[key])
        new["lam"] = jnp.clip(jnp.where(accept, state["lam"] / 3, state["lam"] * 10), _LAMBDA_MIN, _LAMBDA_MAX)
        gn = linalg.solve(new["a"], new["g"])
        # Converged: the Gauss-Newton step is negligible, or the cost it predicts to remove is
        # below rounding (a noisy, non-zero-residual optimum).
        small = jnp.all(jnp.abs(gn) <= rtol * jnp.abs(new["theta"])) | (
            0.5 * jnp.dot(new["g"], gn) <= _COST_ROUNDING * new["cost"]
        )
        if step_tolerance is not None:
            # Statistical stop: the step is a negligible fraction of its own standard error.
            dof = 2 * n_per - (2 if fit_offset else 0) - p
            std = jnp.sqrt(2 * new["cost"] / dof * jnp.abs(jnp.diag(linalg.inverse(new["a"]))))
            small = small | jnp.all(jnp.abs(gn) <= step_tolerance * std)
            new["gn"] = gn
        new["converged"] = jnp.isfinite(new["cost"]) & small & (new["defect"] <= state_tolerance)
        new["failed"] = ~jnp.isfinite(new["cost"]) | (new["lam"] >= _LAMBDA_MAX)
        new["theta_c"], new["x_c"] = propose(new)
        new["history"] = state["history"].at[state["iterations"]].set(new["theta"])
        new["iterations"] = state["iterations"] + 1
        return new

    def cond(state):
        return ~state["converged"] & ~state["failed"] & (state["iterations"] < max_iterations)

    state = dict(
        theta=theta0,
        xbase=x0,
        gain=jnp.zeros((4, p)),
        a=jnp.eye(p),
        g=jnp.zeros(p),
        cost=jnp.asarray(jnp.inf),
        defect=jnp.asarray(jnp.inf),
        lam=jnp.asarray(float(damping)),
        theta_c=theta0,
        x_c=x0,
        converged=jnp.asarray(False),
        failed=jnp.asarray(False),
        iterations=jnp.asarray(0),
        history=jnp.full((max_iterations, p), jnp.nan),
    )
    if step_tolerance is not None:
        state["gn"] = jnp.zeros(p)
    state = jax.lax.while_loop(cond, body, state)

    if step_tolerance is not None:
        # The last Gauss-Newton step is below the tolerance: take it (its error is second order).
        state["theta"] = jnp.where(state["converged"], state["theta"] + state["gn"], state["theta"])
    a = state["a"]
    dof = 2 * n_per - (2 if fit_offset else 0) - p
    if noise_std is None:
        variance = 2 * state["cost"] / dof  # of the averaged samples: σ² / P
    else:
        variance = jnp.asarray(noise_std, dtype=float) ** 2 / periods
    covariance = variance * linalg.inverse(a)
    singular = linalg.is_singular_information(a)
    status = jnp.where(
        state["converged"],
        jnp.where(singular, SINGULAR, CONVERGED),
        jnp.where(state["failed"], FAILED, MAX_ITERATIONS),
    )
    history = jnp.where(jnp.isnan(state["history"]), state["theta"], state["history"])
    return Estimate(state["theta"], covariance, status.astype(jnp.int32), unknowns, history)
