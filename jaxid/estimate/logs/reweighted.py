"""Estimators on IDIM-LS's weighted rows: recursive least squares and physically consistent least squares.

Both take the rows of an IDIM-LS estimate (``start``: its decimation, parallel filtering and
per-joint weights ``1/σ_j``) and solve another problem on them: ``idim_rls`` the recursion of
``jaxid.estimate.kalman.filters.recursive_least_squares`` in time order, ``idim_ls_consistent`` the least squares
over physically consistent standard parameters of ``jaxid.estimate.consistency`` (``consistent_estimate``
returns its standard-parameter estimate, the start of consistent output error).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...types import Status
from ..consistency import consistent_least_squares
from ..kalman.filters import recursive_least_squares
from .data import FilteredLog, Known, Regressor
from .idim import (
    Identification,
    _rank_condition,
    _row_bucket,
    _stack,
    correlation_lags,
    default_decimation,
    regression_rows,
)
from .ls_kernel import checked_lags, ls_covariance

__all__ = ["idim_rls", "idim_ls_consistent", "consistent_estimate", "consistent_start"]

_compiled_rls = jax.jit(recursive_least_squares)


def _weighted_rows(logs: Sequence[FilteredLog], regressor: Regressor, start: Identification, decimate, known):
    """IDIM-LS's rows (same decimation, parallel filtering) divided by its per-joint residual std."""
    if decimate is None:
        decimate = default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
    w, y = _stack(logs, regressor, regression_rows(logs, decimate), known=known)
    sigma = np.maximum(np.asarray(start.residual_std), 1e-12)
    return w / sigma[None, :, None], y / sigma, sigma


