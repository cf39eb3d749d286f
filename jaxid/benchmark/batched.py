"""The benchmark's least-squares family over a chunk of trials as one compiled program.

``batched_fits`` does for the estimators batched here (``BATCHED``: IDIM-LS, RLS, consistent LS, sign-bounded LS) what
``run_estimators`` does trial by trial, in one program (``jaxid.benchmark.chunk.run_chunk`` calls it per
chunk and runs the other estimators from its IDIM-LS):

1. **Filtering** on host, all trials at once: ``filter_signals`` (``filter_log``'s kernel) on the
   ``(N, trials, n)`` angles and torques, then the torque's second low-pass at the regression rows.
2. **Rows**: the parallel low-pass of the regressor at the rows ``regression_rows`` picks (the
   default decimation, the trim) is a linear map of the ``N`` samples, ``F = lowpass(𝟙_N)[rows]``
   (the same filter applied to the identity, built once per plan): the rows are ``F Y`` with
   ``Y`` the regressor at every sample, computed on the device and never stored for a whole chunk:
   only its entries the fits use, not identically zero and not another's up to sign, by the
   straight-line code of ``jaxid.benchmark.entries``.
3. **Estimators** per trial inside ``lax.map`` (sharded over the local devices like the closed
   loop): ``ls_kernel``'s IDIM-LS (``solver="qr"``: its two least squares by a QR of the rows and an SVD of
   the ``p × p`` factor, as LAPACK's ``gelsd`` does, instead of an SVD of the rows), RLS over its weighted rows
   (``jaxid.estimate.kalman.filters.recursive_least_squares``; ``idim_rls``'s sandwich covariance),
   ``consistent_least_squares`` on the standard
   regressor's weighted rows (with ``consistent_estimate``'s correlation lags and
   ``idim_ls_consistent``'s covariance mapping), sign-bounded LS by ``bounded_solve`` (Lawson–Hanson's active
   set, as ``idim_ls(bounds=…)``'s scipy ``bvls``) on IDIM-LS's weighted rows, with IDIM-LS's covariance formula
   (``ls_covariance``: the Newey-West sandwich) at the bounded solution.

Every chunk is padded to the same width (copies of its last trial), so a trial's numbers do not
depend on the chunk it ran in. ``_start`` and ``_log`` give a trial's IDIM-LS ``Identification`` and its
``FilteredLog`` (from the batched filtering), from which the other estimators start.
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._platform import thread_map
from ..estimate import ESTIMATORS
from ..estimate.consistency import consistent_least_squares
from ..estimate.kalman.filters import recursive_least_squares
from ..estimate.logs import FilteredLog
from ..estimate.logs.data import _check_length, filter_signals
from ..estimate.logs.idim import Identification, correlation_lags, default_decimation
from ..estimate.logs.ls_kernel import _jnp_unit_columns, bounded_solve, ls_covariance, ls_kernel
from ..estimate.logs.reweighted import consistent_start
from ..measure.filters import lowpass
from ..measure.logs import MeasuredLog
from ..types import Status
from .entries import entries_function

__all__ = ["BATCHED", "batched_estimators", "batched_fits"]

#: The estimators ``run_chunk`` runs batched; the others of a setting run trial by trial.
BATCHED = ("idim_ls", "rls", "idim_ls_consistent", "idim_ls_bounded")

#: How many compiled programs and entry functions ``_kept`` holds (the most recent).
KEPT = 8
_KEPT: collections.OrderedDict = collections.OrderedDict()


def _kept(key: tuple, holds: tuple, make):
    """``make()``, once per ``key`` in this process (the last ``KEPT`` keys). The settings of a run share their
    nominal arm and base parameters (``trial._shared``), so settings with the same columns, options and decimation
    get one program, traced and compiled once, and one ``entries_function`` (whose search for equal entries compiles
    a program of its own): 1.6-3.8 s each on the Panda. ``holds``: the objects whose ``id`` is in ``key``, kept with
    the value so that no other object can take their ids while it is held."""
    if key in _KEPT:  # its ``holds`` alive in the value: the ids in ``key`` are still theirs
        _KEPT.move_to_end(key)
        return _KEPT[key][1]
    _KEPT[key] = (holds, make())
    while len(_KEPT) > KEPT:
        _KEPT.popitem(last=False)
    return _KEPT[key][1]


def batched_estimators(setting) -> list[str]:
    """The setting's estimators that run in the batched program: ``BATCHED``'s, but sign-bounded LS only with its
    default options (with ``estimator_options`` for it, e.g. ``weighting = "none"``, it runs trial by trial)."""
    options = setting["estimator_options"]
    return [e for e in setting["estimators"] if e in BATCHED and not (e == "idim_ls_bounded" and options.get(e))]


#: RLS on logs: ``P₀ = 1e8 𝟙`` in scaled units, forgetting 1 (``jaxid.estimate.logs.idim_rls``'s defaults).
RLS_INITIAL_COVARIANCE = 1e8


def _rows(plan):
    s = plan.setting
    h, samples = s["sample_step"], int(round(plan.duration / s["sample_step"]))
    trim = int(round(s["trim_s"] / h))
    decimate = default_decimation(h, s["cutoff_hz"])
    return np.arange(trim, samples - trim, decimate), trim


@functools.lru_cache(maxsize=8)
def _band_matrix(samples: int, sample_step: float, cutoff_hz: float, rows: tuple[int, ...]) -> np.ndarray:
    """``F`` ``(rows, N)``: ``lowpass(x)[rows] = F x`` (the zero-phase low-pass is linear in ``x``)."""
    return lowpass(np.eye(samples), sample_step, cutoff_hz)[list(rows)]


def _prior(plan):
    """The consistent fit's prior ``φ_prior`` (``consistent_least_squares``): the model's own, else its
    arm's values."""
    cmap = plan.model.consistent
    return jnp.asarray(cmap.arm.standard_parameters() if cmap.prior is None else cmap.prior)


