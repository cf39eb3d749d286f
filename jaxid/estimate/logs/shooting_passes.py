"""Passes of multiple shooting over the segments of ``jaxid.estimate.logs.output_error``: a fit's set-up
(``shooting_problem``), the compiled chunk programs (``_shooting_blocks``: residuals and the Jacobian's
blocks by forward sensitivities; ``_shooting_residuals``: residuals only) and ``run_passes``, which runs
one pass for any number of fits as one program over all their segments. The design is ``output_error``'s
module docstring ("Streamed normal equations").

**One program over many fits' segments.** A segment's blocks depend only on its ``θ``, initial state,
torques, measured angles and angle noise ``σ``: the programs take all five per segment, so the segments of
several fits (each at its own ``θ``, e.g. the trials of a benchmark chunk run in lockstep by
``jaxid.estimate.logs.output_error_batch``) go through one compiled program, cut into chunks
(``chunk_size``: at most ``chunk_segments``, at least one per host thread, a multiple of 8), the last chunk
filled by repeating the last segment (its blocks are computed and dropped), so a log's length never sets a
compiled shape. Measured on poorly exciting Panda segments (0.5 s, one core): a Jacobian pass costs 112 ms a
segment alone, 52 in a chunk of 8, 46 of 16 and 40 of 32; compiling a chunk shape 4-5 s. The
sums over a fit's segments (``Σ R_θᵀR_θ``, ``Σ R_θᵀr``) are taken on the host over its own segments in
one order: a fit's numbers do not depend on the others in the call beyond the round-off of a chunk's
shape (``tests/test_output_error_streaming.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import _platform
from ..._platform import thread_map
from .data import angle_noise_std
from .idim import segment_starts
from .sensitivities import segment_sensitivities
from .shooting import Blocks, normal_equations, shooting_cost
from .shooting_solvers import EVALUATE, LINEARISE
from .stepping import simulate_segments, stable_substeps, stage_torques

__all__ = [
    "PassRequest",
    "ShootingProblem",
    "chunk_size",
    "padded_rows",
    "run_passes",
    "run_pass_groups",
    "shooting_problem",
]


class PassRequest(NamedTuple):
    """One fit's pass at one point: its segments' torques ``(S, L, 3, n)`` (``stage_torques``) and measured
    angles ``(S, k, n)``, ``θ`` ``(p,)``, the initial states ``(S, m)``, the angle noise ``σ`` ``(n,)`` and the
    program's static arguments (``regressor``, ``known``, ``sample_step``, ``stride``, ``substeps``)."""

    torques: np.ndarray
    measured: np.ndarray
    theta: np.ndarray
    states: np.ndarray
    sigma: np.ndarray
    static: dict

    def key(self) -> tuple:
        """What must be equal for requests to share a program: the static arguments and the segments' shape."""
        return (*sorted(self.static.items()), self.torques.shape[1:], self.measured.shape[1:], self.theta.shape)


def chunk_size(total: int, chunk_segments: int, threads: int) -> int:
    """Segments per compiled call for a pass over ``total`` segments: at most ``chunk_segments``, in at least as many
    chunks as the host has ``threads`` (each chunk runs on its own), a multiple of 8 (few shapes to compile; at
    most 7 padded segments a chunk) unless ``chunk_segments`` or the power of two above ``total`` is smaller."""
    chunks = max(threads, math.ceil(total / chunk_segments))
    return min(chunk_segments, 8 * math.ceil(math.ceil(total / chunks) / 8), 1 << (total - 1).bit_length())


