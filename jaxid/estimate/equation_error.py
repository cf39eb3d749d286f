"""Equation-error least squares in the frequency domain: ``Z(ω_k; θ) Q_k = U_k``.

The linearised arm obeys ``Z(jω) Q(ω) = U(ω)`` with ``Z = K0 − ω² D0 + jω Fv`` at every line.
``Z`` is affine in the masses, inertias and friction (lengths fixed) and in the entries of an
unstructured ``D0, K0, Fv``, so stacking the real and imaginary parts of ``Z(ω_k; θ) Q̂_k − Û_k``
over the lines and joints gives an ordinary linear least-squares problem ``A θ ≈ b``: global, no
iteration, no starting point. Its weakness is that the noisy angle phasors ``Q̂`` sit *inside*
the regressor (errors in variables), so at low SNR the estimate is biased (mostly towards smaller
``|Z|``, i.e. attenuated), and its covariance (computed here by the sandwich formula to first
order in the noise) does not show that bias.

It is also the starting point of the maximum-likelihood estimator (``ml.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..excitation.multisine import Multisine
from ..linalg import RCOND, lstsq
from ..measure.spectrum import Spectrum, fourier_coefficients, line_noise_variance
from ..model import LINEAR_PARAMETERS, TwoLinkArm
from ..simulation.linearisation import affine_impedance
from ..simulation.open_loop import Record
from .base import (
    CONVERGED,
    SINGULAR,
    Estimate,
    register,
    resolve_unknowns,
)

__all__ = ["equation_error", "equation_error_fit", "line_variance", "solve_least_squares"]

Weighting = Literal["pooled", "per_line"]

# The one singularity policy (jaxid.linalg).
_RCOND = RCOND


def line_variance(
    spectrum: Spectrum,
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " 2"] | None = None,
    weighting: Weighting = "pooled",
) -> Float[Array, "L 2"]:
    """Variance ``E|Q̂ − Q|²`` [rad²] of each angle phasor, shape ``(L, 2)``.

    ``noise_std`` (per-sample angle noise std [rad], scalar or per joint) wins if given:
    ``4σ²/(N P)`` at every line. Otherwise ``"pooled"`` uses the spectrum's per-sample noise
    estimate (white noise, many degrees of freedom) and ``"per_line"`` the per-line
    period-to-period spread (needs ``P >= 2`` to mean anything; noisy for small ``P``). A floor
    of ``(1e-14 · max|Q|)²`` keeps noise-free data finite.
    """
    if weighting not in ("pooled", "per_line"):
        raise ValueError(f"weighting must be 'pooled' or 'per_line', got {weighting!r}.")
    shape = spectrum.Q.shape
    if noise_std is not None:
        std = jnp.broadcast_to(jnp.asarray(noise_std, dtype=float), (2,))
        v = jnp.broadcast_to(line_noise_variance(std, spectrum.samples_per_period, spectrum.periods), shape)
    elif weighting == "pooled":
        v = jnp.broadcast_to(
            line_noise_variance(spectrum.noise_std, spectrum.samples_per_period, spectrum.periods), shape
        )
    else:
        v = spectrum.noise_variance
    floor = (1e-14 * jnp.max(jnp.abs(spectrum.Q))) ** 2
    return jnp.maximum(v, floor)


def solve_least_squares(a: Float[Array, "n p"], b: Float[Array, " n"], rcond: float = _RCOND):
    """``argmin ||a θ − b||``; ``jaxid.linalg.lstsq`` (kept under this name)."""
    return lstsq(a, b, rcond)


def _check_linear(unknowns: Sequence[str], who: str) -> tuple[tuple[str, ...], bool]:
    unknowns, unstructured = resolve_unknowns(unknowns)
    if not unstructured:
        bad = [u for u in unknowns if u not in LINEAR_PARAMETERS]
        if bad:
            raise ValueError(
                f"{who} needs unknowns the impedance is linear in ({list(LINEAR_PARAMETERS)} or entries of "
                f"D0, K0, Fv); {bad} enter nonlinearly. Use the 'ml' estimator with start='nominal'."
            )
    return unknowns, unstructured


def equation_error_fit(
    spectrum: Spectrum,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " 2"] | None = None,
    weighting: Weighting = "pooled",
) -> Estimate:
    """Equation-error estimate from a ``Spectrum`` (see ``equation_error`` for the record version).

    The covariance is the first-order sandwich ``A⁺ Σ_e A⁺ᵀ`` with ``Σ_e`` the covariance of the
    equation error ``Z(θ̂) (Q̂ − Q)`` implied by the line noise variances (``line_variance``).
    Status ``SINGULAR`` if the stacked regressor is rank-deficient or not finite.
    """
    unknowns, _ = _check_linear(unknowns, "Equation error")
    p = len(unknowns)
    z0, zi = affine_impedance(nominal, unknowns, spectrum.omega, q0)  # Z(θ) = z0 + zi @ θ

    # Rows (Re, Im) × joint per line of Z(θ) Q̂ − U = A θ − b. The 2×2 products are written as
    # broadcast sums (elementwise under vmap, no batched dot of tiny blocks).
    a = jnp.sum(zi * spectrum.Q[:, None, :, None], axis=2)  # (L, 2, p): Z_i Q̂
    b = spectrum.U - jnp.sum(z0 * spectrum.Q[:, None, :], axis=2)  # (L, 2)
    a = jnp.concatenate([jnp.real(a), jnp.imag(a)], axis=1).reshape(-1, p)  # (4L, p)
    b = jnp.concatenate([jnp.real(b), jnp.imag(b)], axis=1).reshape(-1)
    theta, pinv, singular = solve_least_squares(a, b)

    # Sandwich covariance: e_k = Z_k N_k with N_k = sqrt(v_k/2) (α + jβ), α, β ~ N(0, I).
    v = line_variance(spectrum, noise_std, weighting)
    z = z0 + jnp.sum(zi * jnp.where(singular, 0.0, theta), axis=-1)
    zs = z * jnp.sqrt(v / 2)[:, None, :]
    g = jnp.concatenate(
        [jnp.concatenate([jnp.real(zs), -jnp.imag(zs)], axis=2), jnp.concatenate([jnp.imag(zs), jnp.real(zs)], axis=2)],
        axis=1,
    )  # (L, 4, 4): rows (Re e, Im e), columns (α, β)
    m = jnp.sum(pinv.reshape(p, -1, 4)[..., None] * g, axis=2)  # (p, L, 4)
    cov = jnp.sum(m[:, None] * m[None, :], axis=(2, 3))
    status = jnp.where(singular | ~jnp.all(jnp.isfinite(theta)), SINGULAR, CONVERGED).astype(jnp.int32)
    return Estimate(theta, cov, status, unknowns)


@register("equation_error")
def equation_error(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " 2"] | None = None,
    method: str = "projection",
    weighting: Weighting = "pooled",
) -> Estimate:
    """Equation-error least squares on ``Z(ω_k; θ) Q_k = U_k`` over all excited lines and joints.

    Args:
        record: measured record (whole periods for ``method="projection"``).
        excitation: the applied ``Multisine``.
        nominal: arm with the known parameters (its values of the unknowns are not used).
        unknowns: static; a subset of ``("m1", "m2", "J1", "J2", "fv1", "fv2")``, or an
            unstructured set from ``UNSTRUCTURED_NAMES`` (entries of ``D0``, ``K0``, ``Fv``).
        q0: operating point [rad].
        noise_std: per-sample angle noise std [rad] if known (for the covariance only).
        method: spectrum method, ``"projection"`` or ``"lstsq"``.
        weighting: noise variance used for the covariance when ``noise_std`` is not given.

    Returns:
        ``Estimate`` (status ``SINGULAR`` for a rank-deficient regressor). ``jit``-compatible with
        the static arguments fixed, ``vmap``-able over records.
    """
    spectrum = fourier_coefficients(record, excitation, method=method)
    return equation_error_fit(spectrum, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std, weighting=weighting)