def _program(plan, consistent: bool, rls: bool, ndev: int, rows: bool = False, bounded: bool = False):
    """The chunk's compiled program, one per plan and estimator set (kept on the plan), shared by the plans
    of the run that build the same one (``_kept``)."""
    cache = plan.__dict__.setdefault("_batched_programs", {})
    key = (consistent, rls, ndev, rows, bounded)
    if key not in cache:
        model = plan.model
        cmap = model.consistent
        columns = np.asarray(plan.regressor.standard_columns)
        keep = np.asarray(cmap.regressor.keep)
        st = plan.setting
        stride = default_decimation(st["sample_step"], st["cutoff_hz"])
        # ``consistent_estimate``'s default: one cut-off period of the decimated rows (their residuals correlate).
        lags = correlation_lags(st["sample_step"], st["cutoff_hz"], stride)
        lower = np.asarray(model.sign_bounds()[0]) if bounded else None
        # ``to_model`` is ``plan.base``'s map to ``columns``: the key holds what the program is built from.
        what = (columns.tobytes(), keep.tobytes(), lags, key, None if lower is None else lower.tobytes())
        cache[key] = _kept(
            ("program", id(plan.nominal), id(plan.base), id(cmap.arm), *what),
            (plan.nominal, plan.base, cmap.arm),
            lambda: _make_program(plan.nominal, columns, keep, cmap.arm, cmap.to_model, lags, *key[:4], lower),
        )
    return cache[key]


def _nonzero(arm, states: int = 64) -> np.ndarray:
    """``(n, 14 n)`` mask of the standard regressor's entries that are not identically zero: nonzero at
    one of ``states`` random states (the others are exact zeros of the recursion: rows ``j > i`` of
    link ``i``, the joint columns off the diagonal, the products with the geometry's zero entries)."""
    rng = np.random.default_rng(0)
    n = arm.dof
    q, qd, qdd = rng.uniform(-np.pi, np.pi, (states, n)), rng.normal(size=(states, n)), rng.normal(size=(states, n))
    return np.any(np.asarray(arm.standard_regressor(q, qd, qdd)) != 0, axis=0)


