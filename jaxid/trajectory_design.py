"""Excitation trajectories designed by gradient: the Cramér–Rao bound of the base parameters.

The experiment: an arm tracks a periodic Fourier trajectory (``jaxid.reference.FourierTrajectory``,
Swevers et al. 1997), its joint torques are measured at ``samples`` equally spaced times of each of
``periods`` periods with white Gaussian noise of std ``σ_j`` on joint ``j``, the states are known,
and IDIM least squares estimates the base parameters ``θ_b`` (``jaxid.model.base_parameters``) from
``τ = W_b(q, q', q'') θ_b + e``. Its Fisher information and Cramér–Rao bound are

    F = P · Σ_k W_b(t_k)ᵀ Σ⁻¹ W_b(t_k),    C = F⁻¹,    Σ = diag(σ_1², …, σ_n²)

(weighted least squares with the true ``Σ`` attains ``C`` exactly: the model is linear). Two scalar
criteria of a trajectory:

- ``relative_bound_trace``: ``trace(D⁻¹ C D⁻¹) = trace((D F D)⁻¹)`` with ``D = diag(d)``, ``d_i`` the
  magnitude of base parameter ``i`` at the nominal arm, floored (``parameter_magnitudes``): the sum of
  the squared relative standard deviations the best unbiased estimator can reach.
- ``regressor_condition``: the 2-norm condition number of the stacked base regressor ``W_b`` (rows:
  samples × joints, one period, unweighted), as the peers minimise it (FloBaRoID, FIGAROH, Swevers'
  and Gautier's ``cond(W)``): ``column_scaling="none"`` (default, the raw base regressor in SI units,
  what they compute) or ``"unit"`` (columns scaled to unit norm, the scale-free number jaxid's IDIM
  reports).

``design_trajectory`` minimises either by BFGS (``optimistix``) on the Fourier coefficients. The
joint limits are kept by construction (a smooth reparametrisation): joint ``j``'s offset is
``q0_j = mid_j + d_j``, ``d_j = ½ m h_j tanh(u_j)`` (``m`` the margin, ``h_j`` the half range, ``mid_j`` the
middle of the range) and its oscillation ``x_j(t)`` (the Fourier sum of raw coefficients) is scaled by
``s_j = 1 / ‖(X⁺_j/(m h_j − d_j), X⁻_j/(m h_j + d_j), V_j/(m v_j), A_j/(m α_j))‖_p`` with
``X^±_j = ‖max(±x_j, 0)‖_p``, ``V_j = ‖x'_j‖_p``, ``A_j = ‖x''_j‖_p`` over the design samples, ``p = 32``
(a p-norm is ≥ the max, so the scaled trajectory stays inside ``margin`` of every limit on those
samples, and it is differentiable). At the end the trajectory is rescaled exactly, joint by joint,
with the true maxima on ``1024 L`` samples per period (``check_limits``' grid), so that the binding
limit of every joint sits at ``margin``.

The criteria are pure functions (``jit``/``grad``-safe; ``eqx.filter_jit`` on concrete calls); they
use ``jnp.linalg`` (LAPACK), so ``design_trajectory`` runs its random starts one after the other
with one compiled solve, never under ``vmap`` (``docs/lapack-deadlock.md``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from .model.base_parameters import BaseParameters, base_parameters, base_regressor
from .model.interface import AbstractArm
from .model.serial import SerialArm
from .reference import (
    DEFAULT_MARGIN,
    FourierTrajectory,
    JointLimits,
    LimitRatios,
    check_limits,
    joint_limits,
    random_fourier_trajectory,
)
from .types import compiled_when_concrete, require_float64

__all__ = [
    "CRITERIA",
    "DEFAULT_FLOORS",
    "SMOOTH_NORM",
    "parameter_magnitudes",
    "design_regressor",
    "information_matrix",
    "regressor_information",
    "inverse_information",
    "base_parameter_bound",
    "relative_bound_trace",
    "regressor_condition",
    "TrajectoryDesign",
    "design_trajectory",
]

#: The criteria ``design_trajectory`` minimises.
CRITERIA: tuple[str, ...] = ("bound", "condition")
#: Floors of ``parameter_magnitudes`` by the kind of a base parameter's leading standard parameter
#: (SI units: kg, kg m, kg m², N m s/rad, N m, N m; the same numbers for prismatic joints' N s/m, N).
DEFAULT_FLOORS: dict[str, float] = {
    "mass": 0.1,
    "first_moment": 0.01,
    "inertia": 0.01,
    "viscous": 0.01,
    "coulomb": 0.1,
    "offset": 0.1,
}
#: The order ``p`` of the smooth maxima (p-norms) of the limit reparametrisation.
SMOOTH_NORM = 32.0

_KINDS = (
    (r"m\d+$", "mass"),
    (r"m[xyz]\d+$", "first_moment"),
    (r"(I[xyz]{2}|Ia|I)\d*$", "inertia"),
    (r"fv\d+$", "viscous"),
    (r"fc\d+$", "coulomb"),
    (r"off\d+$", "offset"),
)


def _kind(name: str) -> str:
    for pattern, kind in _KINDS:
        if re.match(pattern, name):
            return kind
    # TwoLinkArm-style names (m1r1, m2r2: first moments; Ir: a rotor inertia)
    if re.match(r"m\d+r\d+$", name):
        return "first_moment"
    if name.startswith("I"):
        return "inertia"
    raise ValueError(f"parameter_magnitudes: no floor for base parameter {name!r}; pass floors or magnitudes.")


def parameter_magnitudes(
    base: BaseParameters, standard: Float[ArrayLike, " s"], floors: Mapping[str, float] | None = None
) -> Float[Array, " r"]:
    """``d_i = max(|θ_b,i|, floor_i)``: the scale of each base parameter in the relative bound.

    ``θ_b = base.values(standard)`` at the nominal arm; ``floor_i`` is ``floors[kind]`` (default
    ``DEFAULT_FLOORS``) for the kind of base parameter ``i``'s leading standard parameter (``"Izz1 + Iyy2"``
    is an inertia, ``"my2 − 0.316 m3"`` a first moment). The floor keeps parameters that are zero or
    tiny at the nominal arm (products of inertia, Coulomb friction and offsets absent from a URDF)
    from dominating: below it a parameter's absolute error is judged against the floor. Raises
    ``ValueError`` for a non-positive floor or an unknown parameter kind.
    """
    floors = {**DEFAULT_FLOORS, **(floors or {})}
    for kind, value in floors.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"floors[{kind!r}] must be a positive number, got {value!r}.")
    floor = jnp.asarray([floors[_kind(name)] for name in base.names])
    return jnp.maximum(jnp.abs(base.values(jnp.asarray(standard, dtype=float))), floor)


def _times(period: float, samples: int) -> Array:
    return jnp.arange(samples) * (period / samples)


@compiled_when_concrete
def design_regressor(
    arm: AbstractArm, base: BaseParameters, trajectory: FourierTrajectory, samples: int
) -> Float[Array, "samples n r"]:
    """The base regressor ``W_b(t_k)`` at ``t_k = k T / samples`` of one period, ``(samples, n, r)``."""
    q, qd, qdd = trajectory.evaluate(_times(trajectory.period, samples))
    return base_regressor(arm, q, qd, qdd, base)


def information_matrix(
    arm: AbstractArm,
    base: BaseParameters,
    trajectory: FourierTrajectory,
    *,
    noise_std: Float[ArrayLike, "*#n"],
    samples: int,
    periods: int = 1,
) -> Float[Array, "r r"]:
    """Fisher information ``F = P Σ_k W_b(t_k)ᵀ Σ⁻¹ W_b(t_k)`` of the base parameters (see the module
    docstring): ``samples`` equally spaced times per period (static), ``periods`` periods (static),
    torque noise std ``noise_std`` [N m], scalar or per joint ``(n,)``. Pure; differentiable in the
    trajectory's coefficients and the noise."""
    return periods * regressor_information(design_regressor(arm, base, trajectory, samples), noise_std)


