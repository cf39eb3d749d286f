"""The time-domain Cramér–Rao bound of an arm's base parameters from torque measurements.

Model: ``τ_k = Y_B(q_k, q'_k, q''_k) θ + e_k`` at ``N`` samples with the **true** states (exact
``q, q', q''``) and white Gaussian torque noise ``e_k ~ N(0, Σ)``, ``Σ = diag(σ_1², …, σ_n²)``. The
Fisher information is ``Σ_k Y_kᵀ Σ⁻¹ Y_k`` and its inverse,

    CRLB(θ) = (W_Bᵀ Σ⁻¹ W_B)⁻¹,

bounds the covariance of any unbiased estimator of ``θ`` from these torques. It is the yardstick of
the benchmark: an estimator that sees the states only through noisy angles (and a filter) cannot
beat it; IDIM-LS on the exact states reaches it (``tests/test_benchmark.py`` checks that against the
spread of IDIM-LS over many noise draws).

The information and its scaled inverse are ``jaxid.excitation.fourier_design``'s kernels
(``regressor_information``, ``inverse_information``: the bound a designed excitation minimises);
this adds the rank test on unit-norm columns and the conventions below.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike, Float

from ..excitation.fourier_design import inverse_information, regressor_information

__all__ = ["base_parameter_crlb"]


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
