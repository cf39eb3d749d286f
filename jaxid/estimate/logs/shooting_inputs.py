"""Output error's covariance with the torque reading's noise as an error in the input.

Output error simulates its model under the measured, low-passed torque ``τ_f = F (τ + e)``: the reading's
noise ``e`` enters the simulation, drives a smooth drift of the simulated angles and is, to first order,
the estimate's main error on arms with a noisy torque reading (errors in variables). Neither ``σ̂² (JᵀJ)⁻¹``
nor the segment sandwich sees most of it: the fitted initial states absorb it (``output_error``'s module
docstring, "Covariance"). This module propagates it instead.

**First order.** At the optimum, a perturbation ``δr`` of the (scaled) residuals moves the estimate by
``δθ = −S⁻¹ Ĵᵀ δr`` with ``S`` the Schur complement of ``JᵀJ`` (the states eliminated) and
``Ĵ = J V``, ``V = [I; T]``, ``T = −C⁻¹Bᵀ`` (``shooting.Factor``): ``Ĵ``'s column ``i`` is the residuals'
change when ``θ_i`` moves and every state follows by its best response. Two noises perturb the
residuals:

- the angle noise ``δr = ε / σ`` on the angle rows (white, ``σ`` = ``data.angle_noise_std``): covariance
  ``S⁻¹ (Ĵ_aᵀĴ_a) S⁻¹`` with ``Ĵ_a`` the angle rows of ``Ĵ`` (the continuity rows are constraints,
  not data);
- the torque reading's noise, through the simulation: ``δr = (∂r/∂τ_f) F e``, covariance
  ``S⁻¹ K Σ_e Kᵀ S⁻¹`` with ``K = Ĵᵀ (∂r/∂τ_f) F`` (``p`` × samples × joints of each log) and ``Σ_e``
  diagonal, ``σ_τ²`` per joint (white reading noise; ``data.torque_noise_std`` by default).

**Computed** segment by segment (a segment's angle rows and end state depend only on ``θ``, its own
initial state and its own torque samples): the segment's forward sensitivities (``sensitivities.
segment_sensitivities``: the last Jacobian pass's own rows, ``Blocks.rows``, where it kept them) give ``Ĵ``'s rows of segment ``s`` in the ``p`` directions
``(e_i, T_s[:, i])``: its angle rows and the continuity gap it starts (``W (e_s − x_{s+1})``: the next segment's
state moves by ``T_{s+1}``). Those rows (the gap's times ``W``) are pulled back to the segment's stage torques by
the discrete adjoint of its RK4 steps: each sample's map ``y_{k+1}(y_k, its stage torques)`` linearised by
forward mode (``2 n + 3 n`` tangents through the accelerations' custom JVP, all samples at once), then one
backward ``lax.scan`` of matrix products ``λ_k = A_kᵀ λ_{k+1} + (the angle rows' cotangent at k)``, the stage
torques' cotangents ``B_kᵀ λ_{k+1}``; then to its torque samples (``stepping.stage_torques`` is linear). This
replaced ``jax.vjp`` of the simulation (reverse mode through the forward simulation's unrolled dynamics and its
``lax.cond`` barrier), which compiled for ~100 s per segment shape on the Panda and lifted the peak memory by
~1.9 GB; measured on one rich Panda fit (69 parameters, 8 segments of 250 samples, 2 loaded cores): first call
103 → 12.9 s, a later one 6.8 → 0.85 s, peak memory +1.9 → +0.35 GB, ``K`` equal to 1.9e-10 of its largest
entry (round-off: the two differentiate the same RK4 map, through the unrolled and the generic dynamics).
``F`` is the log's zero-phase Butterworth (``FilteredLog.band``), self-adjoint up to its ends
(``F = H_rev H``, ``Fᵀ = Hᵀ H_revᵀ = H_rev H``): ``K = band(Kᵀ)ᵀ`` along time, per log (host memory
``p × samples × joints`` per log).

Tested against the estimator itself (``tests/test_output_error_inputs.py``): a small change of the raw
torque, refitted, moves the estimate by ``−S⁻¹ K δτ`` to first order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..._platform import host_threads, thread_map
from .data import FilteredLog
from .idim import segment_starts
from .sensitivities import segment_sensitivities
from .shooting import Blocks, Factor, NormalEquations, sandwich
from .shooting_passes import PassRequest, ShootingProblem, chunk_size, padded_rows
from .stepping import model_step, simulate_segments

__all__ = ["INPUT_NOISE_NOTE", "input_noise_covariance", "torque_response"]

#: How an estimate's notes name a covariance with the torque reading's noise (``output_error``; ``jaxid fit``'s
#: ``noise_upper_bound`` warning looks for it).
INPUT_NOISE_NOTE = "covariance with the torque reading's noise σ_τ"


def _pulled_back(step, states, tau_s, inject, end):
    """The adjoint of a segment's RK4 steps (module docstring): the cotangents ``inject`` ``(L + 1, m, p)`` at its
    states and ``end`` ``(m, p)`` at its last one pulled back to its torque samples, ``(p, L + 1, n)``. ``step(y, τ₃)``
    is one sample's map, ``states`` ``(L + 1, m)`` the segment's simulated states, ``tau_s`` ``(L, 3, n)`` its stage
    torques."""
    length = tau_s.shape[0]
    # Each sample's map y_{k+1}(y_k, its stage torques) linearised by forward mode (2 n + 3 n tangents).
    a, b = jax.vmap(jax.jacfwd(step, argnums=(0, 1)))(states[:-1], tau_s)  # (L, m, m), (L, m, 3, n)

    def back(lam, k):  # the adjoint of the step k: λ_{k+1} → (λ_k, the stage torques' cotangents)
        return a[k].T @ lam + inject[k], jnp.einsum("mij,mp->pij", b[k], lam)

    _, stages = jax.lax.scan(back, end, jnp.arange(length - 1, -1, -1))  # (L, p, 3, n), last sample first
    stages = jnp.moveaxis(stages[::-1], 1, 0)  # (p, L, 3, n)
    # stage_torques' transpose: stages (t_k, t_k + Δ/2, t_k + Δ) of the samples k and k + 1.
    lead = stages[:, :, 0] + 0.5 * stages[:, :, 1]
    trail = 0.5 * stages[:, :, 1] + stages[:, :, 2]
    zero = jnp.zeros_like(lead[:, :1])
    return jnp.concatenate([lead, zero], axis=1) + jnp.concatenate([zero, trail], axis=1)


def _injected(d_q, sig, length, stride):
    """The angle rows' cotangents ``(L + 1, m, p)`` of a segment: ``Ĵ``'s angle rows ``d_q`` ``(L + 1, n, p)`` over
    ``σ²`` at the residual samples (every ``stride``-th before the last), zero elsewhere and on the velocities."""
    rows = (jnp.arange(length + 1) % stride == 0) & (jnp.arange(length + 1) < length)  # the residual samples
    inject = jnp.where(rows[:, None, None], d_q / sig[None, :, None] ** 2, 0.0)
    return jnp.concatenate([inject, jnp.zeros_like(inject)], axis=1)


@functools.partial(jax.jit, static_argnames=("regressor", "known", "sample_step", "stride", "substeps"))
def _torque_rows(
    theta,
    initial_states,
    torques,
    sigma,
    follow,
    next_follow,
    gap_weight,
    from_pass=None,
    *,
    regressor,
    known,
    sample_step,
    stride,
    substeps,
):
    """Per segment of a chunk, ``Ĵ``'s rows pulled back to its torque samples: ``(C, p, L + 1, n)`` (module
    docstring). ``follow`` ``(C, m, p)`` = ``T_s``, ``next_follow`` = ``T_{s+1}`` (zero where the segment links
    on to none), ``gap_weight`` ``(C, m)`` = ``W²`` (zero there too). ``from_pass``: the pass's own sensitivities at
    the solution, ``(rows, end_θ, end_x)`` (``Blocks.rows``: ``∂q/∂(θ, y₀) / σ`` at the residual samples, ``(C, k,
    p + m)``, and the end state's Jacobians), so that only the states are simulated again (for the steps'
    linearisation); ``None``: the sensitivities computed here, on the generic path (a program run once per fit, where
    the unrolled one compiled 26 s against 5.5 s). The two give the same numbers to round-off (tested); ``None``
    and a tuple are two programs."""
    p = theta.shape[0]
    step = functools.partial(model_step, regressor, theta, sample_step=sample_step, known=known, substeps=substeps)

    def segment(y0, tau_s, sig, t_s, t_next, w2, *kept):
        length, n = tau_s.shape[0], tau_s.shape[-1]
        if kept:  # Ĵ's rows from the pass's: the angles and the end state moved by (e_i, T_s[:, i])
            r, e_theta, e_x = kept
            states = simulate_segments(regressor, theta, y0[None], tau_s[None], sample_step, known, substeps)[0]
            d_q = (r[..., :p] + r[..., p:] @ t_s).reshape(-1, n, p) * sig[None, :, None]  # (k / n, n, p), unscaled
            d_q = jnp.zeros((length + 1, n, p), d_q.dtype).at[:length:stride].set(d_q)
        else:
            states, sens_q, sens_end = segment_sensitivities(
                regressor, theta, y0, tau_s, sample_step, known, substeps, unrolled_path=False
            )
            d_q, e_theta, e_x = sens_q[..., :p] + sens_q[..., p:] @ t_s, sens_end[:, :p], sens_end[:, p:]
        inject = _injected(d_q, sig, length, stride)
        end = w2[:, None] * (e_theta + e_x @ t_s - t_next)  # the gap's cotangent (m, p)
        return _pulled_back(step, states, tau_s, inject, end)

    return jax.vmap(segment)(initial_states, torques, sigma, follow, next_follow, gap_weight, *(from_pass or ()))


def _angle_information(blocks: Blocks, follow: np.ndarray) -> np.ndarray:
    """``Ĵ_aᵀĴ_a = Σ_s (R_θ + R_x T_s)ᵀ(R_θ + R_x T_s)`` from a pass's blocks (angle rows only)."""
    cross = np.einsum("spm,smq->pq", blocks.rtx, follow)
    return blocks.rtr + cross + cross.T + np.einsum("smp,smk,skq->pq", follow, blocks.rxx, follow)