def regressor_information(
    regressor: Float[ArrayLike, "N n r"], noise_std: Float[ArrayLike, "*#n"]
) -> Float[Array, "r r"]:
    """``Σ_k W_kᵀ Σ⁻¹ W_k`` from regressor rows ``(N, n, r)`` and the torque noise std per joint: the
    one Fisher-information kernel (a designed trajectory's rows here, a simulated run's in the
    benchmark). Pure."""
    w = jnp.asarray(regressor, dtype=float) / jnp.asarray(noise_std, dtype=float)[..., None]
    return jnp.einsum("knp,knq->pq", w, w)


def inverse_information(information: Float[ArrayLike, "r r"]) -> Float[Array, "r r"]:
    """``F⁻¹``, inverted after scaling ``F`` to unit diagonal (columns of very different magnitudes,
    a friction beside a wrist inertia, keep their digits). Pure."""
    f = jnp.asarray(information, dtype=float)
    scale = jnp.sqrt(jnp.diag(f))
    return jnp.linalg.inv(f / jnp.outer(scale, scale)) / jnp.outer(scale, scale)


def base_parameter_bound(
    arm: AbstractArm,
    base: BaseParameters,
    trajectory: FourierTrajectory,
    *,
    noise_std: Float[ArrayLike, "*#n"],
    samples: int,
    periods: int = 1,
) -> Float[Array, "r r"]:
    """The Cramér–Rao bound ``C = F⁻¹`` ``(r, r)`` of the base parameters (``information_matrix``),
    inverted after scaling ``F`` to unit diagonal. Pure."""
    return inverse_information(
        information_matrix(arm, base, trajectory, noise_std=noise_std, samples=samples, periods=periods)
    )


