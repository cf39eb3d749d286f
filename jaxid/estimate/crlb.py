"""Cramér–Rao bounds for the steady-state experiment, by automatic differentiation.

Measurement model: ``P`` periods of ``N`` samples of the joint angles, ``y_n = q(t_n; θ) + e_n``
with ``e_n`` white Gaussian of std ``σ`` (per joint if a pair is given), torques known. In steady
state the response repeats every period, so the Fisher information is

    F = P · Σ_{n=0}^{N−1} Σ_j (∂q_j(t_n)/∂θ)ᵀ (∂q_j(t_n)/∂θ) / σ_j²

and the bound on any unbiased estimator's covariance is ``F⁻¹``. Three entry points:

- ``fisher_information(response, θ, …)``: the general form, for *any* differentiable
  ``response: θ ↦ (N, 2)`` sampled steady state over one period — the linear model
  (``linear_response``) or, e.g., a periodic shooting solve of the nonlinear arm;
- ``spectral_fisher_information(phasors, θ, …)``: the same for a response given by its phasors
  ``θ ↦ Q (L, 2)`` (by Parseval, ``Σ_n |Re Σ_k X_k e^{jω_k t_n}|² = (N/2) Σ_k |X_k|²`` for lines
  strictly between DC and Nyquist), much cheaper: ``F = (NP/2) Σ_k Re(∂Q_kᴴ W ∂Q_k)``;
- ``linear_crlb(arm, excitation, unknowns, …)``: the bound for the linearised arm, the yardstick
  of the frequency-domain estimators;
- ``base_parameter_crlb(regressor, torque_std)``: the time-domain bound of an arm's base parameters
  from torque measurements at the true states, ``(W_Bᵀ Σ⁻¹ W_B)⁻¹``, the N-joint benchmark's yardstick
  (IDIM-LS on the exact states reaches it: ``tests/test_benchmark.py``); its kernels
  ``regressor_information`` (``Σ_k W_kᵀ Σ⁻¹ W_k``) and ``inverse_information`` are also the bound a
  designed Fourier trajectory minimises (``jaxid.excitation.fourier_design``).

Uniform noise of the same variance (the paper's) has the same bound for the *frequency-domain*
estimators to first order, because the Fourier lines are sums of many samples (near Gaussian).
All functions are pure and ``jit``/``vmap``-compatible in ``θ`` and the noise level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .. import linalg
from ..excitation.multisine import Multisine
from ..excitation.phasors import respond, synthesise
from ..model import AbstractArm
from ..simulation.linearisation import linear_system, parameter_values, resolve_unknowns
from ..types import compiled_when_concrete, require_float64, steps_per_period

__all__ = [
    "fisher_information",
    "spectral_fisher_information",
    "cramer_rao_bound",
    "linear_response",
    "linear_phasors",
    "linear_fisher_information",
    "linear_crlb",
    "regressor_information",
    "inverse_information",
    "unit_diagonal_inverse",
    "base_parameter_crlb",
]


def _noise(noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " c"], channels: int) -> Array:
    std = jnp.asarray(noise_std, dtype=float)
    return jnp.broadcast_to(std, (channels,))


def fisher_information(
    response: Callable[[Array], Float[Array, "N c"]],
    theta: Float[ArrayLike, " p"],
    *,
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " c"],
    periods: int = 1,
) -> Float[Array, "p p"]:
    """Fisher information ``(P/σ²) JᵀJ`` of ``P`` periods of the sampled response.

    Args:
        response: ``θ ↦ (N, c)`` one period of the noise-free steady-state samples (``c``
            measured channels, e.g. the two joint angles) [rad]. Differentiated by ``jax.jacfwd``.
        theta: ``(p,)`` the parameter values the bound is evaluated at.
        noise_std: per-sample noise std [rad], scalar or per channel ``(c,)``.
        periods: number of measured periods ``P`` (each sees the same response).

    Returns:
        ``(p, p)`` Fisher information matrix.
    """
    theta = jnp.asarray(theta, dtype=float)
    jac = jax.jacfwd(response)(theta)  # (N, c, p)
    std = _noise(noise_std, jac.shape[1])
    jw = jac / std[None, :, None]
    return periods * jnp.einsum("ncp,ncq->pq", jw, jw)


def spectral_fisher_information(
    phasors: Callable[[Array], Complex[Array, "L c"]],
    theta: Float[ArrayLike, " p"],
    *,
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " c"],
    samples_per_period: int,
    periods: int = 1,
) -> Float[Array, "p p"]:
    """Fisher information of a steady state given by its line phasors (Parseval form).

    ``F = (N P / 2) Σ_k Σ_j Re(conj(∂Q_kj) ∂Q_kjᵀ) / σ_j²``, equal to ``fisher_information`` of
    ``q(t) = Re Σ_k Q_k e^{jω_k t}`` when every line lies strictly between DC and ``N/2``.
    """
    theta = jnp.asarray(theta, dtype=float)

    def split(th):
        q = phasors(th)
        return jnp.stack([jnp.real(q), jnp.imag(q)])  # (2, L, c)

    jac = jax.jacfwd(split)(theta)  # (2, L, c, p)
    std = _noise(noise_std, jac.shape[2])
    jw = jac / std[None, None, :, None]
    return 0.5 * samples_per_period * periods * jnp.einsum("rlcp,rlcq->pq", jw, jw)


def cramer_rao_bound(fisher: Float[Array, "p p"]) -> Float[Array, "p p"]:
    """``F⁻¹``: the lower bound on the covariance of unbiased estimators (``inf``-free only if
    ``F`` is non-singular; ``jaxid.linalg.is_singular_information(F)`` checks identifiability).
    The scaled inverse (``unit_diagonal_inverse``) by ``jaxid.linalg.inverse`` (unrolled, no LAPACK
    call: ``vmap``-able on any device; the paper's few parameters)."""
    return unit_diagonal_inverse(fisher, linalg.inverse)


def unit_diagonal_inverse(information: Float[ArrayLike, "r r"], invert=jnp.linalg.inv) -> Float[Array, "r r"]:
    """``F⁻¹``, inverted after scaling ``F`` to unit diagonal (columns of very different magnitudes, a
    friction beside a wrist inertia, keep their digits; a zero diagonal entry is left unscaled): the one
    scaled-inverse kernel of the bounds. ``invert``: ``jnp.linalg.inv`` (default, any size) or
    ``jaxid.linalg.inverse`` (small, unrolled). Pure."""
    f = jnp.asarray(information, dtype=float)
    d = jnp.sqrt(jnp.diag(f))
    scale = jnp.outer(jnp.where(d > 0, d, 1.0), jnp.where(d > 0, d, 1.0))
    return invert(f / scale) / scale


def linear_phasors(
    nominal: AbstractArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    q0: Float[ArrayLike, " n"] | None = None,
) -> Callable[[Array], Complex[Array, "L n"]]:
    """``θ ↦ Q(θ) = H(ω_k; θ) U_k`` on the excitation's lines, shape ``(L, n)`` [rad].

    Any ``AbstractArm`` (``n = nominal.dof``; the multisine must drive ``n`` joints)."""
    unknowns, _ = resolve_unknowns(unknowns, nominal)
    if excitation.joints != nominal.dof:
        raise ValueError(
            f"The multisine drives {excitation.joints} joints but the arm has {nominal.dof}; give one row of "
            "harmonics per joint."
        )
    omega = jnp.asarray(excitation.line_frequencies)
    u = excitation.phasors()
    q0 = jnp.zeros(nominal.dof) if q0 is None else jnp.asarray(q0, dtype=float)

    def phasors(theta):
        return respond(linear_system(nominal, unknowns, theta, q0).frequency_response(omega), u)

    return phasors


def linear_response(
    nominal: AbstractArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    *,
    sample_step: float = 0.01,
    q0: Float[ArrayLike, " n"] | None = None,
) -> Callable[[Array], Float[Array, "N n"]]:
    """``θ ↦`` one period (``N = T/Δ`` samples from ``t = 0``) of the linear steady state [rad]."""
    n = steps_per_period(excitation.period, sample_step)
    phasors = linear_phasors(nominal, excitation, unknowns, q0)
    omega = jnp.asarray(excitation.line_frequencies)
    t = jnp.arange(n) * sample_step
    q0 = jnp.zeros(nominal.dof) if q0 is None else jnp.asarray(q0, dtype=float)
    return lambda theta: q0 + synthesise(phasors(theta), omega, t)


def linear_fisher_information(
    arm: AbstractArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    *,
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " n"],
    sample_step: float = 0.01,
    periods: int = 1,
    q0: Float[ArrayLike, " n"] | None = None,
) -> Float[Array, "p p"]:
    """Fisher information of the linearised ``arm`` for ``unknowns`` at their true values."""
    n = steps_per_period(excitation.period, sample_step)
    if 2 * excitation.max_harmonic >= n:
        raise ValueError(f"Harmonic {excitation.max_harmonic} is at or above Nyquist for N = {n}; sample faster.")
    theta = parameter_values(arm, unknowns, q0)
    return spectral_fisher_information(
        linear_phasors(arm, excitation, unknowns, q0),
        theta,
        noise_std=noise_std,
        samples_per_period=n,
        periods=periods,
    )


