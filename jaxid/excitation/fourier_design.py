"""Excitation trajectories designed by gradient: the Cramér–Rao bound of the base parameters.

``design_trajectory`` minimises a criterion of ``jaxid.excitation.fourier_information`` (``"bound"``: the
relative Cramér–Rao bound trace of the base parameters, ``relative_bound_trace``; ``"condition"``: the
base regressor's condition number, ``regressor_condition``; the experiment, the information and the
criteria are described there) by BFGS (``optimistix``) on the Fourier coefficients of a periodic
reference (``jaxid.excitation.fourier.FourierTrajectory``). The joint limits are kept by construction (a smooth
reparametrisation): joint ``j``'s offset is
``q0_j = mid_j + d_j``, ``d_j = ½ m h_j tanh(u_j)`` (``m`` the margin, ``h_j`` the half range, ``mid_j`` the
middle of the range) and its oscillation ``x_j(t)`` (the Fourier sum of raw coefficients) is scaled by
``s_j = 1 / ‖(X⁺_j/(m h_j − d_j), X⁻_j/(m h_j + d_j), V_j/(m v_j), A_j/(m α_j))‖_p`` with
``X^±_j = ‖max(±x_j, 0)‖_p``, ``V_j = ‖x'_j‖_p``, ``A_j = ‖x''_j‖_p`` over the design samples, ``p = 32``
(a p-norm is ≥ the max, so the scaled trajectory stays inside ``margin`` of every limit on those
samples, and it is differentiable). At the end the trajectory is rescaled exactly, joint by joint,
with the true maxima on ``1024 L`` samples per period (``check_limits``' grid), so that the binding
limit of every joint sits at ``margin``.

The criteria use ``jnp.linalg`` (LAPACK), so ``design_trajectory`` runs its random starts one after
the other with one compiled solve, never under ``vmap`` (``docs/lapack-deadlock.md``).
"""

from __future__ import annotations

import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from ..model.base_parameters import BaseParameters, base_parameters
from ..model.interface import AbstractArm
from ..model.serial import SerialArm
from ..types import require_float64
from .fourier import (
    DEFAULT_MARGIN,
    FourierTrajectory,
    JointLimits,
    LimitRatios,
    check_limits,
    joint_limits,
    random_fourier_trajectory,
)
from .fourier_information import (  # inverse_information, regressor_information: re-exported
    _times,
    inverse_information,  # noqa: F401
    parameter_magnitudes,
    regressor_condition,
    regressor_information,  # noqa: F401
    relative_bound_trace,
)

__all__ = ["CRITERIA", "SMOOTH_NORM", "TrajectoryDesign", "design_trajectory"]

#: The criteria ``design_trajectory`` minimises.
CRITERIA: tuple[str, ...] = ("bound", "condition")
#: The order ``p`` of the smooth maxima (p-norms) of the limit reparametrisation.
SMOOTH_NORM = 32.0


class TrajectoryDesign(eqx.Module):
    """The result of ``design_trajectory``.

    Attributes:
        trajectory: the designed ``FourierTrajectory`` (limits met exactly at ``margin`` on the dense grid).
        start: the feasible start of the best run (a ``random_fourier_trajectory`` or the given one).
        criterion: ``"bound"`` or ``"condition"`` (what was minimised).
        bound_start, bound_end: ``relative_bound_trace`` at the start and at the result.
        condition_start, condition_end: ``regressor_condition`` at the start and at the result.
        limit_ratios: ``check_limits`` of the result on ``1024 L`` samples per period (each ≤ margin).
        iterations: BFGS steps of the best run. seconds: wall time of the whole design (all starts,
            compilation included). start_values, end_values: ``(starts,)`` the minimised criterion at
            every start and at its optimum (after the exact rescaling).
    """

    trajectory: FourierTrajectory
    start: FourierTrajectory
    criterion: str = eqx.field(static=True)
    bound_start: float = eqx.field(static=True)
    bound_end: float = eqx.field(static=True)
    condition_start: float = eqx.field(static=True)
    condition_end: float = eqx.field(static=True)
    limit_ratios: LimitRatios
    iterations: int = eqx.field(static=True)
    seconds: float = eqx.field(static=True)
    start_values: tuple[float, ...] = eqx.field(static=True)
    end_values: tuple[float, ...] = eqx.field(static=True)