def relative_bound_trace(
    arm: AbstractArm,
    base: BaseParameters,
    trajectory: FourierTrajectory,
    *,
    noise_std: Float[ArrayLike, "*#n"],
    magnitudes: Float[ArrayLike, " r"],
    samples: int,
    periods: int = 1,
) -> Float[Array, ""]:
    """``trace(D⁻¹ C D⁻¹) = trace((D F D)⁻¹)``, ``D = diag(magnitudes)`` (``parameter_magnitudes``): the
    summed squared relative standard deviations of the base parameters at the bound. Computed by a
    Cholesky factor ``L`` of ``D F D`` (``‖L⁻¹‖²_F``). Pure; ``grad``-safe (``nan`` when ``F`` is singular)."""
    d = jnp.asarray(magnitudes, dtype=float)
    f = information_matrix(arm, base, trajectory, noise_std=noise_std, samples=samples, periods=periods)
    lower = jnp.linalg.cholesky(f * jnp.outer(d, d))
    inverse = jax.scipy.linalg.solve_triangular(lower, jnp.eye(d.shape[0]), lower=True)
    return jnp.sum(inverse**2)


def regressor_condition(
    arm: AbstractArm,
    base: BaseParameters,
    trajectory: FourierTrajectory,
    *,
    samples: int,
    column_scaling: str = "none",
) -> Float[Array, ""]:
    """The 2-norm condition number of the stacked base regressor ``W_b`` ``(samples · n, r)`` over one
    period, ``√(λ_max / λ_min)`` of its Gram matrix; ``column_scaling`` ``"none"`` (raw, SI units, the
    peers' ``cond(W)``) or ``"unit"`` (unit-norm columns). Pure; ``grad``-safe for distinct extreme
    singular values."""
    if column_scaling not in ("none", "unit"):
        raise ValueError(f'column_scaling must be "none" or "unit", got {column_scaling!r}.')
    w = design_regressor(arm, base, trajectory, samples)
    gram = jnp.einsum("knp,knq->pq", w, w)
    if column_scaling == "unit":
        scale = jnp.sqrt(jnp.diag(gram))
        gram = gram / jnp.outer(scale, scale)
    eig = jnp.linalg.eigvalsh(gram)
    return jnp.sqrt(eig[-1] / eig[0])


# -- design ----------------------------------------------------------------------------------------


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

    def bound(traj):
        return relative_bound_trace(
            arm, base, traj, noise_std=std, magnitudes=magnitudes, samples=samples, periods=periods
        )

    def condition(traj):
        return regressor_condition(arm, base, traj, samples=samples, column_scaling=column_scaling)

    measure = bound if criterion == "bound" else condition

    @eqx.filter_jit
    def solve(z0):
        def objective(z, args):
            return jnp.log(measure(_smooth_trajectory(z, lim, period, samples, margin)))

        solver = optx.BFGS(rtol=tolerance, atol=tolerance)
        sol = optx.minimise(objective, solver, z0, max_steps=steps, throw=False)
        traj = _exact_rescale(_smooth_trajectory(sol.value, lim, period, samples, margin), lim, margin)
        return traj, sol.stats["num_steps"]

    evaluate = eqx.filter_jit(lambda traj: (bound(traj), condition(traj)))
    runs = []
    for traj0 in first:
        deviation = (traj0.offset - lim.middle) / (0.5 * margin * lim.half_range)
        if not bool(jnp.all(jnp.abs(deviation) < 1)):
            raise ValueError("start offsets must lie within margin / 2 of each joint's half range about its middle.")
        z0 = (jnp.arctanh(deviation), traj0.a, traj0.b)
        traj, iterations = solve(z0)
        values0, values1 = evaluate(traj0), evaluate(traj)
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