def _entries_regressor(arm, mask: np.ndarray):
    """``(flat, index, sign, regressor)``: ``regressor(q, qd, qdd, barrier=None)`` (each ``(n, N)``,
    batch-minor) gives the distinct rows ``(count, N)`` of the entries ``mask`` (``(n, 14 n)``) of
    ``arm.standard_regressor`` (``jaxid.benchmark.entries``: straight-line code with the geometry's
    constants folded in, entries equal up to sign computed once); entry ``e`` is ``sign[e] *
    rows[index[e]]`` and sits at the flat index ``flat[e]`` of the ``(n, 14 n)`` regressor."""
    n = arm.dof
    mask = np.asarray(mask, dtype=bool).reshape(n, 14 * n)
    if np.any(mask[:, 10 * n :].reshape(n, 4, n) & ~np.eye(n, dtype=bool)[:, None, :]):
        raise ValueError("the joint columns of the standard regressor are diagonal")
    regressor, index, sign = _kept(("entries", id(arm), mask.tobytes()), (arm,), lambda: entries_function(arm, mask))
    return np.flatnonzero(mask), index, sign, regressor


def _gather(flat, index, sign, count: int, positions: np.ndarray, size: int):
    """``(rows, signs)`` for the flat regressor ``positions`` (of ``size``): the distinct row (``count``:
    the zero row) and the sign of each (``_entries_regressor``'s map; a position off ``flat``: zero)."""
    where = np.full(size, -1)
    where[flat] = np.arange(len(flat))
    e = where[positions]
    return np.where(e >= 0, index[e], count), np.where(e >= 0, sign[e], 0.0)