def padded_rows(total: int, size: int) -> np.ndarray:
    """The segment of each row of chunks of ``size`` over ``total`` segments, the last chunk filled by repeating the
    last segment (its results dropped)."""
    return np.minimum(np.arange(-(-total // size) * size), total - 1)


def run_passes(jacobian: bool, requests: Sequence[PassRequest], chunk_segments: int) -> list:
    """One pass for every request, their segments through one compiled program (module docstring): with
    ``jacobian`` the ``Blocks`` of each (``rtr``, ``rtg`` summed over its segments, ``scores`` its per-segment
    ``R_θᵀr``), else ``(residuals (S, k), end states (S, m))``. The requests share one ``key()``
    (``run_pass_groups`` for several)."""
    return run_pass_groups([(jacobian, requests)], chunk_segments)[0]


def run_pass_groups(
    groups: Sequence[tuple[bool, Sequence[PassRequest]]], chunk_segments: int, *, fixed: bool = False
) -> list[list]:
    """``run_passes(jacobian, requests, chunk_segments)`` for every group ``(jacobian, requests)`` (each group's
    requests share one ``key()``), all the groups' chunks spread over the host's cores together: the chunks are
    independent programs, called from one thread per core (``jaxid._platform.thread_map``: a program runs on
    the thread that calls it); the results are the same as one after another. ``fixed``: every chunk has
    ``chunk_segments`` segments (the last padded), whatever the requests: one program shape, so a segment's
    numbers do not depend on the others in the call (``output_error_batch``)."""
    threads = _platform.host_threads()
    jobs, plans = [], []
    for g, (jacobian, requests) in enumerate(groups):
        if len({r.key() for r in requests}) != 1:
            raise ValueError("run_passes: the requests differ in their static arguments or segment shapes.")
        counts = [r.torques.shape[0] for r in requests]
        total = sum(counts)
        size = int(chunk_segments) if fixed else chunk_size(total, int(chunk_segments), threads)
        fill = padded_rows(total, size)
        # The programs' arguments, one row per segment (θ and σ repeated over a fit's segments), padded.
        per_fit = {f: np.concatenate([getattr(r, f) for r in requests]) for f in ("states", "torques", "measured")}
        for f in ("theta", "sigma"):
            per_fit[f] = np.repeat(np.stack([getattr(r, f) for r in requests]), counts, axis=0)
        arrays = tuple(per_fit[f][fill] for f in ("theta", "states", "torques", "measured", "sigma"))
        jobs += [(g, lo, size) for lo in range(0, fill.size, size)]
        # The angle rows, (total, k, p + m), kept where small (``ROWS_BYTES``, for the whole group).
        keep = total * per_fit["measured"][0].size * (arrays[0].shape[1] + arrays[1].shape[1]) * 8 <= ROWS_BYTES
        plans.append((jacobian, requests[0].static, arrays, counts, keep))

    def run(job):
        g, lo, size = job
        jacobian, static, arrays, _, keep = plans[g]
        program = _shooting_blocks if jacobian else _shooting_residuals
        out = program(*(jnp.asarray(a[lo : lo + size]) for a in arrays), **static)
        if jacobian and not keep:
            out = out._replace(rows=None)
        return jax.tree.map(np.asarray, out)

    done = thread_map(run, jobs)
    return [
        _split(jacobian, counts, [o for o, job in zip(done, jobs, strict=True) if job[0] == g])
        for g, (jacobian, _, _, counts, _) in enumerate(plans)
    ]


#: A Jacobian pass keeps a fit's angle rows (``Blocks.rows``) where they take at most this many bytes (the Panda's
#: 5-s benchmark log: 1.9 MB; ten 50-s runs of a six-joint arm at 500 Hz: ~170 MB, dropped), so that the input-noise
#: covariance at the solution starts from the last pass's sensitivities instead of computing them again
#: (``shooting_inputs``).
ROWS_BYTES = 64 << 20


def _split(jacobian: bool, counts: list[int], out: list) -> list:
    """A group's chunk outputs (in order) cut into its requests' results (``run_passes``)."""
    total = sum(counts)
    fields = [
        np.concatenate(parts)[:total] for parts in zip(*(tuple(o)[: 9 if jacobian else 2] for o in out), strict=True)
    ]
    rows = np.concatenate([o.rows for o in out])[:total] if jacobian and out[0].rows is not None else None
    bounds = np.cumsum([0, *counts])
    results = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        mine = [f[lo:hi] for f in fields]
        if not jacobian:
            results.append(tuple(mine))
            continue
        blocks = Blocks(*mine, rows=None if rows is None else rows[lo:hi])
        # Summed here, over the fit's real segments in one order: neither the chunk size nor the other fits
        # in the call change the sums.
        results.append(blocks._replace(rtr=blocks.rtr.sum(0), rtg=blocks.rtg.sum(0), scores=blocks.rtg))
    return results


@functools.partial(jax.jit, static_argnames=("parametrisation",))
def _parametrise(z, *, parametrisation):
    """``(θ(z), ∂θ/∂z)``; compiled once per parametrisation (static, hashed by identity)."""

    def twice(x):
        theta = parametrisation(x)
        return theta, theta

    jac, theta = jax.jacfwd(twice, has_aux=True)(z)
    return theta, jac


def _segment_residuals(regressor, known, sample_step, stride, substeps, theta, y0, tau_s, q_s, sigma):
    """One segment's scaled angle residuals ``(k,)`` and end state ``(m,)`` (``_shooting_blocks``' primal)."""
    n = y0.shape[-1] // 2
    states = simulate_segments(regressor, theta, y0[None], tau_s[None], sample_step, known, substeps)[0]
    res = (states[:-1:stride, :n] - q_s) / sigma
    return res.reshape(-1), states[-1]


@functools.partial(jax.jit, static_argnames=("regressor", "known", "sample_step", "stride", "substeps"))
def _shooting_residuals(
    theta, initial_states, torques, measured, sigma, *, regressor, known, sample_step, stride, substeps=1
):
    """One chunk's residuals and end states without the Jacobian (``_shooting_blocks``' primal, ``vmap``)."""
    one = functools.partial(_segment_residuals, regressor, known, sample_step, stride, substeps)
    return jax.vmap(one)(theta, initial_states, torques, measured, sigma)


@functools.partial(jax.jit, static_argnames=("regressor", "known", "sample_step", "stride", "substeps"))
def _shooting_blocks(
    theta, initial_states, torques, measured, sigma, *, regressor, known, sample_step, stride, substeps=1
) -> Blocks:
    """One chunk's blocks (``Blocks``, per segment; ``rtr``, ``rtg`` too, summed by the caller): each segment
    simulated at its own ``θ`` (``(C, p)``) with its sensitivities to ``(θ, y₀)``
    (``sensitivities.segment_sensitivities``, ``vmap`` over the chunk), the residuals from its states, scaled by
    its ``σ`` (``(C, n)``). Compiled once per model (``regressor``, ``known``: static, hashed by identity), step,
    stride and chunk shape: every pass, chunk and log of the same segment length shares one program."""

    def segment(theta, y0, tau_s, q_s, sigma):
        states, sens_q, sens_end = segment_sensitivities(regressor, theta, y0, tau_s, sample_step, known, substeps)
        res = (states[:-1:stride, :n] - q_s) / sigma
        jac = (sens_q[:-1:stride] / sigma[:, None]).reshape(-1, sens_q.shape[-1])
        return res.reshape(-1), states[-1], jac, sens_end

    n, p = initial_states.shape[-1] // 2, theta.shape[-1]
    res, ends, jac, e_jac = jax.vmap(segment)(theta, initial_states, torques, measured, sigma)
    r_theta, r_x, e_theta, e_x = jac[..., :p], jac[..., p:], e_jac[..., :p], e_jac[..., p:]
    return Blocks(
        res=res,
        ends=ends,
        e_theta=e_theta,
        e_x=e_x,
        rtr=jnp.einsum("ckp,ckq->cpq", r_theta, r_theta),
        rtg=jnp.einsum("ckp,ck->cp", r_theta, res),
        rtx=jnp.einsum("ckp,ckm->cpm", r_theta, r_x),
        rxx=jnp.einsum("ckm,ckl->cml", r_x, r_x),
        rxg=jnp.einsum("ckm,ck->cm", r_x, res),
        rows=jac,
    )


class ShootingProblem(NamedTuple):
    """A multiple-shooting fit's set-up (``shooting_problem``): the segments' start states ``x0``
    ``(S, m)``, which segment links on (``linked``) and each one's log (``owner``), the continuity
    weights ``scale_c``, the per-joint angle noise ``sigma``, the segment length (samples) and step,
    the substeps (and the stiffness that set them, ``None`` if given), the residual rows (angles and continuity
    gaps) and their degrees of freedom ``dof`` (rows less unknowns ``θ`` and states), and two passes:
    ``evaluate(φ, x)`` (the cost, ``None`` if not finite) and ``linearise(φ, x)`` (``(NormalEquations,
    (Blocks, θ))`` in ``φ``, ``None`` if not finite), each one ``run_passes`` call of this fit alone; and the
    same passes split for a caller that runs many fits' passes together: ``request(φ, x)`` (the
    ``PassRequest``) and ``answer(kind, φ, x, out)`` (what the solver is sent, from ``run_passes``' output
    ``out`` for that request; ``kind`` the solver's, ``shooting_solvers.LINEARISE`` or ``EVALUATE``), with the
    ``chunk_segments`` of the fit."""

    x0: np.ndarray
    linked: np.ndarray
    owner: np.ndarray
    scale_c: np.ndarray
    sigma: np.ndarray
    length: int
    sample_step: float
    substeps: int
    stiffness: float | None
    evaluate: Callable
    linearise: Callable
    rows: int
    dof: int
    request: Callable
    answer: Callable
    chunk_segments: int


def shooting_problem(
    logs, regressor, theta0, segment_s, stride, continuity_weight, known, parametrisation, chunk_segments, substeps
) -> ShootingProblem:
    """The segments of ``logs`` and the passes over them (``output_error``'s arguments; ``theta0`` the
    start's ``θ``, for the substeps' stiffness rule). Raises ``ValueError`` as ``output_error`` does."""
    h = logs[0].sample_step
    if any(abs(d.sample_step - h) > 1e-12 * h for d in logs):
        raise ValueError("output_error needs logs on one time grid; load them with the same sample_step.")
    if int(chunk_segments) < 1:
        raise ValueError(f"output_error: chunk_segments must be a positive integer, got {chunk_segments}.")
    length = max(stride, int(round(segment_s / h)))
    sigma = angle_noise_std(logs)
    x0s, torques, meas, linked, owner = [], [], [], [], []
    for i, d in enumerate(logs):
        starts = segment_starts(d, length)
        q, qd = np.asarray(d.q), np.asarray(d.qd)
        x0s.append(np.concatenate([q[starts], qd[starts]], axis=1))
        stages = np.asarray(stage_torques(d.tau))
        torques.append(stages[starts[:, None] + np.arange(length)])
        meas.append(np.asarray(d.q_raw)[starts[:, None] + np.arange(0, length, stride)])
        linked.append(np.arange(len(starts)) < len(starts) - 1)  # the log's last segment links on to none
        owner.append(np.full(len(starts), i))
    linked = np.concatenate(linked)
    scale_c = np.concatenate([1 / sigma, length * h / sigma]) * continuity_weight
    torques, meas = np.concatenate(torques), np.concatenate(meas)
    if substeps is None:
        substeps, stiffness = stable_substeps(regressor, theta0, logs, known)
    elif int(substeps) < 1:
        raise ValueError(f"output_error: substeps must be a positive integer, got {substeps}.")
    else:
        stiffness = None
    substeps = int(substeps)
    static = dict(regressor=regressor, known=known, sample_step=h, stride=stride, substeps=substeps)

    def parameters(par):
        if parametrisation is None:
            return par, None
        return tuple(map(np.asarray, _parametrise(jnp.asarray(par), parametrisation=parametrisation)))

    def request(par, states):
        """The pass at ``(φ, x)`` (``PassRequest``)."""
        return PassRequest(torques, meas, np.asarray(parameters(par)[0]), states, sigma, static)

    def answer(kind, par, states, out):
        """A ``LINEARISE`` request's answer from its pass's ``Blocks``: the normal equations (in ``φ``) and the
        pass's blocks and ``θ``; an ``EVALUATE``'s from its residuals and end states: the cost ``½ |r|²``.
        ``None`` if not finite."""
        if not all(np.isfinite(b).all() for b in out if b is not None):
            return None
        if kind != LINEARISE:
            return shooting_cost(*out, states, linked, scale_c)[0]
        theta, dtheta = parameters(par)
        return normal_equations(out, states, linked, scale_c, dtheta), (out, theta)

    def evaluate(par, states):
        """The cost ``½ |r|²`` at ``(φ, x)`` by a pass without the Jacobian; ``None`` if not finite."""
        return answer(EVALUATE, par, states, run_passes(False, [request(par, states)], chunk_segments)[0])

    def linearise(par, states):
        """The normal equations (in ``φ``) at ``(φ, x)`` and the pass's blocks and ``θ``; ``None`` if not finite."""
        return answer(LINEARISE, par, states, run_passes(True, [request(par, states)], chunk_segments)[0])

    x0 = np.concatenate(x0s)
    owner = np.concatenate(owner)
    rows = len(x0) * len(range(0, length, stride)) * x0.shape[1] // 2 + x0.shape[1] * int(linked.sum())
    dof = rows - (len(theta0) + x0.size)
    return ShootingProblem(
        x0,
        linked,
        owner,
        scale_c,
        sigma,
        length,
        h,
        substeps,
        stiffness,
        evaluate,
        linearise,
        rows,
        dof,
        request,
        answer,
        int(chunk_segments),
    )
