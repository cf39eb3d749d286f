"""Inverse-dynamics identification on filtered logs: IDIM-LS (weighted, optionally bounded); IDIM-IV (below)
is in ``jaxid.estimate.logs.iv``, which shares these rows, weights and the result type.

The model is linear in its (base) parameters, ``τ = Y(q, q', q'') θ``, with ``q, q', q''`` from the
zero-phase filter (``filter_log``) and ``τ`` the same-band low-passed torque. Both sides
then go through the low-pass once more (parallel filtering, ``FilteredLog.band``): the regressor
is built from angles filtered once, so the torque, filtered once by ``filter_log``, is filtered a
second time to sit in the same band.
Rows are taken every ``decimate`` samples of the usable part of each log (default ``⌊f_s / (4 f_c)⌋``: the filtered
signals carry no information above the cut-off, so closer rows only correlate the residuals).

- **IDIM-LS**: ordinary least squares, then each joint's rows are divided by that joint's residual
  standard deviation and the problem solved again (weighted LS, Gautier's rule).
  ``bounds`` switches to a bounded least squares (``scipy.optimize.lsq_linear``'s ``bvls``) for the
  physically sign-constrained parameters, with IDIM-LS's covariance formula at its solution.
- **IDIM-IV**: instruments ``Z = Y(q_s, q_s', q_s'')`` from a simulation of the current estimate
  under the measured (low-passed) torque. The arm is lightly damped and chaotic, so one 10-s
  simulation would leave the measured trajectory; the simulation restarts every ``segment_s``
  seconds from the filtered measured state (the instruments then stay correlated with the
  regressor, and their noise is that of the simulation, not of the measurement).
  ``θ = (Zᵀ W)⁻¹ Zᵀ τ``, iterated ``iterations`` times from the IDIM-LS estimate.

**Standard deviations**: the residuals of low-passed rows decimated at about 4 rows per cut-off
period stay correlated over one cut-off period (``correlation_lags``), so the covariance is the
Newey-West sandwich ``(WᵀW)⁻¹ M (WᵀW)⁻¹`` (IV: ``(ZᵀW)⁻¹ M (WᵀZ)⁻¹``), ``M`` the Bartlett estimate of
the scores' covariance (``jaxid.estimate.logs.ls_kernel``); ``lags = 0`` gives the white-residual
``σ̂² (WᵀW)⁻¹``. They treat the regressor as exact: they ignore the noise and filter bias in ``Y``
(errors in variables) and the model error, so they are lower bounds on the real uncertainty. Rank and condition number
are those of the weighted regressor with unit-norm columns (the scale-free condition number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .data import FilteredLog, Known, Regressor, rowwise
from .ls_kernel import CHOLQR_CONDITION, _ls_kernel_jit, checked_lags, ls_covariance

__all__ = [
    "Identification",
    "idim_ls",
    "idim_ls_left_out",
    "default_decimation",
    "segment_starts",
    "regression_rows",
    "correlation_lags",
]


class Identification(eqx.Module):
    """An estimate of the (base) parameters from logs, with what is needed to judge it.

    Attributes:
        method: estimator name (``idim_ls``, ``idim_iv``, ``output_error``, ``ekf``, ``ukf``, ``reference``).
        names: parameter names, the order of ``value``.
        value: ``(p,)`` estimate. covariance: ``(p, p)`` (see the module docstring for what it ignores).
        rank, condition: numerical rank and scale-free condition number of the problem's Jacobian
            (regressor for IDIM, the output-error Jacobian for OE).
        residual_std: ``(n,)`` per-joint residual standard deviation (torque [N m] for IDIM,
            angle [rad] for output error and the filters).
        samples: number of rows (per joint) used. iterations: solver iterations (0 if direct).
        notes: free text (e.g. the largest continuity gap of multiple shooting).
        status: ``"ok"``, or why the estimate is not to be trusted (``"max_iterations"``: an
            iterative fit stopped at its limit; ``"failed"``).
        standard: ``(14 n,)`` the physically consistent standard parameters behind ``value`` when the
            estimator fitted them (``idim_ls_consistent``), else ``None``.
    """

    method: str = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    value: np.ndarray
    covariance: np.ndarray
    rank: int = eqx.field(static=True)
    condition: float = eqx.field(static=True)
    residual_std: np.ndarray
    samples: int = eqx.field(static=True)
    iterations: int = eqx.field(static=True, default=0)
    notes: str = eqx.field(static=True, default="")
    status: str = eqx.field(static=True, default="ok")
    standard: np.ndarray | None = None

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    @property
    def label(self) -> str:
        """The status as result tables write it (``jaxid.types.ParameterEstimate``)."""
        return self.status

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, np.asarray(self.value).tolist(), strict=True))


def default_decimation(sample_step: float, cutoff_hz: float) -> int:
    """``max(1, ⌊f_s / (4 f_c)⌋)``: rows about twice the Nyquist rate of the filtered band."""
    return max(1, int(np.floor(1.0 / (sample_step * 4 * cutoff_hz))))


def correlation_lags(sample_step: float, cutoff_hz: float, decimate: int) -> int:
    """``⌈1 / (f_c · decimate · Δ)⌉``: the rows in one cut-off period, over which the residuals of
    low-passed, decimated rows stay correlated (about 4 at ``default_decimation``); the ``L`` of the
    Newey-West covariance of IDIM-LS and of the consistent LS."""
    return int(np.ceil(1.0 / (cutoff_hz * decimate * sample_step) - 1e-9))


def segment_starts(log: FilteredLog, length: int) -> np.ndarray:
    """Start indices of consecutive segments of ``length`` steps covering the usable part."""
    sl = log.usable
    count = (sl.stop - 1 - sl.start) // length
    if count < 1:
        raise ValueError(f"{log.name}: usable part shorter than one segment of {length} steps; shorten segment_s.")
    return sl.start + length * np.arange(count)


def regression_rows(logs: Sequence[FilteredLog], decimate: int) -> list[np.ndarray]:
    """The row indices used per log (usable part, every ``decimate`` samples)."""
    return [np.arange(d.usable.start, d.usable.stop, decimate) for d in logs]


def _known_torque(log, known):
    if known is None:
        return 0.0
    return rowwise(known, log.q, log.qd, log.qdd)


def _stack(logs, regressor, rows, parallel=True, known=None):
    ws, ys = [], []
    for d, idx in zip(logs, rows, strict=True):
        tau = np.asarray(d.tau) - _known_torque(d, known)
        if parallel:
            w = rowwise(regressor, d.q, d.qd, d.qdd)
            ws.append(d.band(w)[idx])
            ys.append(d.band(tau)[idx])
        else:
            q, qd, qdd = (np.asarray(x)[idx] for x in (d.q, d.qd, d.qdd))
            ws.append(rowwise(regressor, q, qd, qdd))
            ys.append(tau[idx])
    return np.concatenate(ws), np.concatenate(ys)  # (rows, n, p), (rows, n)


def _row_bucket(rows: int) -> int:
    """``rows`` rounded up to a multiple of an eighth of the next power of two (at most 8 sizes per
    octave, at most 14 % padding): the padded size of ``_ls_rows``."""
    step = 2 ** max(0, math.ceil(math.log2(max(rows, 1))) - 3)
    return -(-rows // step) * step


def _ls_rows(w: np.ndarray, y: np.ndarray, weighted: bool, lags: int):
    """``ls_kernel`` on the stacked rows: CholeskyQR2 on rows zero-padded to ``_row_bucket`` (a fit's many
    least squares on different numbers of rows: cut-off candidates, folds, jackknife, share a few
    compiled programs), and LAPACK's SVD on the rows as they are where that is not exact (a
    non-finite result, a rank-deficient first problem, a condition number beyond ``CHOLQR_CONDITION``)."""
    rows, p = w.shape[0], w.shape[-1]
    size = _row_bucket(rows)
    wp = np.zeros((size,) + w.shape[1:])
    yp = np.zeros((size,) + y.shape[1:])
    wp[:rows], yp[:rows] = w, y
    fit = _ls_kernel_jit(jnp.asarray(wp), jnp.asarray(yp), weighted, True, lags, "cholqr", rows)
    exact = (
        int(fit.first_rank) == p
        and float(fit.condition) <= CHOLQR_CONDITION
        and np.all(np.isfinite(np.asarray(fit.theta)))
        and np.all(np.isfinite(np.asarray(fit.covariance)))
    )
    if exact:
        return fit
    return _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), weighted, True, lags, "svd")


def _scaled(w):
    a = w.reshape(-1, w.shape[-1])
    scale = np.linalg.norm(a, axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return scale


def _rank_tolerance(a_scaled: np.ndarray, s: np.ndarray) -> float:
    """Singular values at or below this count as zero (NumPy's ``matrix_rank`` default)."""
    return max(a_scaled.shape) * np.finfo(float).eps * s[0]


def _rank_condition(a_scaled: np.ndarray) -> tuple[int, float]:
    s = np.linalg.svd(a_scaled, compute_uv=False)
    rank = int(np.sum(s > _rank_tolerance(a_scaled, s)))
    return rank, float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


def _null_directions(a_scaled: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """A readable basis ``(k, p)`` of the parameter directions ``d`` with ``W d = 0``, ``W = a_scaled · diag(scale)``.

    The right singular vectors of ``a_scaled`` whose singular values are at or below the rank
    tolerance (the one ``_rank_condition`` uses) span the null space in scaled coordinates; ``d = v /
    scale`` maps them to the parameters. The basis is then put in reduced row echelon form over
    ``k`` pivot parameters chosen of maximal volume: each direction has coefficient 1 at its own
    pivot, 0 at the others' pivots and ``|c| <= 1`` elsewhere (so its largest coefficient is 1).
    Coefficients below ``1e-6`` are set to zero. Returns the basis, rows ordered by pivot, and the pivots.
    """
    p = a_scaled.shape[1]
    padded = np.vstack([a_scaled, np.zeros((max(p - a_scaled.shape[0], 0), p))])  # vt is (p, p)
    _, s, vt = np.linalg.svd(padded, full_matrices=False)
    null = vt[s <= _rank_tolerance(a_scaled, s)] / scale  # (k, p)
    k = null.shape[0]
    if k == 0:
        return null, []
    # Greedy pivots (Gauss–Jordan, complete pivoting), then swaps that each raise |det| (maxvol).
    work, pivots = null.copy(), []
    for row in range(k):
        mags = np.abs(work[row:])
        mags[:, pivots] = 0.0
        i, j = np.unravel_index(np.argmax(mags), mags.shape)
        work[[row, row + i]] = work[[row + i, row]]
        work -= np.outer(work[:, j] / work[row, j], work[row]) * (np.arange(k) != row)[:, None]
        pivots.append(int(j))
    for _ in range(10 * p):
        basis = np.linalg.solve(null[:, pivots], null)
        i, j = np.unravel_index(np.argmax(np.abs(basis)), basis.shape)
        if abs(basis[i, j]) <= 1.0 + 1e-9:
            break
        pivots[i] = int(j)
    basis[np.abs(basis) < 1e-6] = 0.0
    basis[np.arange(k), pivots] = 1.0
    order = np.argsort(pivots)
    return basis[order], [pivots[i] for i in order]


def _combination(direction: np.ndarray, lead: int, names: Sequence[str]) -> str:
    """``[I2 - 0.3 m2r2]``: the pivot parameter (coefficient 1) first, then the others in order."""
    terms = []
    for j in [lead, *(int(j) for j in np.flatnonzero(direction) if j != lead)]:
        c = float(direction[j])
        size = "" if f"{abs(c):.3g}" == "1" else f"{abs(c):.3g} "
        sign = ("- " if c < 0 else "+ ") if terms else ("-" if c < 0 else "")
        terms.append(f"{sign}{size}{names[j]}")
    return "[" + " ".join(terms) + "]"


def _check_rank(rank, names, a_scaled, scale):
    """Raise if the regressor ``a_scaled · diag(scale)`` is rank deficient, naming every unidentifiable direction."""
    if rank >= len(names):
        return
    basis, pivots = _null_directions(a_scaled, scale)
    directions = ", ".join(_combination(d, j, names) for d, j in zip(basis, pivots, strict=True))
    k = basis.shape[0]
    note = (
        "; the basis is not unique: any combination of these is unidentifiable too, and each leads with a "
        "parameter of its own"
        if k > 1
        else ""
    )
    involved = sorted({names[j] for j in np.flatnonzero(np.any(basis != 0, axis=0))}, key=list(names).index)
    raise ValueError(
        f"the regressor has rank {rank} < {len(names)} parameters; unidentifiable directions ({k}): {directions} "
        f"(moving the parameters along them leaves the torque unchanged, so these logs cannot tell them apart"
        f"{note}); excite {involved} with richer motion, or fix some of them (fit.fixed) or leave them out of "
        "fit.unknowns, e.g. use the base parameters."
    )


def _solve(a, b, bounds, scale):
    if bounds is None:
        x, *_ = np.linalg.lstsq(a, b, rcond=None)
        return x
    lo, hi = bounds
    from scipy.optimize import lsq_linear  # imported when first needed: scipy takes ~0.9 s to import

    res = lsq_linear(a, b, bounds=(np.asarray(lo) * scale, np.asarray(hi) * scale), method="bvls", lsmr_tol="auto")
    return res.x


def idim_ls(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    decimate: int | None = None,
    weighted: bool = True,
    bounds: tuple[Sequence[float], Sequence[float]] | None = None,
    parallel: bool = True,
    known: Known | None = None,
    lags: int | None = None,
) -> Identification:
    """IDIM-LS on one or more filtered logs (see the module docstring).

    Args:
        logs: filtered logs (same model; any lengths). regressor: ``Y(q, q', q'') -> (..., n, p)``.
        names: the ``p`` parameter names. decimate: row stride (default ``default_decimation``).
        weighted: per-joint weighting by the OLS residual std (default ``True``).
        bounds: optional ``(lower, upper)`` per parameter (``±inf`` for free ones): bounded LS.
        parallel: low-pass the regressor columns like the torque (default ``True``; module docstring).
        known: torque of fixed parameters, subtracted from the measured torque (default none).
        lags: rows over which residuals correlate, for the Newey-West covariance (``ls_kernel``);
            default ``correlation_lags`` (one cut-off period of rows); 0: independent residuals.

    Raises ``ValueError`` (one line) if the regressor is rank-deficient: it names every unidentifiable
    direction as a combination of the parameters (``[I2 - 0.3 m2r2], [fc1]``; see ``_null_directions``).
    """
    names = tuple(names)
    if decimate is None:
        decimate = default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
    rows = regression_rows(logs, decimate)
    w, y = _stack(logs, regressor, rows, parallel, known)
    lags = checked_lags(lags, correlation_lags(logs[0].sample_step, logs[0].cutoff_hz, decimate))
    if bounds is None:
        fit = _ls_rows(w, y, weighted, lags)
        if int(fit.first_rank) < len(names):
            a, scale = np.asarray(fit.first_scaled), np.asarray(fit.first_scale)
            _check_rank(int(fit.first_rank), names, a, scale)
        return Identification(
            "idim_ls",
            names,
            np.asarray(fit.theta),
            np.asarray(fit.covariance),
            int(fit.rank),
            float(fit.condition),
            np.asarray(fit.residual_std),
            int(y.shape[0]),
        )
    scale = _scaled(w)
    joints = w.shape[1]
    sigma = np.ones(joints)
    a = (w / scale).reshape(-1, len(names))
    rank, _ = _rank_condition(a)
    _check_rank(rank, names, a, scale)
    x = _solve(a, y.reshape(-1), None, scale)
    if weighted:
        resid = y - np.einsum("njp,p->nj", w / scale, x)
        sigma = np.sqrt(np.sum(resid**2, axis=0) / (resid.shape[0] - len(names) / joints))
    ws = (w / sigma[None, :, None]).reshape(-1, len(names))
    scale = np.linalg.norm(ws, axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    a = ws / scale
    b = (y / sigma).reshape(-1)
    x = _solve(a, b, bounds, scale)
    theta = x / scale
    # IDIM-LS's covariance formula (``ls_covariance``: the Newey-West sandwich over ``lags``) at the bounded solution.
    weighted = ((y - np.einsum("njp,p->nj", w, theta)) / sigma).reshape(-1)
    sandwich = ls_covariance(np.linalg.inv(a.T @ a), a, weighted, joints, lags)
    return _ls_result("idim_ls_bounded", names, theta, w, y, sigma, a, scale, sandwich=sandwich)


def idim_ls_left_out(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    decimate: int | None = None,
    weighted: bool = True,
    parallel: bool = True,
    known: Known | None = None,
) -> list[np.ndarray | None]:
    """IDIM-LS's estimate with each log left out in turn (a jackknife): ``θ_(i)``, the estimate of
    ``idim_ls`` on every log but ``logs[i]`` (the same rows and kernel), or ``None`` where that fit is
    rank-deficient (a left-out log may be the only one that excites a parameter). Each log's rows are
    built and low-passed once, not once per fit."""
    if decimate is None:
        decimate = default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
    stacks = [_stack([d], regressor, regression_rows([d], decimate), parallel, known) for d in logs]
    out = []
    for i in range(len(logs)):
        w = np.concatenate([s[0] for j, s in enumerate(stacks) if j != i])
        y = np.concatenate([s[1] for j, s in enumerate(stacks) if j != i])
        fit = _ls_rows(w, y, weighted, 0)
        out.append(np.asarray(fit.theta) if int(fit.first_rank) == len(names) else None)
    return out


def _ls_result(method, names, theta, w, y, sigma, a, scale, iterations=0, notes="", status="ok", sandwich=None):
    """The ``Identification`` of a least-squares-like fit; covariance ``σ̂² (AᵀA)⁻¹`` in the scaled
    coordinates, or ``sandwich`` as it is (a Newey-West covariance, scaled)."""
    resid = y - np.einsum("njp,p->nj", w, theta)
    n, p = a.shape
    if sandwich is not None:
        cov = np.asarray(sandwich) / np.outer(scale, scale)
    else:
        weighted_var = np.sum((resid / sigma) ** 2) / max(n - p, 1)
        cov = weighted_var * np.linalg.inv(a.T @ a) / np.outer(scale, scale)
    rank, cond = _rank_condition(a)
    return Identification(
        method,
        tuple(names),
        np.asarray(theta),
        cov,
        rank,
        cond,
        np.sqrt(np.mean(resid**2, axis=0)),
        int(resid.shape[0]),
        iterations,
        notes,
        status,
    )
