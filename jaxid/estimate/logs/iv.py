"""IDIM-IV on logs: instruments from segment-wise simulations of the current estimate, restarted from the
filtered measured state so that they stay near the measured trajectory (``NEAR_RAD``, ``MIN_NEAR``), and
the instrumental-variable passes of ``idim_iv``. The least-squares side (rows, weights, rank rule, the
result type) is ``jaxid.estimate.logs.idim``."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from ..._platform import thread_map
from .data import FilteredLog, Known, Regressor, accelerations, rowwise
from .idim import Identification, _known_torque, _ls_result, correlation_lags, default_decimation, segment_starts
from .ls_kernel import newey_west
from .stepping import stable_substeps
from .validation import free_simulation

__all__ = ["idim_iv", "simulated_signals", "smallest_canonical_correlation", "WEAK_CORRELATION"]


def _accelerations(regressor, known, theta, q, qd, tau):
    """``accelerations`` at a batch of states ``(K, n)`` (``rowwise``: compiled once per model)."""
    return jax.vmap(lambda q_, qd_, tau_: accelerations(regressor, theta, q_, qd_, tau_, known))(q, qd, tau)


#: A simulated segment is *near* the measured trajectory while every angle stays within this much [rad]
#: (or [m]) of the filtered measured one; rows of segments that leave it (or are not finite) are not
#: instruments (``simulated_signals``).
NEAR_RAD = 0.1
#: IDIM-IV restarts its simulations more often (halving ``segment_s``, down to ``MIN_SEGMENT_STEPS``
#: samples) until at least ``MIN_NEAR`` of the segments stay near the measured trajectory.
MIN_NEAR = 0.5
MIN_SEGMENT_STEPS = 2
#: IDIM-IV's status is ``"weak_instruments"`` (the estimate still returned, with its covariance) when the
#: smallest canonical correlation between the instruments' and the measured regressor's columns (the
#: weighted rows of the last pass) is below this: in that direction the IV estimate's variance is over
#: 400 times what least squares' would be. Measured on ``benchmark_panda``'s poorly exciting setting:
#: 0.34-0.55 on 18 of 20 trials, 0.002-0.004 on the 2 whose estimates were wild (median std 8 and 68
#: against 0.07, held-out torque 1.3 and 3.0 N m against 0.12).
WEAK_CORRELATION = 0.05


def smallest_canonical_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest cosine of the principal angles between the column spaces of ``a`` and ``b``
    (``(N, p)`` each, full column rank): the smallest singular value of ``Q_aᵀ Q_b``."""
    qa, _ = np.linalg.qr(a)
    qb, _ = np.linalg.qr(b)
    return float(np.linalg.svd(qa.T @ qb, compute_uv=False).min())


def simulated_signals(logs, regressor, theta, segment_s, known=None, substeps=1):
    """Per log: ``(indices, q, qd, qdd, near)`` of segment-wise simulations restarted from the filtered
    measured state every ``segment_s`` seconds under the low-passed measured torque; ``near`` marks the
    samples of segments that stay within ``NEAR_RAD`` of the measured angles (and are finite). ``substeps``:
    RK4 steps per sample (``jaxid.estimate.logs.stepping.model_step``)."""

    def one(d):
        length = max(1, int(round(segment_s / d.sample_step)))
        starts = segment_starts(d, length)
        x0 = np.concatenate([np.asarray(d.q)[starts], np.asarray(d.qd)[starts]], axis=1)
        # Starts padded to a block (free_simulation): runs of different lengths share one compiled program.
        states = free_simulation(d, regressor, theta, starts, length, substeps, known)
        idx = (starts[:, None] + np.arange(length)).reshape(-1)
        n = d.joints
        states = states[:, :length]
        deviation = np.abs(states[..., :n] - np.asarray(d.q)[starts[:, None] + np.arange(length)])
        near_segment = np.all(np.isfinite(states), axis=(1, 2)) & (
            np.nan_to_num(deviation, nan=np.inf).max(axis=(1, 2)) <= NEAR_RAD
        )
        near = np.repeat(near_segment, length)
        states = np.where(near_segment[:, None, None], states, np.asarray(x0)[:, None, :]).reshape(-1, 2 * n)
        qdd = rowwise(
            _accelerations,
            states[:, :n],
            states[:, n:],
            np.asarray(d.tau)[idx],
            static=(regressor, known),
            args=(theta,),
        )
        return idx, states[:, :n], states[:, n:], qdd, near & np.all(np.isfinite(qdd), axis=1)

    # The logs are independent compiled work: one thread per core (``thread_map``), in order.
    return thread_map(one, logs)