def torque_response(
    problem: ShootingProblem,
    logs: Sequence[FilteredLog],
    ne: NormalEquations,
    request: PassRequest,
    blocks: Blocks | None = None,
) -> tuple[list[np.ndarray], Factor, np.ndarray]:
    """``(K, factor, T)`` at the solution of ``problem`` (``request``: its pass there, which holds ``θ`` and the
    states) with the normal equations ``ne`` in ``θ`` there (module docstring): ``K`` per log ``(N, p, n)``,
    ``Ĵᵀ ∂r/∂τ F`` for the log's raw torque samples (a
    change ``δτ`` of the raw torque moves the estimate by ``−S⁻¹ Σ_t K[t] δτ[t]`` to first order), ``factor``
    the ``shooting.Factor`` of ``ne``, ``T`` ``(S, m, p)`` the states' best response ``−C⁻¹Bᵀ`` per segment.
    ``blocks``: that pass's, whose angle rows (``Blocks.rows``, where it kept them) spare computing the segments'
    sensitivities again (one rich Panda fit's covariance: 0.70 → 0.30 s; docs/performance.md)."""
    factor = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x))
    segments, m = request.states.shape
    p = request.theta.shape[0]
    follow = -factor._c_inv_bt.reshape(segments, m, p)
    linked = problem.linked
    next_follow = np.where(linked[:, None, None], np.roll(follow, -1, axis=0), 0.0)
    gap_weight = np.where(linked[:, None], problem.scale_c[None, :] ** 2, 0.0)
    size = chunk_size(segments, problem.chunk_segments, host_threads())
    fill = padded_rows(segments, size)
    per_segment = (
        np.asarray(request.states),
        request.torques,
        np.repeat(request.sigma[None], segments, axis=0),
        follow,
        next_follow,
        gap_weight,
    )
    kept = blocks is not None and blocks.rows is not None
    if kept:
        per_segment += (blocks.rows, blocks.e_theta, blocks.e_x)
    arrays = tuple(a[fill] for a in per_segment)
    theta_j = jnp.asarray(request.theta)

    def run(lo):
        chunk = [jnp.asarray(a[lo : lo + size]) for a in arrays]
        from_pass = tuple(chunk[6:]) if kept else None
        return np.asarray(_torque_rows(theta_j, *chunk[:6], from_pass, **request.static))

    rows = np.concatenate(thread_map(run, range(0, fill.size, size)))[:segments]
    length, first, response = problem.length, 0, []
    for d in logs:
        starts = segment_starts(d, length)
        k = np.zeros((d.t.shape[0], p, d.joints))
        for s, start in enumerate(starts):
            k[start : start + length + 1] += np.moveaxis(rows[first + s], 0, 1)
        first += len(starts)
        response.append(d.band(k))
    return response, factor, follow


def input_noise_covariance(
    problem: ShootingProblem,
    logs: Sequence[FilteredLog],
    ne: NormalEquations,
    blocks: Blocks,
    request: PassRequest,
    torque_std: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(covariance, inverse)`` ``(p, p)`` of output error's ``θ`` at the solution (``request``, as
    ``torque_response``) with the normal equations ``ne`` in ``θ`` and the pass's ``blocks`` there (module
    docstring): ``S⁻¹ (Ĵ_aᵀĴ_a + K Σ_e Kᵀ) S⁻¹``, ``torque_std`` ``(n,)`` the reading noise's ``σ_τ`` per joint
    [N m]; and ``S⁻¹`` (``shooting.sandwich``)."""
    response, factor, follow = torque_response(problem, logs, ne, request, blocks)
    meat = _angle_information(blocks, follow)
    for k in response:
        k = k * np.asarray(torque_std)[None, None, :]
        meat += np.einsum("tpj,tqj->pq", k, k)
    return sandwich(factor, meat)
