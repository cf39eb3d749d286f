"""``nonlinear_output_error``'s route ``"coarse"``: Levenberg–Marquardt on a coarse RK4 grid.

Each iteration integrates the ``p + 1`` perturbed orbits (forward differences) on a grid ``k``
samples wide, each started a lead-in early from the previous iterate's state so the start error
dies out before the recorded window (no shooting), and interpolates them to the samples (cubic
Hermite). Once every step is below ``_SWITCH_STD`` standard errors, full-resolution periods give
the exact residual for Gauss–Newton correction steps until the correction is below
``_CORRECTION_STD`` standard errors. The entry point, options and statuses are
``jaxid.estimate.nonlinear.nonlinear_output_error``'s (docs/estimators.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .. import linalg
from ..simulation.steady_state import period_states, rk4_table_step
from .base import CONVERGED, FAILED, MAX_ITERATIONS, SINGULAR, Estimate

#: Levenberg–Marquardt damping range (shared with the other routes).
_LAMBDA_MIN, _LAMBDA_MAX = 1e-12, 1e10
#: Relative cost change treated as rounding (shared with the other routes).
_COST_ROUNDING = 1e-12
#: Relative forward-difference step of the Jacobians.
_FD_STEP = 1.5e-8
#: The full-resolution correction step must be below this many standard errors (else another
#: full-resolution period follows).
_CORRECTION_STD = 3.0
#: The coarse-grid phase ends once every step is below this many standard errors.
_SWITCH_STD = 1.0
#: A start whose coarse orbit's periodicity defect after the lead-in exceeds this (rad, rad/s) is
#: not on the data's periodic orbit; the multiple-shooting fit then gives the start.
_START_DEFECT = 1e-2
#: Multiple-shooting start: segment length [s] and iterations at most.
_SEGMENT_SECONDS = 2.0
_SEGMENT_ITERATIONS = 10


def _coarsening(coarse_step, sample_step: float, n_per: int) -> int:
    """Samples per coarse step: the largest divisor ``k`` of ``N`` with ``k Δ ≤ coarse_step`` (at least 1)."""
    if isinstance(coarse_step, bool) or not isinstance(coarse_step, int | float) or not coarse_step > 0:
        raise ValueError(f"coarse_step must be a positive step in seconds (e.g. 0.04), got {coarse_step!r}.")
    k = max(1, min(int(coarse_step / sample_step + 1e-9), n_per // 2))
    while n_per % k:
        k -= 1
    return k


def _hermite(nodes: Array, slopes: Array, spacing: float, factor: int) -> Array:
    """Cubic Hermite interpolation of ``M + 1`` equispaced nodes (axis 0) to ``M · factor`` samples.

    ``nodes`` and ``slopes`` (``d/dt``) are ``(M + 1, ...)`` at ``t = i · spacing``; returns the
    values at ``t = n · spacing / factor``, ``n = 0 … M · factor − 1``. Fourth-order accurate, as the
    RK4 nodes themselves.
    """
    s = jnp.arange(factor) / factor
    shape = (1, factor) + (1,) * (nodes.ndim - 1)
    h00, h10 = (2 * s**3 - 3 * s**2 + 1).reshape(shape), (s**3 - 2 * s**2 + s).reshape(shape)
    h01, h11 = (-2 * s**3 + 3 * s**2).reshape(shape), (s**3 - s**2).reshape(shape)
    out = (
        h00 * nodes[:-1, None]
        + h10 * spacing * slopes[:-1, None]
        + h01 * nodes[1:, None]
        + h11 * spacing * slopes[1:, None]
    )
    return out.reshape(-1, *nodes.shape[1:])


def _segment_fit(data, data_states, torque, nominal, unknowns, theta0, *, needed, substeps, segment, fit_offset):
    """Multiple-shooting start: fit ``θ`` to short segments, each started from the data's state.

    ``data`` ``(M, 2)`` angles and ``data_states`` ``(M, 4)`` filtered states ``(q, q')`` on the
    coarse grid of ``torque``. Segments of ``segment`` steps start at every ``segment``-th node from
    the data's state there, so no segment can drift to another orbit. Levenberg–Marquardt with
    forward differences, at most ``_SEGMENT_ITERATIONS`` iterations, until the step is below one
    standard error; a ``while_loop`` that makes no pass unless ``needed`` (under ``vmap``: unless
    some trial needs it). Returns ``θ`` (``theta0`` where not needed or not improved).
    """
    p = len(unknowns)
    n_seg = data.shape[0] // segment
    starts = data_states[: n_seg * segment : segment]
    target = jnp.roll(data, -1, axis=0)[: n_seg * segment].reshape(n_seg, segment, 2)
    dof = max(1, 2 * n_seg * segment - p)

    def segments(theta):
        arm = nominal.with_parameters(unknowns, theta)

        def one(x, j):
            def node(y, i):
                for s in range(substeps):
                    y = rk4_table_step(arm, torque, y, (j * segment + i) * substeps + s)
                return y, y[:2]

            return jax.lax.scan(node, x, jnp.arange(segment))[1]

        return jax.vmap(one)(starts, jnp.arange(n_seg))

    def residual(q):
        r = (target - q).reshape(-1, 2)
        return r - jnp.mean(r, axis=0) if fit_offset else r

    def evaluate(theta):
        h = _FD_STEP * jnp.abs(theta)
        qs = jax.vmap(segments)(jnp.concatenate([theta[None], theta + jnp.diag(h)]))
        r = residual(qs[0]).reshape(-1)
        jac = jax.vmap(lambda q, hj: (residual(q) - residual(qs[0])).reshape(-1) / -hj)(qs[1:], h).T
        cost = 0.5 * jnp.dot(r, r)
        a, g = jac.T @ jac, jac.T @ r
        ok = jnp.isfinite(cost) & jnp.all(jnp.isfinite(a)) & jnp.all(jnp.isfinite(g))
        return jnp.where(ok, cost, jnp.inf), a, g

    def cond(s):
        return s["go"] & (s["iterations"] <= _SEGMENT_ITERATIONS)

    def body(s):
        # Pass 0 evaluates the start itself (a zero step). One loop for the start and the steps:
        # an evaluation of the start outside the loop would run whether needed or not (XLA hoists
        # loop-invariant work out of a loop).
        step = linalg.solve(s["a"] + s["lam"] * jnp.diag(jnp.diag(s["a"])), s["g"])
        theta_c = s["theta"] + jnp.where(s["iterations"] > 0, step, 0.0)
        cost, a, g = evaluate(theta_c)
        accept = cost <= s["cost"]
        new = {
            key: jnp.where(accept, value, s[key])
            for key, value in (("theta", theta_c), ("cost", cost), ("a", a), ("g", g))
        }
        new["lam"] = jnp.clip(jnp.where(accept, s["lam"] / 3, s["lam"] * 10), _LAMBDA_MIN, _LAMBDA_MAX)
        gn = linalg.solve(new["a"], new["g"])
        std = jnp.sqrt(2 * new["cost"] / dof * jnp.abs(jnp.diag(linalg.inverse(new["a"]))))
        new["go"] = s["go"] & ~jnp.all(jnp.abs(gn) <= std) & jnp.isfinite(new["cost"]) & (new["lam"] < _LAMBDA_MAX)
        new["iterations"] = s["iterations"] + 1
        return new

    state = dict(
        theta=theta0,
        cost=jnp.asarray(jnp.inf),
        a=jnp.eye(p),
        g=jnp.zeros(p),
        lam=jnp.asarray(1e-4),
        go=needed,
        iterations=jnp.asarray(0),
    )
    return jax.lax.while_loop(cond, body, state)["theta"]


def _coarse_fit(
    data,
    data_states,
    x_lead,
    torque,
    coarse_torque,
    nominal,
    unknowns,
    theta0,
    *,
    n_per,
    sample_step,
    substeps,
    coarsening,
    lead_in,
    fit_offset,
    periods,
    noise_std,
    max_iterations,
    rtol,
    state_tolerance,
    damping,
    step_tolerance,
) -> Estimate:
    """Route ``"coarse"`` (see ``nonlinear_output_error``): a coarse-grid fit, then the exact residual."""
    p = len(unknowns)
    k = coarsening
    n_c, lead_c = n_per // k, lead_in // k
    lead_f = k * -(-n_per // (2 * k))  # the full-resolution pass: half a period of lead-in
    dof = 2 * n_per - (2 if fit_offset else 0) - p

    def centred(x):
        return x - jnp.mean(x, axis=0) if fit_offset else x

    def run(theta, z, table, n, lead):
        arm = nominal.with_parameters(unknowns, theta)
        return period_states(arm, table, z, samples_per_period=n, substeps=substeps, lead_in=lead)

    def coarse(theta, z, gain):
        # p + 1 coarse periods (θ and θ + h_j e_j), Hermite-interpolated to the samples.
        h = _FD_STEP * jnp.abs(theta)
        thetas = jnp.concatenate([theta[None], theta + jnp.diag(h)])
        zs = jnp.concatenate([z[None], z + (gain * h).T])
        states, ends = jax.vmap(lambda t, z: run(t, z, coarse_torque, n_c, lead_c))(thetas, zs)
        nodes = jnp.concatenate([states, ends[:, None]], axis=1)  # (p + 1, n_c + 1, 4)
        fine = jax.vmap(lambda x: _hermite(x[:, :2], x[:, 2:], k * sample_step, k))(nodes)
        dfine = jax.vmap(lambda x: _hermite(x[:, :2], x[:, 2:], k * sample_step, k))(
            (nodes[1:] - nodes[0]) / h[:, None, None]
        )
        defect = jnp.max(jnp.abs(ends[0] - states[0, 0]))
        z_next = states[:, n_c - lead_c]
        w_next = states[:, n_c - lead_f // k]
        return (
            fine[0],
            jnp.moveaxis(dfine, 0, -1),
            z_next[0],
            (z_next[1:] - z_next[0]).T / h,
            w_next[0],
            (w_next[1:] - w_next[0]).T / h,
            jnp.where(jnp.isfinite(defect), defect, jnp.inf),
        )

    def normal(q, jac):
        r = centred(data - q).reshape(-1)
        j = centred(jac).reshape(-1, p)
        return 0.5 * jnp.dot(r, r), j.T @ j, j.T @ r

    def finite(*xs):
        return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in xs]))

    def propose(s):
        gn = linalg.solve(s["a"], s["g"])
        std = jnp.sqrt(2 * s["cost"] / dof * jnp.abs(jnp.diag(linalg.inverse(s["a"]))))
        theta_c = s["theta"] + linalg.solve(s["a"] + s["lam"] * jnp.diag(jnp.diag(s["a"])), s["g"])
        s = dict(s, gn=gn, std=std, theta_c=theta_c)
        s["z_c"] = s["z"] + s["gain"] @ (theta_c - s["theta"])
        s["w_c"] = s["w"] + s["w_gain"] @ (theta_c - s["theta"])
        s["history"] = s["history"].at[s["iterations"]].set(s["theta"])
        s["iterations"] = s["iterations"] + 1
        s["failed"] = ~jnp.isfinite(s["cost"]) | (s["lam"] >= _LAMBDA_MAX)
        return s

    def small(s, fraction):
        return (
            jnp.all(jnp.abs(s["gn"]) <= fraction * s["std"])
            | jnp.all(jnp.abs(s["gn"]) <= rtol * jnp.abs(s["theta"]))
            | (0.5 * jnp.dot(s["g"], s["gn"]) <= _COST_ROUNDING * s["cost"])
        )

    def accept_into(s, accept, **values):
        for key, value in values.items():
            s[key] = jnp.where(accept, value, s[key])
        s["lam"] = jnp.clip(jnp.where(accept, s["lam"] / 3, s["lam"] * 10), _LAMBDA_MIN, _LAMBDA_MAX)
        return s

    # Phase 1: Levenberg-Marquardt on the coarse grid (p + 1 coarse periods per iteration).
    q, jac, z, gain, w, w_gain, defect0 = coarse(theta0, x_lead, jnp.zeros((4, p)))
    cost, a, g = normal(q, jac)
    state = propose(
        dict(
            theta=theta0,
            jac=jac,
            z=z,
            gain=gain,
            w=w,
            w_gain=w_gain,
            cost=jnp.where(finite(cost, a, g), cost, jnp.inf),
            a=a,
            g=g,
            lam=jnp.asarray(float(damping)),
            defect=jnp.asarray(jnp.inf),
            iterations=jnp.asarray(0),
            history=jnp.full((max_iterations, p), jnp.nan),
            converged=jnp.asarray(False),
        )
    )

    # A start whose coarse orbit does not close after the lead-in (e.g. a link goes over the top
    # once a period: defect 2π) is not near the periodic orbit the data are on: the
    # multiple-shooting fit on short segments then gives the start, which the first pass below
    # evaluates (its loops make no pass unless some trial needs it).
    needed = ~(defect0 <= _START_DEFECT)
    restart = _segment_fit(
        data[::k],
        data_states[::k],
        coarse_torque,
        nominal,
        unknowns,
        theta0,
        needed=needed,
        substeps=substeps,
        segment=max(1, round(_SEGMENT_SECONDS / (k * sample_step))),
        fit_offset=fit_offset,
    )
    state["theta_c"] = jnp.where(needed, restart, state["theta_c"])
    state["z_c"] = jnp.where(needed, x_lead, state["z_c"])
    state["gain"] = jnp.where(needed, 0.0, state["gain"])
    state["cost"] = jnp.where(needed, jnp.inf, state["cost"])
    state["lam"] = jnp.where(needed, jnp.asarray(float(damping)), state["lam"])
    state["failed"] = state["failed"] & ~needed
    state["restart"] = needed

    def coarse_cond(s):
        return (s["restart"] | ~small(s, _SWITCH_STD)) & ~s["failed"] & (s["iterations"] < max_iterations - 1)

    def coarse_body(s):
        q, jac, z, gain, w, w_gain, _ = coarse(s["theta_c"], s["z_c"], s["gain"])
        cost, a, g = normal(q, jac)
        ok = finite(cost, a, g, z, gain)
        cost = jnp.where(ok, cost, jnp.inf)
        accept = ok & (cost <= s["cost"] * (1 + _COST_ROUNDING))
        values = dict(theta=s["theta_c"], jac=jac, z=z, gain=gain, w=w, w_gain=w_gain, cost=cost, a=a, g=g)
        s = accept_into(dict(s), accept, **values)
        s["restart"] = jnp.asarray(False)
        return propose(s)

    state = jax.lax.while_loop(coarse_cond, coarse_body, state)

    # Phase 2: the exact residual (one full-resolution period) with the coarse Jacobian; normally
    # one pass, whose Gauss-Newton step (the coarse grid's error, a fraction of a standard error)
    # is taken.
    def exact_cond(s):
        return ~s["converged"] & ~s["failed"] & (s["iterations"] < max_iterations)

    def exact_body(s):
        states, x_end = run(s["theta_c"], s["w_c"], torque, n_per, lead_f)
        cost, _, g = normal(states[:, :2], s["jac"])
        ok = finite(cost, g, x_end)
        cost = jnp.where(ok, cost, jnp.inf)
        accept = ok & (cost <= s["cost"] * (1 + _COST_ROUNDING))
        s = accept_into(
            dict(s),
            accept,
            theta=s["theta_c"],
            w=states[n_per - lead_f],
            cost=cost,
            g=g,
            defect=jnp.max(jnp.abs(states[0] - x_end)),
        )
        s = propose(s)
        s["converged"] = accept & small(s, _CORRECTION_STD) & (s["defect"] <= state_tolerance)
        return s

    state = jax.lax.while_loop(exact_cond, exact_body, dict(state, cost=jnp.asarray(jnp.inf)))

    theta = jnp.where(state["converged"], state["theta"] + state["gn"], state["theta"])
    a = state["a"]
    if noise_std is None:
        variance = 2 * state["cost"] / dof
    else:
        variance = jnp.asarray(noise_std, dtype=float) ** 2 / periods
    covariance = variance * linalg.inverse(a)
    status = jnp.where(
        state["converged"],
        jnp.where(linalg.is_singular_information(a), SINGULAR, CONVERGED),
        jnp.where(state["failed"], FAILED, MAX_ITERATIONS),
    )
    history = jnp.where(jnp.isnan(state["history"]), theta, state["history"])
    return Estimate(theta, covariance, status.astype(jnp.int32), unknowns, history)
