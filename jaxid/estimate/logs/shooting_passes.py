"""One pass of multiple shooting over the segments of ``jaxid.estimate.logs.output_error``: the compiled
chunk programs (``_shooting_blocks``: residuals and the Jacobian's blocks by forward sensitivities;
``_shooting_residuals``: residuals only) and the padding of the segments to whole chunks
(``_Chunks``). The design is ``output_error``'s module docstring ("Streamed normal equations")."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..._platform import thread_map
from .sensitivities import segment_sensitivities
from .shooting import Blocks
from .stepping import simulate_segments


class _Chunks:
    """The segments' torques and measured angles, padded to whole chunks, and one pass over them.

    A fit of ``S`` segments runs in chunks of ``min(chunk_segments, 2^⌈log₂ S⌉)`` segments; the last
    chunk is filled by repeating the last segment (its blocks are computed and dropped), so a log's
    length never sets a compiled shape."""

    def __init__(self, torques: np.ndarray, measured: np.ndarray, chunk_segments: int):
        self.segments = torques.shape[0]
        self.size = min(chunk_segments, 1 << (self.segments - 1).bit_length())
        padded = -(-self.segments // self.size) * self.size
        self.fill = np.minimum(np.arange(padded), self.segments - 1)  # padded → real segment
        self.torques = torques[self.fill]
        self.measured = measured[self.fill]

    def _dispatch(self, program, theta, states, sigma, static) -> list:
        """``program`` on every chunk, its outputs as numpy arrays. The chunks are independent programs,
        called from one thread per core (``jaxid._platform.thread_map``: a program runs on the thread that
        calls it); the results are the same as one after another."""
        theta = jnp.asarray(theta)
        states = states[self.fill]

        def run(lo):
            out = program(
                theta,
                jnp.asarray(states[lo : lo + self.size]),
                jnp.asarray(self.torques[lo : lo + self.size]),
                jnp.asarray(self.measured[lo : lo + self.size]),
                sigma,
                **static,
            )
            return jax.tree.map(np.asarray, out)

        return thread_map(run, range(0, self.fill.size, self.size))

    def residuals(self, theta, states, sigma, static) -> tuple[np.ndarray, np.ndarray]:
        """``(residuals (S, k), end states (S, m))`` of every segment at ``(θ, x)``: a pass without the Jacobian."""
        pending = self._dispatch(_shooting_residuals, theta, states, sigma, static)
        res, ends = (np.concatenate([r[i] for r in pending])[: self.segments] for i in range(2))
        return res, ends

    def pass_(self, theta, states, sigma, static) -> Blocks:
        """The blocks of every segment at ``(θ, x)`` (``Blocks``), one compiled call per chunk."""
        out = self._dispatch(_shooting_blocks, theta, states, sigma, static)
        blocks = Blocks(*(np.concatenate(parts)[: self.segments] for parts in zip(*(b[:-1] for b in out), strict=True)))
        # Summed here, over the real segments in one order: the chunk size does not change the sums.
        return blocks._replace(rtr=blocks.rtr.sum(0), rtg=blocks.rtg.sum(0), scores=blocks.rtg)


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
    return jax.vmap(one, (None, 0, 0, 0, None))(theta, initial_states, torques, measured, sigma)


@functools.partial(jax.jit, static_argnames=("regressor", "known", "sample_step", "stride", "substeps"))
def _shooting_blocks(
    theta, initial_states, torques, measured, sigma, *, regressor, known, sample_step, stride, substeps=1
) -> Blocks:
    """One chunk's blocks (``Blocks``, per segment; ``rtr``, ``rtg`` too, summed by the caller): each segment
    simulated with its sensitivities to ``(θ, y₀)`` (``sensitivities.segment_sensitivities``, ``vmap`` over
    the chunk), the residuals from its states. Compiled once per model (``regressor``, ``known``: static, hashed by
    identity), step, stride and chunk shape: every pass, chunk and log of the same segment length
    shares one program."""

    def segment(y0, tau_s, q_s):
        states, sens_q, sens_end = segment_sensitivities(regressor, theta, y0, tau_s, sample_step, known, substeps)
        res = (states[:-1:stride, :n] - q_s) / sigma
        jac = (sens_q[:-1:stride] / sigma[:, None]).reshape(-1, sens_q.shape[-1])
        return res.reshape(-1), states[-1], jac, sens_end

    n, p = initial_states.shape[-1] // 2, theta.shape[-1]
    res, ends, jac, e_jac = jax.vmap(segment)(initial_states, torques, measured)
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
    )