@compiled_when_concrete  # one program on concrete inputs (first call 7.7 → 1.1 s: scripts/bench_eager.py)
def linear_crlb(
    arm: AbstractArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    *,
    noise_std: Float[ArrayLike, ""] | Float[ArrayLike, " n"],
    sample_step: float = 0.01,
    periods: int = 1,
    q0: Float[ArrayLike, " n"] | None = None,
) -> Float[Array, "p p"]:
    """Cramér–Rao bound ``(p, p)`` for ``unknowns`` of the linearised ``arm`` at its true values.

    Args:
        arm: the true arm (also supplies the known parameters).
        excitation: the applied multisine.
        unknowns: static names (physical, or unstructured ``UNSTRUCTURED_NAMES``).
        noise_std: per-sample Gaussian angle noise std [rad] (scalar or per joint).
        sample_step: sampling step ``Δ`` [s] (``N = T/Δ``).
        periods: measured periods ``P``.
        q0: operating point [rad].

    ``sqrt(diag)`` is the smallest standard deviation an unbiased estimator can reach. Raises
    ``ValueError`` unless JAX runs in float64.
    """
    require_float64("linear_crlb")
    return cramer_rao_bound(
        linear_fisher_information(
            arm, excitation, unknowns, noise_std=noise_std, sample_step=sample_step, periods=periods, q0=q0
        )
    )


