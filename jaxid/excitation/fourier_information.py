"""The information of a periodic Fourier excitation about an arm's base parameters, and the criteria
``jaxid.excitation.fourier_design`` minimises.

The experiment: an arm tracks a periodic Fourier trajectory (``jaxid.excitation.fourier.FourierTrajectory``,
Swevers et al. 1997), its joint torques are measured at ``samples`` equally spaced times of each of
``periods`` periods with white Gaussian noise of std ``σ_j`` on joint ``j``, the states are known,
and IDIM least squares estimates the base parameters ``θ_b`` (``jaxid.model.base_parameters``) from
``τ = W_b(q, q', q'') θ_b + e``. Its Fisher information and Cramér–Rao bound are

    F = P · Σ_k W_b(t_k)ᵀ Σ⁻¹ W_b(t_k),    C = F⁻¹,    Σ = diag(σ_1², …, σ_n²)

(weighted least squares with the true ``Σ`` attains ``C`` exactly: the model is linear);
``regressor_information`` is the one kernel of ``Σ_k W_kᵀ Σ⁻¹ W_k`` and ``inverse_information`` the
one scaled inverse (the benchmark's bound uses both). Two scalar criteria of a trajectory:

- ``relative_bound_trace``: ``trace(D⁻¹ C D⁻¹) = trace((D F D)⁻¹)`` with ``D = diag(d)``, ``d_i`` the
  magnitude of base parameter ``i`` at the nominal arm, floored (``parameter_magnitudes``): the sum of
  the squared relative standard deviations the best unbiased estimator can reach.
- ``regressor_condition``: the 2-norm condition number of the stacked base regressor ``W_b`` (rows:
  samples × joints, one period, unweighted), as the peers minimise it (FloBaRoID, FIGAROH, Swevers'
  and Gautier's ``cond(W)``): ``column_scaling="none"`` (default, the raw base regressor in SI units,
  what they compute) or ``"unit"`` (columns scaled to unit norm, the scale-free number jaxid's IDIM
  reports).

The criteria are pure functions (``jit``/``grad``-safe; ``eqx.filter_jit`` on concrete calls); they
use ``jnp.linalg`` (LAPACK), so never call them under ``vmap`` (``docs/lapack-deadlock.md``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..estimate.crlb import inverse_information, regressor_information
from ..model.base_parameters import BaseParameters, base_regressor
from ..model.interface import AbstractArm
from ..types import compiled_when_concrete
from .fourier import FourierTrajectory

__all__ = [
    "DEFAULT_FLOORS",
    "parameter_magnitudes",
    "design_regressor",
    "information_matrix",
    "regressor_information",
    "inverse_information",
    "base_parameter_bound",
    "relative_bound_trace",
    "regressor_condition",
]

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
