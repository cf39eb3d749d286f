"""Frequency-domain maximum likelihood (output error) for the linearised arm.

With white angle noise the averaged phasors are, to an excellent approximation, independent
circular complex Gaussians around ``H(ω_k; θ) U_k`` with variance ``v_kj = E|Q̂_kj − Q_kj|²``
(``line_variance``); the torques are known exactly. The negative log-likelihood is then, up to a
constant, the weighted output error

    V(θ) = Σ_k Σ_j |Q̂_kj − (H(ω_k; θ) U_k)_j|² / v_kj,      H = (K0 − ω² D0 + jω Fv)⁻¹,

minimised here by Levenberg–Marquardt (``optimistix.LevenbergMarquardt``) started from the
equation-error estimate (or the nominal values). ``solver="gauss_newton"`` takes undamped
Gauss–Newton steps instead; where ``Z`` is affine in ``θ`` (masses, inertias, friction,
unstructured entries) they are written out (``gauss_newton_affine``): ``Z = Z0 + Σ θ_i Z_i``,
``∂r/∂θ_i = w H Z_i (H U)`` in closed form, the 2×2 products as broadcast sums and the p×p normal
equations by Cholesky, which keeps a ``vmap``-ed batch of fits elementwise (an order of magnitude
cheaper per trial than the generic optimiser on XLA CPU). The covariance is the inverse Gauss–Newton
Hessian ``(JᵀJ)⁻¹`` of the whitened residual: the Cramér–Rao bound evaluated at the estimate. Unlike
equation error the noisy ``Q̂`` is never inside the model, so there is no errors-in-variables
bias; the estimator reaches the bound (tests check its Monte Carlo std against ``crlb``).

The residual function is exposed (``output_error_residual``) so other estimators can reuse it,
e.g. the nonlinear output-error estimator with a different model of ``Q(θ)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
import optimistix as optx
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from ..excitation.multisine import Multisine
from ..linalg import RCOND, SmallSolver, cholesky, is_singular_information, solve_triangular
from ..measure.spectrum import Spectrum, fourier_coefficients
from ..model import TwoLinkArm
from ..simulation.linearisation import affine_impedance
from ..simulation.open_loop import Record
from .base import (
    CONVERGED,
    FAILED,
    MAX_ITERATIONS,
    SINGULAR,
    Estimate,
    impedance_model,
    inverse_2x2,
    is_affine,
    parameter_values,
    register,
    resolve_unknowns,
    small_qr,
    upper_triangular_inverse,
)
from .equation_error import Weighting, equation_error_fit, line_variance

__all__ = [
    "ml",
    "ml_fit",
    "output_error_residual",
    "gauss_newton_covariance",
    "levenberg_marquardt",
    "gauss_newton_affine",
]

Start = Literal["equation_error", "nominal"]
Solver = Literal["levenberg_marquardt", "gauss_newton"]


def output_error_residual(
    spectrum: Spectrum,
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    variance: Float[Array, "L 2"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> Callable[[Array], Array]:
    """``θ ↦ r(θ)``, the whitened output error, shape ``(4L,)``.

    ``r`` stacks ``Re`` and ``Im`` of ``(Q̂ − H(θ) Û) / sqrt(v/2)`` so that each component has unit
    variance under the noise model; ``||r||²`` is twice the negative log-likelihood (plus a
    constant) and ``JᵀJ`` the Fisher information.
    """
    impedance = impedance_model(nominal, unknowns, spectrum.omega, q0)
    w = jnp.sqrt(2.0 / variance)

    def residual(theta):
        h = inverse_2x2(impedance(theta))
        e = (spectrum.Q - jnp.einsum("kij,kj->ki", h, spectrum.U)) * w
        return jnp.concatenate([jnp.real(e), jnp.imag(e)], axis=1).reshape(-1)

    return residual


def gauss_newton_covariance(residual: Callable[[Array], Array], theta: Array) -> tuple[Array, Array]:
    """``((JᵀJ)⁻¹, singular)`` for a whitened residual at ``theta`` (``singular`` is a bool)."""
    j = jax.jacfwd(residual)(theta)
    scale = jnp.sqrt(jnp.sum(j * j, axis=0))
    scale = jnp.where(scale > 0, scale, 1.0)
    # (JᵀJ)⁻¹ = R⁻¹ R⁻ᵀ from a thin QR of the column-scaled J (no LAPACK, see base.small_qr).
    _, r = small_qr(j / scale)
    d = jnp.abs(jnp.diag(r))
    singular = ~(jnp.all(jnp.isfinite(r)) & (jnp.min(d) > RCOND * jnp.max(d)))
    rinv = upper_triangular_inverse(r)
    cov = (rinv @ rinv.T) / scale[:, None] / scale[None, :]
    return cov, singular


def levenberg_marquardt(
    residual: Callable[[Array], Array],
    theta0: Array,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int | Array = 100,
    solver: Solver = "levenberg_marquardt",
) -> tuple[Array, Array]:
    """Minimise ``||residual(θ)||²`` from ``theta0`` with optimistix's Levenberg–Marquardt.

    ``solver="gauss_newton"`` uses undamped Gauss–Newton instead: about half the iterations
    (and half the batch time under ``vmap``) on well-posed problems started close to the optimum,
    such as ML from the equation-error start; no safeguard against divergence from a poor start.

    Returns ``(θ̂, status)`` with status ``CONVERGED``, ``MAX_ITERATIONS`` or ``FAILED``. Never
    raises inside ``jit`` (``throw=False``); ``vmap``-able (the batch iterates until its slowest
    member stops).
    """
    if solver == "levenberg_marquardt":
        method = optx.LevenbergMarquardt(rtol=rtol, atol=atol, linear_solver=SmallSolver())
    elif solver == "gauss_newton":
        method = optx.GaussNewton(rtol=rtol, atol=atol, linear_solver=SmallSolver())
    else:
        raise ValueError(f"solver must be 'levenberg_marquardt' or 'gauss_newton', got {solver!r}.")
    sol = optx.least_squares(
        lambda y, _: residual(y),
        method,
        theta0,
        max_steps=max_steps,
        throw=False,
        adjoint=optx.ImplicitAdjoint(linear_solver=SmallSolver()),
    )
    status = jnp.where(
        sol.result == optx.RESULTS.successful,
        CONVERGED,
        jnp.where(sol.result == optx.RESULTS.nonlinear_max_steps_reached, MAX_ITERATIONS, FAILED),
    )
    status = jnp.where(jnp.all(jnp.isfinite(sol.value)), status, FAILED)
    return sol.value, status.astype(jnp.int32)


def _matvec(a: Array, x: Array) -> Array:
    """``a @ x`` over the trailing axes (``(..., m, n)`` by ``(..., n)``) as a broadcast product and
    a sum: under ``vmap`` this stays elementwise (XLA fuses it), where a batched ``dot_general`` of
    2×2 blocks costs far more per trial on XLA CPU."""
    return jnp.sum(a * x[..., None, :], axis=-1)


def _normal_equations(spectrum: Spectrum, weight: Array, z0: Array, zp: Array, theta: Array):
    """``(JᵀJ, Jᵀr)`` of the whitened output error ``r`` (``output_error_residual``) at ``theta``
    for ``Z(θ) = z0 + Σ_i θ_i zp[i]``: ``J_i = w H Z_i Y`` with ``H = Z⁻¹`` and ``Y = H U`` (exact).

    ``zp`` is ``(p, L, 2, 2)``: the parameter axis leads, so the sums over lines and joints run
    along contiguous memory (measured several times faster under ``vmap`` than ``(L, 2, 2, p)``).
    """
    h = inverse_2x2(z0 + jnp.sum(zp * theta[:, None, None, None], axis=0))  # (L, 2, 2)
    y = _matvec(h, spectrum.U)  # (L, 2): the model's angle phasors
    e = weight * (spectrum.Q - y)
    j = weight * _matvec(h, _matvec(zp, y))  # (p, L, 2)
    jr, ji = jnp.real(j), jnp.imag(j)
    gram = jnp.sum(jr[:, None] * jr[None] + ji[:, None] * ji[None], axis=(-2, -1))
    gradient = jnp.sum(jr * jnp.real(e) + ji * jnp.imag(e), axis=(-2, -1))
    return gram, gradient


def _scaled_cholesky(gram: Array) -> tuple[Array, Array]:
    """``(L, d)`` with ``gram = D L Lᵀ D``, ``D = diag(d)``: Cholesky of the unit-diagonal scaling."""
    d = jnp.sqrt(jnp.diag(gram))
    d = jnp.where(d > 0, d, 1.0)
    return cholesky(gram / d[:, None] / d[None, :]), d


def gauss_newton_affine(
    spectrum: Spectrum,
    variance: Float[Array, "L 2"],
    z0: Array,
    zi: Array,
    theta0: Float[Array, " p"],
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int | Array = 100,
) -> tuple[Array, Array, Array, Array]:
    """Undamped Gauss–Newton on the whitened output error for an affine ``Z(θ) = z0 + zi @ θ``
    (``linearisation.affine_impedance``), with the Jacobian in closed form.

    Iterates ``θ ← θ − (JᵀJ)⁻¹ Jᵀr`` (scaled Cholesky) until a step satisfies
    ``|Δθ_i| <= atol + rtol |θ_i|`` for every ``i`` (that last step is taken) or ``max_steps``
    steps are spent. Returns ``(θ̂, covariance, status, steps)``: the covariance ``(JᵀJ)⁻¹`` is
    evaluated at ``θ̂``; status ``CONVERGED``, ``MAX_ITERATIONS``, ``FAILED`` (non-finite) or
    ``SINGULAR`` (``linalg.is_singular_information`` of ``JᵀJ`` at ``θ̂``); ``steps`` is the number
    of steps taken. Under ``vmap`` the batch iterates until its slowest member stops, and a member
    that has stopped keeps its value (so a trial's result does not depend on its batch).
    """
    weight = jnp.sqrt(2.0 / variance)
    zp = jnp.moveaxis(zi, -1, 0)

    def cond(carry):
        _, done, steps = carry
        return ~done & (steps < max_steps)

    def body(carry):
        theta, _, steps = carry
        gram, gradient = _normal_equations(spectrum, weight, z0, zp, theta)
        chol, d = _scaled_cholesky(gram)
        step = -solve_triangular(chol.T, solve_triangular(chol, gradient / d, lower=True), lower=False) / d
        new = theta + step
        finite = jnp.all(jnp.isfinite(new))
        done = jnp.all(jnp.abs(step) <= atol + rtol * jnp.abs(new)) | ~finite
        return new, done, steps + 1

    theta, done, steps = lax.while_loop(cond, body, (theta0, jnp.asarray(False), jnp.asarray(0, jnp.int32)))
    gram, _ = _normal_equations(spectrum, weight, z0, zp, theta)
    chol, d = _scaled_cholesky(gram)
    chol_inv = solve_triangular(chol, jnp.eye(len(theta), dtype=gram.dtype), lower=True)
    covariance = jnp.sum(chol_inv[:, :, None] * chol_inv[:, None, :], axis=0) / d[:, None] / d[None, :]
    finite = jnp.all(jnp.isfinite(theta))
    status = jnp.where(done, CONVERGED, MAX_ITERATIONS)
    status = jnp.where(
        finite, jnp.where((status == CONVERGED) & is_singular_information(gram), SINGULAR, status), FAILED
    )
    return theta, covariance, status.astype(jnp.int32), steps


def ml_fit(
    spectrum: Spectrum,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " 2"] | None = None,
    weighting: Weighting = "pooled",
    start: Start = "equation_error",
    initial: Float[ArrayLike, " p"] | None = None,
    max_steps: int | Array = 100,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    solver: Solver = "levenberg_marquardt",
) -> Estimate:
    """Maximum-likelihood estimate from a ``Spectrum`` (see ``ml`` for the record version).

    ``initial`` (an explicit start) overrides ``start``. With ``start="equation_error"`` a
    singular equation-error start falls back to the nominal values. Status: ``CONVERGED``,
    ``MAX_ITERATIONS``, ``FAILED`` (non-finite) or ``SINGULAR`` (Fisher information singular at
    the estimate: a parameter is not identifiable from these lines).
    """
    unknowns, unstructured = resolve_unknowns(unknowns)
    if start not in ("equation_error", "nominal"):
        raise ValueError(f"start must be 'equation_error' or 'nominal', got {start!r}.")
    q0 = jnp.asarray(q0, dtype=float)
    variance = line_variance(spectrum, noise_std, weighting)
    residual = output_error_residual(spectrum, nominal, unknowns, variance, q0)
    theta_nominal = parameter_values(nominal, unknowns, q0)
    if initial is not None:
        theta0 = jnp.asarray(initial, dtype=float)
    elif start == "nominal" or not is_affine(unknowns):
        theta0 = theta_nominal
    else:
        ee = equation_error_fit(spectrum, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std, weighting=weighting)
        theta0 = jnp.where(ee.status == CONVERGED, ee.value, theta_nominal)
    if solver == "gauss_newton" and is_affine(unknowns):
        z0, zi = affine_impedance(nominal, unknowns, spectrum.omega, q0)
        theta, cov, status, _ = gauss_newton_affine(
            spectrum, variance, z0, zi, theta0, rtol=rtol, atol=atol, max_steps=max_steps
        )
        return Estimate(theta, cov, status, unknowns)
    theta, status = levenberg_marquardt(residual, theta0, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver)
    cov, singular = gauss_newton_covariance(residual, theta)
    status = jnp.where((status == CONVERGED) & singular, SINGULAR, status).astype(jnp.int32)
    return Estimate(theta, cov, status, unknowns)


@register("ml")
def ml(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " 2"] | None = None,
    method: str = "projection",
    weighting: Weighting = "pooled",
    start: Start = "equation_error",
    max_steps: int | Array = 100,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    solver: Solver = "levenberg_marquardt",
) -> Estimate:
    """Frequency-domain maximum likelihood (weighted output error, Levenberg–Marquardt).

    Args:
        record: measured record (whole periods for ``method="projection"``).
        excitation: the applied ``Multisine``.
        nominal: arm with the known parameters; its values of the unknowns are the start for
            ``start="nominal"`` (and the fallback if equation error is singular).
        unknowns: static; any physical parameters (those the impedance is nonlinear in, such as
            lengths, start from ``nominal``), or an unstructured set from ``UNSTRUCTURED_NAMES``.
        q0: operating point [rad].
        noise_std: per-sample angle noise std [rad] if known; else estimated from the record
            (``weighting``). It sets the weights of the two joints and the covariance scale.
        method: spectrum method, ``"projection"`` or ``"lstsq"``.
        weighting: ``"pooled"`` (per-joint white-noise estimate) or ``"per_line"``.
        start: ``"equation_error"`` (default) or ``"nominal"``.
        max_steps, rtol, atol: Levenberg–Marquardt settings (static).
        solver: ``"levenberg_marquardt"`` (default) or ``"gauss_newton"`` (undamped; in closed
            form, ``gauss_newton_affine``, for unknowns the impedance is affine in: the same
            optimum to the tolerance at a small fraction of the cost per trial under ``vmap``).

    Returns:
        ``Estimate`` with the inverse Gauss–Newton Hessian as covariance. ``jit``-compatible with
        the static arguments fixed, ``vmap``-able over records.
    """
    spectrum = fourier_coefficients(record, excitation, method=method)
    return ml_fit(
        spectrum,
        nominal,
        unknowns=unknowns,
        q0=q0,
        noise_std=noise_std,
        weighting=weighting,
        start=start,
        max_steps=max_steps,
        rtol=rtol,
        atol=atol,
        solver=solver,
    )