def _make_program(
    arm, columns, keep, consistent_arm, to_model, lags: int, consistent, rls, ndev: int, rows: bool, lower
):
    """The base regressor's columns are standard ones (``BaseColumns``: ``Y_B = Y[..., columns]``) and the
    consistent fit's regressor is the standard one with the ``keep`` mask (``StandardColumns``): one
    standard regressor per sample serves both, low-passed once. Only its entries that the fits use,
    that are not identically zero (``_nonzero``; 163 of the UR5's 504 for IDIM-LS) and that are not
    another's up to sign (123 of those 163) are computed and go through the low-pass ``F``, as one
    ``(entries, N) @ (N, rows)`` product; the others are exact zeros or copies."""
    n, s = arm.dof, 14 * arm.dof
    needed = np.zeros((n, s), dtype=bool)
    needed[:, columns] = True
    if consistent:
        needed |= (np.asarray(keep) != 0)[None, :]
    flat, index, sign, regressor = _entries_regressor(arm, needed & _nonzero(arm))
    count = int(index.max()) + 1
    base = (np.arange(n)[:, None] * s + np.asarray(columns)[None, :]).ravel()  # (n p,) flat positions of Y_B
    base_rows, base_signs = _gather(flat, index, sign, count, base, n * s)
    all_rows, all_signs = _gather(flat, index, sign, count, np.arange(n * s), n * s)
    p = len(columns)

    def lowpassed(band_t, qf, qd, qdd, barrier):
        """``F Y``'s distinct rows ``(count + 1, rows)`` (a zero row last; ``band_t = Fᵀ``)."""
        filtered = regressor(qf, qd, qdd, barrier) @ band_t
        return jnp.concatenate([filtered, jnp.zeros((1, band_t.shape[1]), band_t.dtype)])

    def one(args):
        band, qf, qd, qdd, y, prior, barrier = args
        rows_f = lowpassed(band, qf, qd, qdd, barrier)
        w = (rows_f[base_rows] * base_signs[:, None]).T.reshape(-1, n, p)
        fit = ls_kernel(w, y, True, False, lags, "qr")
        out = {
            "ls_theta": fit.theta,
            "ls_cov": fit.covariance,
            "ls_rank": fit.rank,
            "ls_first_rank": fit.first_rank,
            "ls_condition": fit.condition,
            "ls_residual_std": fit.residual_std,
        }
        if rows:  # IDIM-IV's measured side: these rows (``batched_iv``)
            out["ls_rows"] = w
        # RLS and consistent LS: IDIM-LS's rows divided by its per-joint residual std (``_weighted_rows``).
        sigma = jnp.maximum(fit.residual_std, 1e-12)
        yw = y / sigma
        if rls:
            ww = w / sigma[None, :, None]
            scale = _jnp_unit_columns(ww.reshape(-1, p))
            a = ww / scale
            theta, cov, _, _ = recursive_least_squares(
                a, yw, jnp.zeros(p, w.dtype), RLS_INITIAL_COVARIANCE * jnp.eye(p, dtype=w.dtype)
            )
            resid = (yw - jnp.einsum("njp,p->nj", a, theta)).reshape(-1)
            out["rls_theta"] = theta / scale
            out["rls_cov"] = ls_covariance(cov, a.reshape(-1, p), resid, n, lags) / jnp.outer(scale, scale)
        if lower is not None:  # ``idim_ls(bounds=(lower, +inf))``: its weights (the OLS residual std), its covariance
            ws = (w / fit.sigma[None, :, None]).reshape(-1, p)
            scale = _jnp_unit_columns(ws)
            a = ws / scale
            x, _, converged = bounded_solve(a, (y / fit.sigma).reshape(-1), lower * scale, jnp.inf)
            theta = x / scale
            resid = ((y - jnp.einsum("njp,p->nj", w, theta)) / fit.sigma).reshape(-1)
            out["bounded_theta"] = theta
            out["bounded_cov"] = ls_covariance(jnp.linalg.inv(a.T @ a), a, resid, n, lags) / jnp.outer(scale, scale)
            out["bounded_converged"] = converged
        if consistent:
            full = (rows_f[all_rows] * all_signs[:, None]).T.reshape(-1, n, s)
            ws = full * keep / sigma[None, :, None]
            est = consistent_least_squares(ws, yw, consistent_arm, prior=prior, correlation_lags=lags)
            out["consistent_theta"] = to_model(est.standard)
            # ``idim_ls_consistent``'s covariance: its own, mapped to θ by the Jacobian of ``to_model``.
            jacobian = jax.jacfwd(to_model)(est.standard)
            out["consistent_cov"] = jacobian @ est.covariance @ jacobian.T
            out["consistent_status"] = est.status
        return out

    def local(band, qf, qd, qdd, y, prior, barrier):
        return jax.lax.map(lambda t: one((band, *t, prior, barrier)), (qf, qd, qdd, y))

    if ndev > 1:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
        spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
        local = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(shared, spec, spec, spec, spec, shared, shared),
            out_specs=spec,
            check_vma=False,
        )
    return jax.jit(local)


