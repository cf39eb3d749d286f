"""The starting values of the nonlinear output-error fit (``jaxid.estimate.nonlinear``).

Unless ``initial`` is given, ``_start_candidates`` lists the starts: the estimate of the estimator
named ``initial_estimator`` (default the frequency-domain ML estimate ``"ml"``, falling back to
``"equation_error"``) when it is registered (``nominal``'s values where it does not converge or is
not positive); then (route ``"shooting"``; route ``"coarse"`` only when no estimator gave a start)
the least-squares fit of the **nonlinear** inverse dynamics (``inverse_dynamics_start``, when every
unknown enters the dynamics linearly) on ``q, q', q''`` formed from one averaged period by
``filtered_derivatives`` (its significant Fourier lines, zero-phase); ``nominal``'s values when there
is no other. Route ``"coarse"`` starts from the first, ``"shooting"`` from the one whose relaxed orbit
fits the data best. Pure and ``jit``-compatible.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..linalg import lstsq
from ..measure.derivatives import DETECTION_THRESHOLD, periodic_derivatives
from ..model import LINEAR_PARAMETERS, TwoLinkArm, regressor
from .base import CONVERGED, ESTIMATORS

__all__ = ["filtered_derivatives", "inverse_dynamics_start"]


def filtered_derivatives(
    data: Float[Array, "N 2"], period: float, cutoff: int, threshold: float = DETECTION_THRESHOLD
) -> tuple[Float[Array, "N 2"], Float[Array, "N 2"], Float[Array, "N 2"]]:
    """Zero-mean ``q, q', q''`` of one period of angles from its significant Fourier lines.

    ``jaxid.measure.derivatives.periodic_derivatives`` with ``keep="detected"``: the harmonics
    ``1 ≤ k ≤ cutoff`` whose power exceeds ``threshold`` times the noise floor in either joint
    (the one detection policy); the mean (DC) is removed. Zero-phase and exact for a noise-free
    periodic signal inside the band.
    """
    n = data.shape[0]
    q, qd, qdd = periodic_derivatives(data, period / n, period, keep="detected", cutoff=cutoff, threshold=threshold)
    return q - jnp.mean(q, axis=0), qd, qdd


def inverse_dynamics_start(
    data: Float[Array, "N 2"],
    torque: Float[Array, "N 2"],
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    period: float,
    cutoff: int,
    threshold: float = DETECTION_THRESHOLD,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
) -> Float[Array, " p"]:
    """Least-squares fit of the **nonlinear** inverse dynamics ``tau = Y(q, q', q'') θ + tau_known``.

    ``data`` and ``torque`` are one (averaged) period of angles [rad] and torques [N m];
    ``q − q0, q', q''`` come from ``filtered_derivatives``. The DC equations are dropped: an
    unknown angle offset (a sensor bias, the mean of the paper's ``0.1*rand()``) shifts the mean
    gravity torque, to first order a constant. No linearisation bias, but errors in variables at
    low SNR: used only as a starting point. ``unknowns`` must be parameters the dynamics are
    linear in (``m1, m2, J1, J2, fv1, fv2``).
    """
    q, qd, qdd = filtered_derivatives(data, period, cutoff, threshold)
    y, tau_known = regressor(nominal, jnp.asarray(q0, dtype=float) + q, qd, qdd, unknowns)
    y = y - jnp.mean(y, axis=0)
    b = torque - tau_known
    b = b - jnp.mean(b, axis=0)
    return lstsq(y.reshape(-1, y.shape[-1]), b.reshape(-1))[0]


def _start_candidates(
    record, excitation, nominal, unknowns, q0, noise_std, data, torque_mean, initial_estimator, cutoff, first_only=False
):
    fallback = nominal.parameter_vector(unknowns)
    candidates = []
    names = [initial_estimator] if initial_estimator else []
    if initial_estimator == "ml":
        names.append("equation_error")
    for name in names:
        if name in ESTIMATORS:
            est = ESTIMATORS[name](record, excitation, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std)
            ok = (est.status == CONVERGED) & jnp.all(jnp.isfinite(est.value)) & jnp.all(est.value > 0)
            candidates.append(jnp.where(ok, est.value, fallback))
            break
    if candidates and first_only:
        return candidates
    if all(u in LINEAR_PARAMETERS for u in unknowns):
        theta = inverse_dynamics_start(data, torque_mean, nominal, unknowns, excitation.period, cutoff, q0=q0)
        ok = jnp.all(jnp.isfinite(theta)) & jnp.all(theta > 0)
        candidates.append(jnp.where(ok, theta, fallback))
    if not candidates:
        candidates.append(fallback)
    return candidates