def _near_signals(logs, regressor, theta, segment_s, known):
    """``simulated_signals`` restarted more often until ``MIN_NEAR`` of the rows stay near the measured
    trajectory (module constants); returns ``(signals, segment_s used)`` or raises a ``ValueError`` that
    says what failed."""
    shortest = MIN_SEGMENT_STEPS * min(d.sample_step for d in logs)
    substeps, _ = stable_substeps(regressor, theta, logs, known)  # RK4 substeps for a stiff model
    while True:
        sims = simulated_signals(logs, regressor, theta, segment_s, known, substeps)
        share = sum(int(s[4].sum()) for s in sims) / max(sum(s[4].size for s in sims), 1)
        if share >= MIN_NEAR:
            return sims, segment_s
        if segment_s / 2 < shortest:
            raise not_near_error(share, segment_s)
        segment_s = segment_s / 2


def not_near_error(share: float, segment_s: float) -> ValueError:
    """IDIM-IV's error where only ``share`` of the rows stay near the measured trajectory even restarted every
    ``segment_s`` (the shortest restart interval, ``MIN_SEGMENT_STEPS`` samples)."""
    return ValueError(
        f"IDIM-IV: the simulations of the estimate leave the measured trajectory (by more than {NEAR_RAD} rad, "
        f"or diverge) in {100 * (1 - share):.0f} % of the segments even restarted every {segment_s:.3g} s: "
        "the estimate's model cannot be simulated (e.g. its mass matrix is not positive definite); start "
        'IDIM-IV from a physically consistent estimate (estimators.use = ["idim_ls_consistent", …]) or drop it.'
    )


def idim_iv(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification,
    iterations: int = 3,
    segment_s: float = 0.5,
    decimate: int | None = None,
    known: Known | None = None,
) -> Identification:
    """IDIM-IV: instrumental variables from segment-wise simulations of the current estimate.

    Args:
        start: the IDIM-LS estimate (its weights ``1/σ_j`` are kept). iterations: IV passes.
        segment_s: [s] the simulation restarts from the filtered measured state this often.
        decimate: row stride (default as IDIM-LS). known: torque of fixed parameters (as IDIM-LS).

    Covariance: the Newey-West IV sandwich ``(ZᵀW)⁻¹ M (WᵀZ)⁻¹ · N/(N − p)`` in the weighted rows, ``M``
    the Bartlett estimate of the scores ``Zₜᵀeₜ`` over ``correlation_lags`` rows (as IDIM-LS's).

    Status ``"weak_instruments"`` (the estimate kept, a note why) when the instruments barely correlate
    with the regressor in some direction (``WEAK_CORRELATION``). Raises ``ValueError`` if the instrument
    matrix is singular.
    """
    names = tuple(names)
    if decimate is None:
        decimate = default_decimation(logs[0].sample_step, logs[0].cutoff_hz)
    theta = np.asarray(start.value)
    # The measured side does not change between passes: its regressor and torque, parallel-filtered.
    bands = [
        (d.band(rowwise(regressor, d.q, d.qd, d.qdd)), d.band(np.asarray(d.tau) - _known_torque(d, known)))
        for d in logs
    ]
    sigma = None
    notes = ""
    for _ in range(iterations):
        sims, used = _near_signals(logs, regressor, theta, segment_s, known)
        if used != segment_s:
            notes = (
                f"simulations restarted every {used:.3g} s (not {segment_s:g} s) to stay near the measured trajectory"
            )
        ws, zs, ys = [], [], []
        for (w_band, y_band), (idx, qs, qds, qdds, near) in zip(bands, sims, strict=True):
            keep = np.arange(0, idx.size, decimate)
            keep = keep[near[keep]]
            rows = idx[keep]
            ws.append(w_band[rows])
            zs.append(rowwise(regressor, np.asarray(qs)[keep], np.asarray(qds)[keep], np.asarray(qdds)[keep]))
            ys.append(y_band[rows])
        w, z, y = np.concatenate(ws), np.concatenate(zs), np.concatenate(ys)
        if sigma is None:
            sigma = _iv_weights(w, y, theta)
        theta, solved = _iv_solve(w, z, y, sigma)
    lags = correlation_lags(logs[0].sample_step, logs[0].cutoff_hz, decimate)
    return _iv_identification(names, theta, w, y, sigma, solved, lags, iterations, notes)