def _filtered_chunk(plan, run: dict):
    """``(qf, qd, qdd, tau, y)`` of every trial of ``run`` (trial axis first) and the regression rows."""
    s = plan.setting
    h = s["sample_step"]
    q = np.moveaxis(np.asarray(run["q"], dtype=float), 0, 1)  # (N, trials, n)
    tau = np.moveaxis(np.asarray(run["tau"], dtype=float), 0, 1)
    log0 = MeasuredLog(jnp.asarray(run["t"][0]), jnp.asarray(run["q"][0]), jnp.asarray(run["tau"][0]), None,
                       f"{s.name}/trial", h, (), int(run["t"].shape[1]))  # fmt: skip
    _check_length(log0, s["cutoff_hz"], "butterworth", None, 4, s["trim_s"])
    rows, trim = _rows(plan)

    def part(trials: slice):
        qf, qd, qdd, tau_f = filter_signals(q[:, trials], tau[:, trials], h, s["cutoff_hz"])
        return qf, qd, qdd, tau_f, lowpass(tau_f, h, s["cutoff_hz"])[rows]

    # One share of the trials per XLA device, on one thread per core (``thread_map``; scipy's filters
    # release the GIL): each trial's columns are filtered on their own, so the split changes no bit.
    shares = min(len(jax.devices()), q.shape[1])
    edges = np.linspace(0, q.shape[1], shares + 1).round().astype(int)
    parts = thread_map(part, [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    first = (np.moveaxis(np.concatenate(x, axis=1), 1, 0) for x in zip(*parts, strict=True))
    return (*first, rows, trim)


def batched_fits(plan, run: dict, estimators=BATCHED) -> dict:
    """The batched estimators on every trial of ``run`` (``simulate_trials``'s output): a dict of
    host arrays with a leading trial axis (``ls_theta``, ``ls_cov``, …; ``_program``) plus the
    filtered signals (``qf``, ``qd``, ``qdd``, ``tau``), the ``rows``, their torque ``y`` and, with
    ``"idim_iv"`` in ``estimators``, their regressor ``ls_rows``. Padded to the plan's width (rounded up
    to the device count), so a trial's numbers do not depend on its chunk."""
    count = run["q"].shape[0]
    qf, qd, qdd, tau_f, y, rows, trim = _filtered_chunk(plan, run)
    ndev = len(jax.devices())
    width = -(-max(plan.width, count) // ndev) * ndev

    def pad(x):
        return np.concatenate([x, np.repeat(x[-1:], width - count, axis=0)]) if width > count else x

    s = plan.setting
    samples = qf.shape[1]
    band = _band_matrix(samples, s["sample_step"], s["cutoff_hz"], tuple(int(r) for r in rows))
    consistent = "idim_ls_consistent" in estimators
    program = _program(
        plan, consistent, "rls" in estimators, ndev, "idim_iv" in estimators, "idim_ls_bounded" in estimators
    )
    prior = _prior(plan)
    states = (jnp.asarray(np.ascontiguousarray(np.swapaxes(pad(x), 1, 2))) for x in (qf, qd, qdd))  # (trials, n, N)
    band_t = jnp.asarray(np.ascontiguousarray(band.T))
    out = program(band_t, *states, jnp.asarray(pad(y)), prior, jnp.asarray(True))
    out = {k: np.asarray(v)[:count] for k, v in out.items()}
    out.update(qf=qf, qd=qd, qdd=qdd, tau=tau_f, y=y, rows=rows, trim=trim, samples=len(rows))
    return out


def simulates(name: str) -> bool:
    """Whether the benchmark's estimator ``name`` simulates its model (``AbstractEstimator.simulates``; DIDIM,
    the benchmark's own, does too): it then starts from the consistent LS (``_start``)."""
    return name == "didim" or (name in ESTIMATORS and ESTIMATORS[name].simulates)


def _start(plan, fits: dict, k: int, estimator: str | None = None) -> Identification:
    """Trial ``k``'s start for ``estimator``: its batched IDIM-LS, or for one that simulates its model (``simulates``)
    the batched consistent LS where ``fits`` has it and it converged (``consistent_start``: ``jaxid fit``'s rule)."""
    ls = Identification(
        "idim_ls",
        plan.names,
        fits["ls_theta"][k],
        fits["ls_cov"][k],
        int(fits["ls_rank"][k]),
        float(fits["ls_condition"][k]),
        fits["ls_residual_std"][k],
        int(fits["samples"]),
    )
    if estimator is None or not simulates(estimator) or "consistent_theta" not in fits:
        return ls
    converged = int(fits["consistent_status"][k]) == int(Status.SUCCESS)
    return consistent_start(ls, fits["consistent_theta"][k] if converged else None)


def _log(plan, run: dict, fits: dict, k: int) -> FilteredLog:
    s = plan.setting
    a = jnp.asarray
    return FilteredLog(
        a(run["t"][k]),
        a(run["q"][k]),
        a(fits["qf"][k]),
        a(fits["qd"][k]),
        a(fits["qdd"][k]),
        a(fits["tau"][k]),
        a(run["tau"][k]),
        f"{s.name}/trial",
        s["sample_step"],
        float(s["cutoff_hz"]),
        "butterworth",
        int(fits["trim"]),
        4,
    )
