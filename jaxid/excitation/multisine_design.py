"""Excitation design for a multisine: its scale (and joint balance) that minimises the predicted
RMSE, and its line amplitudes that minimise the relative linear bound.

``design_scale`` grids (and optionally refines) the scale and, if asked, the ratio of joint 2's to
joint 1's amplitudes, evaluating each candidate by the predicted-RMSE criterion of
``jaxid.excitation.multisine_criteria`` (``predict_rmse``: each estimator's bias on the noise-free steady state
and its Cramér–Rao bound; ``inf`` where infeasible), and returns pandas tables. The scalar objective
is the relative RMSE over ``target`` parameters, ``sqrt(mean_i (RMSE_i / θ_i)²)``.

``design_line_amplitudes`` moves each joint's torque power between its lines by gradient (BFGS) to
minimise the relative Cramér–Rao bound trace of the linearised arm.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..estimate.crlb import linear_crlb, linear_phasors
from ..model import AbstractArm, TwoLinkArm, validate_unknowns
from ..simulation.open_loop import transient_periods
from .multisine import Multisine
from .multisine_criteria import NONLINEAR, predict_rmse

__all__ = ["design_scale", "LineDesign", "design_line_amplitudes"]


def _objective(rmse: np.ndarray, truth: np.ndarray, target_index: list[int]) -> np.ndarray:
    rel = rmse[..., target_index] / np.abs(truth[target_index])
    return np.sqrt(np.mean(rel**2, axis=-1))


def _eligible(obj: np.ndarray, grid_s: np.ndarray, grid_r: np.ndarray) -> np.ndarray:
    # Feasible, and so is every smaller scale at the same ratio: past the first infeasible scale
    # (link 2 over the top, several orbits) a feasible island is not trusted.
    eligible = np.zeros_like(obj, dtype=bool)
    for r in np.unique(grid_r):
        idx = np.flatnonzero(grid_r == r)
        idx = idx[np.argsort(grid_s[idx])]
        eligible[idx] = np.cumprod(np.isfinite(obj[idx]), axis=0).astype(bool)
    return eligible


def design_scale(
    arm: TwoLinkArm,
    excitation: Multisine,
    *,
    noise_std: float,
    measured_periods: int = 1,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    target: Sequence[str] | None = ("m1", "m2"),
    scales: Float[ArrayLike, " S"] | None = None,
    joint2_ratios: Float[ArrayLike, " R"] | None = None,
    refine: int = 0,
    estimators: Sequence[str] = ("equation_error", "ml", NONLINEAR),
    sample_step: float = 0.01,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    discard_periods: int | None = None,
) -> dict:
    """Grid search for the excitation scale minimising each estimator's predicted relative RMSE.

    Args:
        arm: the (true or nominal) arm the design is for.
        excitation: the multisine whose shape is kept; its scale is searched.
        noise_std: angle noise standard deviation [rad] (the bound assumes Gaussian noise).
        measured_periods: record length in periods.
        unknowns: estimated parameters; ``target``: those the objective averages (default the
            masses; ``None``: all unknowns).
        scales: candidate scales (default ``geomspace(0.05, 2.5, 17)``).
        joint2_ratios: optional candidate ratios of joint 2's to joint 1's amplitudes (joint 1
            keeps the excitation's); the grid is their product with ``scales``.
        refine: if ``> 0``, that many extra scales between the neighbours of each estimator's
            best grid point (same ratio) are evaluated and included.
        estimators, sample_step, q0, discard_periods: as ``predict_rmse``.

    Returns:
        ``{"table": DataFrame, "best": DataFrame}``: ``table`` has one row per (scale, ratio,
        estimator, parameter) with ``bias``, ``crlb_std``, ``rmse``, ``relative_rmse``,
        ``objective``, ``feasible`` and ``eligible``; ``best`` one row per estimator with the
        minimising ``scale``, ``joint2_ratio``, ``objective`` and the target parameters' ``rmse``,
        over the *eligible* candidates: feasible, and every smaller grid scale (same ratio)
        feasible too. A feasible island beyond the first infeasible scale is not chosen.
    """
    import pandas as pd

    unknowns = validate_unknowns(unknowns)
    target = unknowns if target is None else validate_unknowns(target)
    missing = [t for t in target if t not in unknowns]
    if missing:
        raise ValueError(f"target {missing} is not among the unknowns {list(unknowns)}.")
    target_index = [unknowns.index(t) for t in target]
    truth = np.asarray(arm.parameter_vector(unknowns))
    scales = np.geomspace(0.05, 2.5, 17) if scales is None else np.atleast_1d(np.asarray(scales, dtype=float))
    ratios = np.ones(1) if joint2_ratios is None else np.atleast_1d(np.asarray(joint2_ratios, dtype=float))
    if np.any(scales <= 0) or np.any(ratios <= 0):
        raise ValueError("scales and joint2_ratios must be positive.")
    if discard_periods is None:
        discard_periods = transient_periods(arm, excitation, q0)
    common = dict(
        unknowns=unknowns,
        noise_std=noise_std,
        measured_periods=measured_periods,
        sample_step=sample_step,
        estimators=estimators,
        q0=q0,
        discard_periods=discard_periods,
    )

    def evaluate(s, r):
        pred = predict_rmse(arm, excitation, s, joint_gains=np.stack([np.ones_like(r), r], -1), **common)
        return {k: np.asarray(getattr(pred, k)) for k in ("bias", "crlb_std", "rmse", "feasible")}, pred.names

    grid_s, grid_r = (a.ravel() for a in np.meshgrid(scales, ratios, indexing="ij"))
    res, names = evaluate(grid_s, grid_r)
    if refine > 0:
        obj = _objective(res["rmse"], truth, target_index)  # (B, E)
        obj = np.where(_eligible(obj, grid_s, grid_r), obj, np.inf)
        extra_s, extra_r = [], []
        for e in range(len(names)):
            b = int(np.argmin(obj[:, e]))
            i = int(np.searchsorted(scales, grid_s[b]))
            lo, hi = scales[max(i - 1, 0)], scales[min(i + 1, len(scales) - 1)]
            fine = np.geomspace(lo, hi, refine + 2)[1:-1]
            extra_s.append(fine)
            extra_r.append(np.full_like(fine, grid_r[b]))
        more, _ = evaluate(np.concatenate(extra_s), np.concatenate(extra_r))
        grid_s = np.concatenate([grid_s, *extra_s])
        grid_r = np.concatenate([grid_r, *extra_r])
        res = {k: np.concatenate([res[k], more[k]]) for k in res}
    obj = _objective(res["rmse"], truth, target_index)
    eligible = _eligible(obj, grid_s, grid_r)
    choice = np.where(eligible, obj, np.inf)

    rows = []
    for b in range(len(grid_s)):
        for e, name in enumerate(names):
            for i, u in enumerate(unknowns):
                rows.append(
                    dict(
                        scale=grid_s[b],
                        joint2_ratio=grid_r[b],
                        estimator=name,
                        parameter=u,
                        truth=truth[i],
                        bias=res["bias"][b, e, i],
                        crlb_std=res["crlb_std"][b, e, i],
                        rmse=res["rmse"][b, e, i],
                        relative_rmse=res["rmse"][b, e, i] / abs(truth[i]),
                        objective=obj[b, e],
                        feasible=bool(res["feasible"][b, e]),
                        eligible=bool(eligible[b, e]),
                    )
                )
    table = pd.DataFrame(rows).sort_values(["estimator", "joint2_ratio", "scale", "parameter"], ignore_index=True)
    best = []
    for e, name in enumerate(names):
        b = int(np.argmin(choice[:, e]))
        row = dict(estimator=name, scale=grid_s[b], joint2_ratio=grid_r[b], objective=obj[b, e])
        for i in target_index:
            row[f"rmse_{unknowns[i]}"] = res["rmse"][b, e, i]
            row[f"bias_{unknowns[i]}"] = res["bias"][b, e, i]
            row[f"crlb_std_{unknowns[i]}"] = res["crlb_std"][b, e, i]
        best.append(row)
    return {"table": table, "best": pd.DataFrame(best)}


# -- which lines, which amplitudes: the multisine's line amplitudes by gradient ------------------


class LineDesign(eqx.Module):
    """The result of ``design_line_amplitudes``.

    Attributes:
        excitation: the designed ``Multisine`` (same lines, phases and scale; new amplitudes).
        start: the given excitation.
        unknowns: static parameter names of the bound.
        bound_start, bound_end: ``Σ_i C_ii / θ_i²`` (the relative Cramér–Rao bound trace of the
            linearised arm) at the start and at the result.
        relative_std_start, relative_std_end: ``√C_ii / |θ_i|`` per unknown.
        angle_rms_start, angle_rms_end: RMS of each joint's linear steady-state angle [rad] (how far
            the excitation drives the arm from the operating point: the linearisation's validity).
        iterations: BFGS steps; seconds: wall time (compilation included).
    """

    excitation: Multisine
    start: Multisine
    unknowns: tuple[str, ...] = eqx.field(static=True)
    bound_start: float = eqx.field(static=True)
    bound_end: float = eqx.field(static=True)
    relative_std_start: tuple[float, ...] = eqx.field(static=True)
    relative_std_end: tuple[float, ...] = eqx.field(static=True)
    angle_rms_start: tuple[float, ...] = eqx.field(static=True)
    angle_rms_end: tuple[float, ...] = eqx.field(static=True)
    iterations: int = eqx.field(static=True)
    seconds: float = eqx.field(static=True)


def _with_shares(excitation: Multisine, power: Array, v: Array) -> Multisine:
    return excitation.replace(amplitudes=jnp.sqrt(power * jax.nn.softmax(v, axis=1)))


def _relative_bound(ex, arm, unknowns, std, theta, q0, sample_step, periods) -> Array:
    c = linear_crlb(arm, ex, unknowns, noise_std=std, sample_step=sample_step, periods=periods, q0=q0)
    return jnp.diag(c) / theta**2


# Module-level compiled functions (arrays traced, the rest static): a ``design_line_amplitudes`` call
# with the shapes and options of an earlier one reuses its programs instead of compiling new closures.
@eqx.filter_jit
def _solve_shares(v0, arm, excitation, unknowns, std, theta, power, q0, sample_step, periods, steps, tolerance):
    import optimistix as optx

    def objective(v, args):
        ex = _with_shares(excitation, power, v)
        return jnp.log(jnp.sum(_relative_bound(ex, arm, unknowns, std, theta, q0, sample_step, periods)))

    sol = optx.minimise(objective, optx.BFGS(rtol=tolerance, atol=tolerance), v0, max_steps=steps, throw=False)
    return sol.value, sol.stats["num_steps"]


@eqx.filter_jit
def _report(ex, arm, unknowns, std, theta, q0, sample_step, periods) -> tuple[Array, Array]:
    """The relative bounds and each joint's angle RMS of ``ex``."""
    q = linear_phasors(arm, ex, unknowns, q0)(theta)  # (L, n)
    rms = jnp.sqrt(0.5 * jnp.sum(jnp.abs(q) ** 2, axis=0))
    return _relative_bound(ex, arm, unknowns, std, theta, q0, sample_step, periods), rms


def design_line_amplitudes(
    arm: AbstractArm,
    excitation: Multisine,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    *,
    noise_std: Float[ArrayLike, "*#n"],
    sample_step: float = 0.01,
    periods: int = 1,
    steps: int = 200,
    tolerance: float = 1e-8,
    q0: Float[ArrayLike, " n"] | None = None,
) -> LineDesign:
    """Redistribute each joint's torque power over its lines to minimise the relative linear bound.

    The criterion is ``Σ_i C_ii / θ_i²`` with ``C = jaxid.estimate.crlb.linear_crlb`` (the linearised arm's
    Cramér–Rao bound for ``unknowns`` at their true values ``θ``, angle noise ``noise_std`` [rad],
    ``periods`` periods sampled every ``sample_step`` s). The lines and phases are kept; joint ``j``'s
    amplitudes are ``d_ji = √(P_j softmax(v_j)_i)`` with ``P_j = Σ_i d_ji²`` of the start, so each
    joint's torque power (and RMS) stays that of ``excitation`` while ``v`` (unconstrained) moves the
    power between lines (a line whose share goes to ~0 is effectively dropped: which lines). Minimised
    in ``log`` by ``optimistix.BFGS`` (``jax.grad`` through the bound). Larger angle amplitudes
    lower the linear bound but raise the linearisation bias of linear-model estimators, which this
    criterion does not see: compare ``angle_rms_start`` and ``angle_rms_end``, and check the design
    with ``design_scale`` / ``predict_rmse``.

    Raises ``ValueError`` (one line) for a non-positive noise or amplitude, a zero true parameter (its
    relative bound is undefined), or bad ``steps``.
    """
    import time

    from ..simulation.linearisation import parameter_values

    std = np.asarray(noise_std, dtype=float)
    if std.ndim > 1 or not np.all(np.isfinite(std) & (std > 0)):
        raise ValueError(f"noise_std must be positive and finite [rad], a scalar or one per joint, got {noise_std!r}.")
    if isinstance(steps, bool) or not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps must be a positive integer, got {steps!r}.")
    amplitudes = np.asarray(excitation.amplitudes)
    if amplitudes.ndim != 2 or not np.all(amplitudes > 0):
        raise ValueError("design_line_amplitudes needs one unbatched multisine with positive amplitudes.")
    unknowns = tuple(unknowns)
    theta = parameter_values(arm, unknowns, q0)
    if not bool(jnp.all(jnp.abs(theta) > 0)):
        raise ValueError(f"every unknown needs a non-zero true value for a relative bound, got {np.asarray(theta)}.")
    clock = time.perf_counter()
    power = jnp.sum(excitation.amplitudes**2, axis=1, keepdims=True)
    q0_arr = None if q0 is None else jnp.asarray(q0, dtype=float)

    v, iterations = _solve_shares(
        jnp.log(excitation.amplitudes**2),
        arm,
        excitation,
        unknowns,
        std,
        theta,
        power,
        q0_arr,
        sample_step,
        periods,
        steps,
        tolerance,
    )
    designed = _with_shares(excitation, power, v)
    rel0, rms0 = _report(excitation, arm, unknowns, std, theta, q0_arr, sample_step, periods)
    rel1, rms1 = _report(designed, arm, unknowns, std, theta, q0_arr, sample_step, periods)
    return LineDesign(
        excitation=designed,
        start=excitation,
        unknowns=unknowns,
        bound_start=float(jnp.sum(rel0)),
        bound_end=float(jnp.sum(rel1)),
        relative_std_start=tuple(np.sqrt(np.asarray(rel0)).tolist()),
        relative_std_end=tuple(np.sqrt(np.asarray(rel1)).tolist()),
        angle_rms_start=tuple(np.asarray(rms0).tolist()),
        angle_rms_end=tuple(np.asarray(rms1).tolist()),
        iterations=int(iterations),
        seconds=time.perf_counter() - clock,
    )