def _iv_weights(w: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``σ_j`` ``(n,)``: the per-joint RMS residual of the measured rows ``w`` ``(R, n, p)``, ``y`` ``(R, n)``
    at the start ``theta`` (IDIM-IV's weights, from its first pass's rows)."""
    resid = y - np.einsum("njp,p->nj", w, theta)
    return np.sqrt(np.mean(resid**2, axis=0))


def _iv_solve(w: np.ndarray, z: np.ndarray, y: np.ndarray, sigma: np.ndarray):
    """One IV pass on stacked rows: measured regressor ``w`` and instruments ``z`` ``(R, n, p)``, torque ``y``
    ``(R, n)``, weights ``1/sigma``; columns scaled by the measured rows' norms. Returns ``(theta, solved)``,
    ``solved = (A_W, A_Z, scale, ZᵀW, x)`` in the scaled coordinates (``_iv_identification``'s input).
    Raises ``ValueError`` if the instrument matrix is singular (condition over 1e12, or not finite)."""
    p = w.shape[-1]
    a_w = (w / sigma[None, :, None]).reshape(-1, p)
    a_z = (z / sigma[None, :, None]).reshape(-1, p)
    scale = np.linalg.norm(a_w, axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    a_w, a_z = a_w / scale, a_z / scale
    zw = a_z.T @ a_w
    condition = np.linalg.cond(zw) if np.all(np.isfinite(zw)) else np.inf
    if condition > 1e12:
        raise ValueError(
            f"IDIM-IV: the instrument matrix is singular (condition {condition:.3g}) although the simulations stay "
            "near the measured trajectory: some parameters move no simulated torque; fix them (fit.fixed) or use "
            "IDIM-LS."
        )
    x = np.linalg.solve(zw, a_z.T @ (y / sigma).reshape(-1))
    return x / scale, (a_w, a_z, scale, zw, x)


def _iv_identification(names, theta, w, y, sigma, solved, lags: int, iterations: int, notes: str) -> Identification:
    """IDIM-IV's ``Identification`` from its last pass (``_iv_solve``'s ``solved`` on rows ``w``, ``y``):
    the Newey-West IV sandwich over ``lags`` rows and the weak-instrument status (``idim_iv``)."""
    a_w, a_z, scale, zw, x = solved
    # Newey-West sandwich (ZᵀW)⁻¹ M (WᵀZ)⁻¹ · N/(N − p): the instruments' scores Zₜᵀeₜ correlate over
    # one cut-off period of rows, as IDIM-LS's do (``idim.ls_kernel``).
    zw_inv = np.linalg.inv(zw)
    residual = (y / sigma).reshape(-1) - a_w @ x
    sandwich = np.asarray(newey_west(zw_inv, a_z, residual, w.shape[1], lags))
    rho = smallest_canonical_correlation(a_z, a_w)
    status = "ok"
    if not rho >= WEAK_CORRELATION:
        status = "weak_instruments"
        weak = (
            f"weak instruments: the smallest canonical correlation of the simulated and measured regressors is "
            f"{rho:.2g} (below {WEAK_CORRELATION:g}): the estimate is unreliable in that direction; use IDIM-LS"
        )
        notes = f"{notes}; {weak}" if notes else weak
    return _ls_result(
        "idim_iv",
        names,
        theta,
        w,
        y,
        sigma,
        a_w,
        scale,
        sandwich=sandwich,
        iterations=iterations,
        notes=notes,
        status=status,
    )