def _pnorm(x: Array, axis: int) -> Array:
    """``‖x‖_p`` along ``axis`` (``p = SMOOTH_NORM``), ``x ≥ 0``, scaled by its max for range."""
    m = jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    m = jnp.where(m > 0, m, 1.0)
    return jnp.squeeze(m, axis) * jnp.sum((x / m) ** SMOOTH_NORM, axis=axis) ** (1.0 / SMOOTH_NORM)


class _Limits(eqx.Module):
    middle: Array
    half_range: Array
    velocity: Array
    acceleration: Array


def _oscillation(a: Array, b: Array, period: float, samples: int) -> tuple[Array, Array, Array]:
    """``(x, x', x'')`` ``(samples, n)`` of the zero-offset Fourier sum of ``(a, b)``."""
    zero = FourierTrajectory(jnp.zeros(a.shape[0]), a, b, period)
    return zero.evaluate(_times(period, samples))


def _smooth_trajectory(z, limits: _Limits, period: float, samples: int, margin: float) -> FourierTrajectory:
    """The feasible trajectory of the unconstrained ``z = (u, a, b)`` (module docstring)."""
    u, a, b = z
    deviation = 0.5 * margin * limits.half_range * jnp.tanh(u)
    x, xd, xdd = _oscillation(a, b, period, samples)
    ratios = jnp.stack(
        [
            _pnorm(jnp.maximum(x, 0.0), 0) / (margin * limits.half_range - deviation),
            _pnorm(jnp.maximum(-x, 0.0), 0) / (margin * limits.half_range + deviation),
            _pnorm(jnp.abs(xd), 0) / (margin * limits.velocity),
            _pnorm(jnp.abs(xdd), 0) / (margin * limits.acceleration),
        ]
    )  # (4, n)
    scale = 1.0 / _pnorm(ratios, 0)
    return FourierTrajectory(limits.middle + deviation, a * scale[:, None], b * scale[:, None], period)


def _exact_rescale(traj: FourierTrajectory, limits: _Limits, margin: float) -> FourierTrajectory:
    """Scale each joint's oscillation so its binding limit is met at ``margin`` on ``1024 L`` samples."""
    samples = 1024 * traj.harmonics
    x, xd, xdd = _oscillation(traj.a, traj.b, traj.period, samples)
    deviation = traj.offset - limits.middle
    ratios = jnp.stack(
        [
            jnp.max(x, axis=0) / (margin * limits.half_range - deviation),
            jnp.max(-x, axis=0) / (margin * limits.half_range + deviation),
            jnp.max(jnp.abs(xd), axis=0) / (margin * limits.velocity),
            jnp.max(jnp.abs(xdd), axis=0) / (margin * limits.acceleration),
        ]
    )
    scale = 1.0 / jnp.max(ratios, axis=0)
    return FourierTrajectory(traj.offset, traj.a * scale[:, None], traj.b * scale[:, None], traj.period)