# -- The time-domain bound of base parameters from torques (the N-joint benchmark's yardstick) --


def regressor_information(
    regressor: Float[ArrayLike, "N n r"], noise_std: Float[ArrayLike, "*#n"]
) -> Float[Array, "r r"]:
    """``Σ_k W_kᵀ Σ⁻¹ W_k`` from regressor rows ``(N, n, r)`` and the torque noise std per joint: the
    one Fisher-information kernel (a designed trajectory's rows here, a simulated run's in the
    benchmark). Pure."""
    w = jnp.asarray(regressor, dtype=float) / jnp.asarray(noise_std, dtype=float)[..., None]
    return jnp.einsum("knp,knq->pq", w, w)


def inverse_information(information: Float[ArrayLike, "r r"]) -> Float[Array, "r r"]:
    """``F⁻¹`` of a base-parameter information matrix (any size): ``unit_diagonal_inverse`` by
    ``jnp.linalg.inv``. Pure."""
    return unit_diagonal_inverse(information)


def base_parameter_crlb(
    regressor: Float[ArrayLike, "N n p"], torque_std: float | Float[ArrayLike, " n"]
) -> Float[np.ndarray, "p p"]:
    """``(W_Bᵀ Σ⁻¹ W_B)⁻¹`` ``(p, p)`` from the base regressor rows ``(N, n, p)`` at the true states and
    the torque noise std ``σ`` [N m] (scalar or one per joint).

    Returns ``nan`` everywhere when some ``σ_j`` is 0 (the bound is then 0 in the directions that
    joint sees: not a yardstick) and ``inf`` on the diagonal of a rank-deficient problem. Raises
    ``ValueError`` for a regressor that is not ``(N, n, p)``.
    """
    w = np.asarray(regressor, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"regressor must have shape (N, n, p), got {w.shape}.")
    p = w.shape[-1]
    sigma = np.broadcast_to(np.asarray(torque_std, dtype=float), (w.shape[1],))
    if np.any(sigma <= 0):
        return np.full((p, p), np.nan)
    a = (w / sigma[None, :, None]).reshape(-1, p)
    a = a / np.where(np.linalg.norm(a, axis=0) > 0, np.linalg.norm(a, axis=0), 1.0)
    s = np.linalg.svd(a, compute_uv=False)  # the rank test, on unit-norm columns
    if s[-1] <= a.shape[0] * np.finfo(float).eps * s[0]:
        out = np.full((p, p), np.nan)
        out[np.diag_indices(p)] = np.inf
        return out
    return np.asarray(inverse_information(regressor_information(w, sigma)))