def idim_rls(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification,
    forgetting: float = 1.0,
    initial_covariance: float = 1e8,
    decimate: int | None = None,
    known: Known | None = None,
    lags: int | None = None,
) -> Identification:
    """Recursive least squares over IDIM-LS's weighted rows, in time order (``jaxid.estimate.kalman.filters``).

    The rows are ``start``'s (IDIM-LS): same decimation, parallel filtering and per-joint weights
    ``1/σ_j``; the columns are scaled to unit norm and the recursion starts at 0 with
    ``P₀ = initial_covariance · 𝟙`` in those units. With ``forgetting = 1`` and a large ``P₀`` it
    ends at IDIM-LS's weighted solution. Covariance: IDIM-LS's formula (``ls_covariance``) with the recursion's
    ``P_N`` for ``(AᵀA)⁻¹``: the Newey-West sandwich over ``lags`` (default ``correlation_lags``: the low-passed,
    decimated rows' residuals correlate), or ``σ̂² P_N`` with ``lags = 0``.
    """
    names = tuple(names)
    if decimate is None:
        decimate = default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
    lags = checked_lags(lags, correlation_lags(logs[0].sample_step, logs[0].cutoff_hz, decimate))
    w, y, sigma = _weighted_rows(logs, regressor, start, decimate, known)
    p = w.shape[-1]
    scale = np.linalg.norm(w.reshape(-1, p), axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    theta, cov, _, _ = _compiled_rls(
        jnp.asarray(w / scale), jnp.asarray(y), jnp.zeros(p), initial_covariance * jnp.eye(p), forgetting=forgetting
    )
    theta = np.asarray(theta)
    resid = y - np.einsum("njp,p->nj", w / scale, theta)
    a = (w / scale).reshape(-1, p)
    covariance = ls_covariance(np.asarray(cov), a, resid.reshape(-1), w.shape[1], lags) / np.outer(scale, scale)
    rank, cond = _rank_condition(a)
    return Identification(
        "rls", names, theta / scale, covariance, rank, cond, np.sqrt(np.mean((resid * sigma) ** 2, axis=0)), len(y)
    )


def consistent_estimate(
    logs: Sequence[FilteredLog],
    consistent,
    *,
    start: Identification,
    decimate: int | None = None,
    known: Known | None = None,
    **options,
):
    """``consistent_least_squares`` on IDIM-LS's weighted rows of the standard regressor of
    ``consistent`` (a ``ConsistentMap``): the ``ConsistentEstimate`` of the standard parameters."""
    w, y, _ = _weighted_rows(logs, consistent.regressor, start, decimate, known)
    prior = None if consistent.prior is None else jnp.asarray(consistent.prior)
    if "correlation_lags" not in options:  # one cut-off period of the decimated rows (their residuals correlate)
        stride = decimate or default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
        options["correlation_lags"] = correlation_lags(logs[0].sample_step, logs[0].cutoff_hz, stride)
    # Rows zero-padded to a few sizes per octave (``_row_bucket``): fits on different numbers of rows (folds,
    # runs of any length) share one compiled program.
    size = _row_bucket(w.shape[0])
    pad = ((0, size - w.shape[0]),) + ((0, 0),) * (w.ndim - 1)
    return consistent_least_squares(
        np.pad(w, pad), np.pad(y, pad[: y.ndim]), consistent.arm, prior=prior, samples=w.shape[0], **options
    )


def idim_ls_consistent(
    logs: Sequence[FilteredLog],
    consistent,
    names: Sequence[str],
    *,
    start: Identification,
    decimate: int | None = None,
    known: Known | None = None,
    **options,
) -> Identification:
    """IDIM-LS's weighted rows fitted over physically consistent standard parameters (``jaxid.estimate.consistency``).

    ``consistent`` is the model's ``ConsistentMap`` (standard regressor, arm, prior, ``φ → θ``); the
    rows and weights are ``start``'s (IDIM-LS). ``consistent_least_squares`` (log-Cholesky
    coordinates, no SDP solver; ``options`` go to it) returns ``φ̂``, mapped to ``θ``. The covariance
    is its own: the constrained problem's (``ConsistentEstimate.covariance``: least squares on the
    tangent space of the active face, residual variance of the weighted rows), mapped to ``θ`` by
    the Jacobian of ``to_model``, with a Newey–West sandwich over one cut-off period of rows (the
    filtered, decimated rows' residuals are correlated: lag-1 autocorrelation 0.6 on the UR5 and Panda
    benchmarks); the status says whether the certified duality gap met its tolerance.
    """
    names = tuple(names)
    est = consistent_estimate(logs, consistent, start=start, decimate=decimate, known=known, **options)
    theta = np.asarray(consistent.to_model(est.standard), dtype=float)
    jacobian = np.asarray(jax.jacfwd(consistent.to_model)(est.standard), dtype=float)
    covariance = jacobian @ np.asarray(est.covariance, dtype=float) @ jacobian.T
    status = {int(Status.SUCCESS): "ok", int(Status.MAX_ITERATIONS): "max_iterations"}.get(int(est.status), "failed")
    return Identification(
        "idim_ls_consistent",
        names,
        theta,
        covariance,
        start.rank,
        start.condition,
        np.asarray(start.residual_std),
        start.samples,
        int(est.iterations),
        f"duality gap {float(est.duality_gap):.3g} of cost {float(est.cost):.3g}, {int(est.active)} active constraints",
        status,
        np.asarray(est.standard, dtype=float),
    )


def consistent_start(start: Identification, consistent: np.ndarray | None) -> Identification:
    """Where an estimator that simulates its model (``AbstractEstimator.simulates``: IDIM-IV, the Kalman filters,
    output error) starts: IDIM-LS's ``start`` with its value replaced by the physically consistent estimate
    ``consistent`` (``(p,)`` on ``start.names``) when that fit ran and converged, else ``start`` itself. A
    consistent model can be simulated (every link's mass matrix positive definite), where IDIM-LS's need not be.
    One rule for ``jaxid fit`` and the benchmark; the rest of ``start`` (weights, covariance) is kept."""
    if consistent is None:
        return start
    return eqx.tree_at(lambda s: s.value, start, np.asarray(consistent, dtype=float))