def _check_design(arm, criterion, harmonics, period, limits, noise_std, steps, starts, samples, periods, margin):
    require_float64("design_trajectory")
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {list(CRITERIA)}, got {criterion!r}.")
    if isinstance(harmonics, bool) or not (isinstance(harmonics, (int, np.integer)) and harmonics >= 1):
        raise ValueError(f"harmonics must be a positive integer, got {harmonics!r}.")
    if not (isinstance(period, (int, float)) and math.isfinite(period) and period > 0):
        raise ValueError(f"period must be a positive number [s], got {period!r}.")
    for name, value in (("steps", steps), ("starts", starts), ("periods", periods)):
        if isinstance(value, bool) or not (isinstance(value, (int, np.integer)) and value >= 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if isinstance(samples, bool) or not (isinstance(samples, (int, np.integer)) and samples > 2 * harmonics):
        raise ValueError(f"samples must be an integer above 2 · harmonics = {2 * harmonics}, got {samples!r}.")
    if not (isinstance(margin, (int, float)) and 0 < margin <= 1):
        raise ValueError(f"margin must be a number in (0, 1], got {margin!r}.")
    std = np.asarray(noise_std, dtype=float)
    if std.ndim > 1 or (std.ndim == 1 and std.shape != (arm.dof,)) or not np.all(np.isfinite(std) & (std > 0)):
        raise ValueError(f"noise_std must be positive and finite [N m], a scalar or one per joint, got {noise_std!r}.")
    if limits is None:
        if not isinstance(arm, SerialArm):
            raise ValueError(f"{type(arm).__name__} carries no joint limits; pass limits=JointLimits(...).")
        limits = joint_limits(arm)
    if limits.dof != arm.dof:
        raise ValueError(f"limits are for {limits.dof} joints, the arm has {arm.dof}.")
    checks = {
        "half range": np.asarray(limits.half_range),
        "velocity": np.asarray(limits.velocity),
        "acceleration": np.asarray(limits.acceleration),
    }
    for name, value in checks.items():
        if not np.all(np.isfinite(value) & (value > 0)):
            raise ValueError(f"infeasible limits: every joint's {name} limit must be positive and finite, got {value}.")
    return limits, jnp.broadcast_to(jnp.asarray(std), (arm.dof,))


# Module-level compiled functions (arrays traced, the rest static): a ``design_trajectory`` call with the
# shapes and options of an earlier one reuses its program. Closures built inside each call were traced
# and compiled again every time (~20 s for a two-joint arm), even at the same options.
@eqx.filter_jit
def _solve(z0, arm, base, std, magnitudes, lim: _Limits, criterion: str, options: tuple, steps: int, tolerance: float):
    """BFGS from ``z0`` on ``log`` of the criterion, then the exact rescaling: ``(trajectory, steps taken)``;
    ``options = (period, samples, periods, margin, column_scaling)``."""
    period, samples, periods, margin, column_scaling = options

    def objective(z, args):
        traj = _smooth_trajectory(z, lim, period, samples, margin)
        if criterion == "bound":
            value = relative_bound_trace(
                arm, base, traj, noise_std=std, magnitudes=magnitudes, samples=samples, periods=periods
            )
        else:
            value = regressor_condition(arm, base, traj, samples=samples, column_scaling=column_scaling)
        return jnp.log(value)

    solver = optx.BFGS(rtol=tolerance, atol=tolerance)
    sol = optx.minimise(objective, solver, z0, max_steps=steps, throw=False)
    traj = _exact_rescale(_smooth_trajectory(sol.value, lim, period, samples, margin), lim, margin)
    return traj, sol.stats["num_steps"]


@eqx.filter_jit
def _evaluate(traj, arm, base, std, magnitudes, options: tuple) -> tuple[Array, Array]:
    """``(relative_bound_trace, regressor_condition)`` of ``traj``."""
    _, samples, periods, _, column_scaling = options
    bound = relative_bound_trace(
        arm, base, traj, noise_std=std, magnitudes=magnitudes, samples=samples, periods=periods
    )
    return bound, regressor_condition(arm, base, traj, samples=samples, column_scaling=column_scaling)


def design_trajectory(
    arm: AbstractArm,
    *,
    harmonics: int,
    period: float,
    noise_std: Float[ArrayLike, "*#n"],
    criterion: str = "bound",
    limits: JointLimits | None = None,
    start: FourierTrajectory | None = None,
    seed: int = 0,
    starts: int = 1,
    steps: int = 200,
    samples: int | None = None,
    periods: int = 1,
    margin: float = DEFAULT_MARGIN,
    base: BaseParameters | None = None,
    magnitudes: Float[ArrayLike, " r"] | None = None,
    column_scaling: str = "none",
    tolerance: float = 1e-8,
) -> TrajectoryDesign:
    """Optimise a periodic Fourier excitation by gradient for the identification of ``arm``'s base parameters.

    Minimises ``log`` of the criterion (``"bound"``: ``relative_bound_trace``; ``"condition"``:
    ``regressor_condition``) over the offsets and Fourier coefficients with ``optimistix.BFGS``, the
    limits kept by the smooth reparametrisation of the module docstring, then rescales each joint
    exactly so its binding limit sits at ``margin`` (checked by ``check_limits`` on ``1024 L`` samples).

    Args:
        arm: the nominal arm (unbatched ``SerialArm`` or any ``AbstractArm`` with ``limits``).
        harmonics: ``L`` (static). period: ``T`` [s] (static; base frequency ``1/T`` Hz).
        noise_std: torque noise std [N m] of the bound, scalar or per joint (also reported for ``"condition"``).
        criterion: ``"bound"`` or ``"condition"``.
        limits: ``JointLimits``; default ``joint_limits(arm)`` (URDF, 10 rad/s² acceleration).
        start: a feasible start (offsets within ``margin / 2`` of the half range about the middle); default
            ``starts`` random draws ``random_fourier_trajectory(limits, L, T, key=fold_in(key(seed), i))``.
        seed, starts: the random starts (run one after the other; the best end value is returned).
        steps: the most BFGS steps per start. tolerance: BFGS ``rtol`` and ``atol`` on the log criterion.
        samples: design samples per period (default ``64 L``); periods: measured periods ``P``.
        margin: fraction of the limits the result reaches, in ``(0, 1]``.
        base: ``base_parameters(arm)`` (computed when not given).
        magnitudes: ``D``'s diagonal; default ``parameter_magnitudes(base, arm.standard_parameters())``.
        column_scaling: of the condition number, ``"none"`` or ``"unit"``.

    Returns a ``TrajectoryDesign``. Host-side driver (a Python loop over starts around one compiled
    ``optimistix.minimise``). Raises ``ValueError`` (one line) for an unknown criterion, a
    non-positive noise, ``harmonics < 1``, infeasible limits, a start outside the limits or of the
    wrong shape, and other bad options.
    """
    samples = 64 * harmonics if samples is None and isinstance(harmonics, int) and harmonics >= 1 else samples
    limits, std = _check_design(
        arm, criterion, harmonics, period, limits, noise_std, steps, starts, samples, periods, margin
    )
    if column_scaling not in ("none", "unit"):
        raise ValueError(f'column_scaling must be "none" or "unit", got {column_scaling!r}.')
    clock = time.perf_counter()
    base = base_parameters(arm) if base is None else base
    if samples * arm.dof * periods < base.rank:
        raise ValueError(f"samples · n · periods must reach the {base.rank} base parameters; raise samples.")
    magnitudes = parameter_magnitudes(base, arm.standard_parameters()) if magnitudes is None else magnitudes
    magnitudes = jnp.asarray(magnitudes, dtype=float)
    if magnitudes.shape != (base.rank,) or not bool(jnp.all(magnitudes > 0)):
        raise ValueError(f"magnitudes must be ({base.rank},) positive values, got shape {magnitudes.shape}.")
    lim = _Limits(limits.middle, limits.half_range, limits.velocity, limits.acceleration)
    period = float(period)
    if start is None:
        root = jax.random.key(seed)
        first = [
            random_fourier_trajectory(limits, int(harmonics), period, key=jax.random.fold_in(root, i), margin=margin)
            for i in range(starts)
        ]
    else:
        if not isinstance(start, FourierTrajectory) or start.a.shape != (arm.dof, harmonics):
            raise ValueError(f"start must be a FourierTrajectory with a, b of shape ({arm.dof}, {harmonics}).")
        if abs(start.period - period) > 1e-12 * period:
            raise ValueError(f"start.period {start.period} differs from period {period}.")
        first = [start]

    options = (period, samples, periods, margin, column_scaling)
    runs = []
    for traj0 in first:
        deviation = (traj0.offset - lim.middle) / (0.5 * margin * lim.half_range)
        if not bool(jnp.all(jnp.abs(deviation) < 1)):
            raise ValueError("start offsets must lie within margin / 2 of each joint's half range about its middle.")
        z0 = (jnp.arctanh(deviation), traj0.a, traj0.b)
        traj, iterations = _solve(z0, arm, base, std, magnitudes, lim, criterion, options, steps, tolerance)
        values0 = _evaluate(traj0, arm, base, std, magnitudes, options)
        values1 = _evaluate(traj, arm, base, std, magnitudes, options)
        runs.append((traj0, traj, int(iterations), [float(v) for v in values0], [float(v) for v in values1]))
    index = 0 if criterion == "bound" else 1
    start_values = np.array([r[3][index] for r in runs])
    end_values = np.array([r[4][index] for r in runs])
    best = int(np.nanargmin(end_values))
    traj0, traj, iterations, values0, values1 = runs[best]
    ratios = check_limits(traj, limits)
    return TrajectoryDesign(
        trajectory=traj,
        start=traj0,
        criterion=criterion,
        bound_start=values0[0],
        bound_end=values1[0],
        condition_start=values0[1],
        condition_end=values1[1],
        limit_ratios=ratios,
        iterations=iterations,
        seconds=time.perf_counter() - clock,
        start_values=tuple(start_values.tolist()),
        end_values=tuple(end_values.tolist()),
    )
