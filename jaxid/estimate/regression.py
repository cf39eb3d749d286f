"""The inverse-dynamics regression shared by ``rls``, ``idim_ls`` and ``idim_iv``.

All three solve the same regression, one equation per joint and sample,

    tau_n − tau_known(q_n, q'_n, q''_n) = Y(q_n, q'_n, q''_n) θ + e_n,

with ``Y`` and ``tau_known`` from ``jaxid.model.regressor`` (exact for the parameters the
dynamics are linear in: masses, inertias, friction) and ``q, q', q''`` from the noisy angles by
the periodic zero-phase filter of ``jaxid.measure.derivatives`` (the filter uses the whole record, so the
"recursive" estimator is recursive in the regression, not causal in the data, as in offline IDIM
practice). The filter is stated by the options ``derivative`` (default ``"fourier"``:
differentiation in the frequency domain over the whole periods), ``keep`` (default
``"detected"``: DC, the excited lines, and every other harmonic up to ``cutoff`` whose power is
more than ``threshold = 10`` times the noise floor), ``cutoff`` (default ``4 ×`` the highest
excited harmonic, at most ``N/4``; ``2 ×`` for ``"band"`` and ``"butterworth"``) and ``order``
(Butterworth). ``"detected"`` was the best of the variants measured (docs/estimators.md): keeping a
whole band puts high-frequency noise into ``q''``, and the noisy regressor biases the estimate
towards zero (errors in variables).

Weighting (``weighting``): ``"none"`` — ordinary least squares; ``"joint"`` (default) — each
joint's equations are weighted by ``1/σ_j²``, the residual variance of a preliminary ordinary
least-squares fit (two-stage; the two joints' equation errors differ by an order of magnitude,
so this is the stronger estimator).

Noise mean: the regression uses the angles themselves (gravity), so a noise mean (the paper's
uniform noise has mean 0.05 rad) biases it. ``measurement_offset`` [rad] is subtracted from the
angles before filtering; the estimator cannot know it, so the caller passes it if known (the
study passes ``noise_mean``). ``noise_std`` is not used by ``rls``/``idim_ls`` (the equation
errors are estimated from the residuals).

This module holds the regression data (``regression_data``), the weighted batch least squares
and residual-variance helpers, the status rule and ``history_indices``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .. import linalg
from ..excitation.multisine import Multisine
from ..measure.derivatives import default_cutoff, periodic_derivatives
from ..model import LINEAR_PARAMETERS, TwoLinkArm, regressor, validate_unknowns
from ..simulation.open_loop import Record
from .base import CONVERGED, FAILED, SINGULAR

__all__ = ["regression_data", "history_indices"]


def history_indices(n_samples: int, points: int) -> np.ndarray:
    """Sample indices at which ``Estimate.history`` is recorded (ends of equal chunks; the last
    one is the final sample). ``record.t[history_indices(M, n)]`` gives the times."""
    points = max(1, min(int(points), n_samples))
    return (np.arange(1, points + 1) * n_samples) // points - 1


def _default_cutoff(excitation: Multisine, cutoff: int | None, keep: str, sample_step: float) -> int:
    if cutoff is not None:
        return int(cutoff)
    return default_cutoff(excitation.max_harmonic, round(excitation.period / sample_step), keep)


def regression_data(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str],
    measurement_offset: ArrayLike = 0.0,
    derivative: str = "fourier",
    keep: str = "detected",
    cutoff: int | None = None,
    order: int = 4,
    threshold: float = 10.0,
) -> tuple[Float[Array, "M 2 p"], Float[Array, "M 2"]]:
    """The regression ``z_n = Y_n θ + e_n`` of the record: ``(Y, z)`` with ``z = tau − tau_known``.

    ``q, q', q''`` are the filtered angles and their derivatives (``jaxid.measure.derivatives``) after
    subtracting ``measurement_offset``. Static: ``unknowns`` and the filter options.
    """
    unknowns = validate_unknowns(unknowns, LINEAR_PARAMETERS)
    q = record.q - jnp.asarray(measurement_offset, dtype=record.q.dtype)
    q_f, qd, qdd = periodic_derivatives(
        q,
        record.sample_step,
        record.period,
        method=derivative,
        keep=keep,
        cutoff=_default_cutoff(excitation, cutoff, keep if derivative == "fourier" else "band", record.sample_step),
        lines=excitation.lines,
        order=order,
        threshold=threshold,
    )
    y, tau_known = regressor(nominal, q_f, qd, qdd, unknowns)
    return y, record.tau - tau_known


# -- batch least squares and the shared checks ----------------------------------------------


def _weighted_ls(y, z, weights):
    p = y.shape[-1]
    sw = jnp.sqrt(weights)
    a = (sw[None, :, None] * y).reshape(-1, p)
    b = (sw[None, :] * z).reshape(-1)
    theta = linalg.lstsq(a, b)[0]
    return theta, a


def _residual_variances(y, z, theta):
    n, _, p = y.shape
    r = z - y @ theta
    return jnp.sum(r**2, axis=0) / (n - p / 2)


def _joint_weights(y, z, weighting):
    if weighting == "none":
        return jnp.ones(y.shape[-2], y.dtype)
    theta0, _ = _weighted_ls(y, z, jnp.ones(y.shape[-2], y.dtype))
    return 1.0 / _residual_variances(y, z, theta0)


def _check_weighting(weighting):
    if weighting not in ("none", "joint"):
        raise ValueError(f"weighting must be 'none' or 'joint' (per-joint residual variances), got {weighting!r}.")


def _status(value, covariance, information):
    finite = jnp.all(jnp.isfinite(value)) & jnp.all(jnp.isfinite(covariance))
    singular = linalg.is_singular_information(information)
    return jnp.where(~finite, FAILED, jnp.where(singular, SINGULAR, CONVERGED)).astype(jnp.int32)
