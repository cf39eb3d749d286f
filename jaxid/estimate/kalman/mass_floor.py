"""The EKF's damped θ update on logs (``jaxid.estimate.kalman.logs``, its ``mass_floor``): each update of the
parameters is shortened to the largest of ``_UPDATE_FRACTIONS`` that keeps the model's mass matrix
``D(q, θ) − floor · I`` positive definite at ``MASS_POINTS`` angles of the logs. ``D`` is linear in θ, so it
is a fixed basis (``_mass_basis``) contracted with θ: exact and cheap per step. The same mass matrices at the start
carry a known torque noise to the filter's velocity process noise (``velocity_covariance``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ... import linalg
from ..logs.data import model_torque

__all__ = ["MASS_POINTS", "velocity_covariance"]

#: Fractions of the θ update tried, largest first, by the mass-matrix limit (the last one, 0, is
#: the update of (q, q') alone).
_UPDATE_FRACTIONS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)
#: Angles of the logs (evenly spaced usable samples) at which the limit keeps the mass matrix positive definite.
MASS_POINTS = 32


@functools.partial(jax.jit, static_argnums=(0, 1, 3))
def _mass_basis(regressor, known, qs, p):
    """The model's mass matrix ``D(q, θ) = Σ_j θ_j basis[j] + constant`` at each of the angles ``qs``
    (``(K, n)``): ``basis`` ``(K, p, n, n)``, ``constant`` ``(K, n, n)`` (the known torque's; the torque
    is linear in θ and in q'', so this is exact)."""

    def mass(theta, q):
        zero = jnp.zeros_like(q)
        return jax.jacfwd(lambda qdd: model_torque(regressor, theta, q, zero, qdd, known))(zero)

    def at(q):
        constant = mass(jnp.zeros(p, q.dtype), q)
        basis = jax.vmap(lambda e: mass(e, q) - constant)(jnp.eye(p, dtype=q.dtype))
        return basis, constant

    return jax.vmap(at)(qs)


def _mass_points(regressor, known, theta, logs, p) -> tuple[np.ndarray, np.ndarray, float]:
    """``(basis, constant, smallest eigenvalue at theta)`` of the mass matrix at ``MASS_POINTS`` evenly
    spaced usable filtered angles of the logs (host-side; a non-finite eigenvalue counts as 0)."""
    qs = np.concatenate([np.asarray(d.q)[d.usable] for d in logs])
    pick = np.linspace(0, qs.shape[0] - 1, MASS_POINTS).round().astype(int)
    basis, constant = (np.asarray(x) for x in _mass_basis(regressor, known, jnp.asarray(qs[pick]), p))
    mats = np.einsum("kpij,p->kij", basis, np.asarray(theta)) + constant
    eig = np.linalg.eigvalsh(0.5 * (mats + np.swapaxes(mats, 1, 2))).min()
    return basis, constant, float(np.nan_to_num(eig, nan=0.0))


def _mass_limit(basis, constant, floor, n):
    """``update_limit`` of ``jaxid.estimate.kalman.filters``: the largest of ``_UPDATE_FRACTIONS`` of the θ update
    whose mass matrix ``D − floor · I`` is positive definite (a Cholesky factor exists) at every angle
    of ``basis``/``constant`` (``_mass_basis``); (q, q') updated in full. An update that is refused
    leaves θ where it was, so a start that satisfies the floor keeps it for the whole run.

    The matrices are symmetric: the symmetrised basis is kept as its upper triangle, ``(K, n (n + 1) / 2, p)``,
    and contracted with θ and its update in one product per step (the basis is the step's largest operand:
    ``(32, 69, 7, 7)`` on the Panda, read once instead of twice and at 4/7 of its size)."""
    fractions = jnp.asarray(_UPDATE_FRACTIONS)
    eye = jnp.eye(n, dtype=basis.dtype)
    upper = np.triu_indices(n)
    full = np.zeros((n, n), dtype=int)  # the packed index of entry (i, j) and (j, i)
    full[upper] = full.T[upper] = np.arange(len(upper[0]))
    packed = jnp.moveaxis(0.5 * (basis + jnp.swapaxes(basis, -1, -2))[..., upper[0], upper[1]], 1, 2)
    shift = constant - jnp.where(jnp.isneginf(floor), 0.0, floor) * eye
    shift = 0.5 * (shift + jnp.swapaxes(shift, -1, -2))

    def limit(mean, proposed):
        before, step = mean[2 * n :], proposed[2 * n :] - mean[2 * n :]
        both = packed @ jnp.stack([before, step], axis=1)  # (K, n (n + 1) / 2, 2)
        d0, dd = both[..., 0][..., full] + shift, both[..., 1][..., full]
        mats = d0[None] + fractions[:, None, None, None] * dd[None]  # (fractions, K, n, n)
        chol = jax.vmap(jax.vmap(linalg.cholesky))(mats)
        diag = jnp.diagonal(chol, axis1=-2, axis2=-1)
        ok = jnp.all(jnp.isfinite(diag) & (diag > 0), axis=(1, 2)) | jnp.isneginf(floor)  # -inf: no limit
        alpha = jnp.max(jnp.where(ok, fractions, 0.0))
        return jnp.concatenate([jnp.ones(2 * n, mean.dtype), jnp.full(before.shape[0], alpha, mean.dtype)])

    return limit


def velocity_covariance(masses, h, velocity_process_std, torque_std, kind) -> np.ndarray:
    """The process noise covariance of ``q'`` per sample ``(n, n)``: ``velocity_process_std² I`` (default 0.01 rad/s,
    0 with a ``torque_std``) plus, with a ``torque_std`` (one, or one per joint) [N m], the torque reading's
    noise through the model: ``h² mean_k D_k⁻¹ diag(σ_τ²) D_k⁻ᵀ`` over the start's mass matrices ``masses`` at
    ``MASS_POINTS`` angles of the logs (those where it is positive definite). The low-passed torque's error
    sums over many samples to the raw noise's random walk (a low-pass keeps the noise's density at
    low frequency), whose increment per sample this is."""
    n = masses.shape[-1]
    extra = 0.01 if velocity_process_std is None and torque_std is None else velocity_process_std or 0.0
    out = extra**2 * np.eye(n)
    if torque_std is None:
        return out
    sigma = np.broadcast_to(np.asarray(torque_std, dtype=float), (n,))
    if not np.all(np.isfinite(sigma) & (sigma > 0)):
        raise ValueError(f"{kind}: torque_std must be positive and finite (one, or one per joint), got {torque_std!r}.")
    sym = 0.5 * (masses + np.swapaxes(masses, 1, 2))
    good = [m for m, s in zip(masses, sym, strict=True) if np.all(np.isfinite(s)) and np.linalg.eigvalsh(s).min() > 0]
    if not good:
        raise ValueError(
            f"{kind}: the start's mass matrix is not positive definite at any of the logs' angles, so torque_std "
            "cannot be carried to the velocities; start from a physically consistent estimate or give "
            "velocity_process_std instead."
        )
    inv = np.linalg.inv(np.stack(good))
    return out + h**2 * np.mean(inv @ np.diag(sigma**2) @ np.swapaxes(inv, 1, 2), axis=0)
