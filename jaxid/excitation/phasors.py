"""Phasors to time: the one synthesis ``x(t) = Re{Σ_k X_k e^{jω_k t}}``.

Convention (``docs/``, DESIGN §2): a line of angular frequency ``ω`` with phasor ``X = C − jD``
is the signal ``Re{X e^{jωt}} = C cos ωt + D sin ωt``. Used by the exact linear steady state,
the shooting start, the linear Cramér–Rao response, the paper's template and the study's
coefficient table.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float

__all__ = ["synthesise", "respond"]


def synthesise(
    phasors: Complex[ArrayLike, "*b L C"],
    omega: Float[ArrayLike, " L"],
    t: Float[ArrayLike, " N"],
    *,
    derivative: int = 0,
) -> Float[Array, "*b N C"]:
    """``Re{Σ_k (jω_k)^d X_k e^{jω_k t}}`` for phasors ``X`` ``(..., L, C)`` on lines ``omega`` [rad/s].

    Args:
        phasors: complex ``(..., L, C)`` (``C`` channels, e.g. the two joints; leading axes batch).
        omega: ``(L,)`` angular frequencies [rad/s].
        t: ``(N,)`` times [s].
        derivative: static order ``d`` of the time derivative (0: the signal, 1: its rate, …).

    Returns the real ``(..., N, C)`` signal (no DC term: add the operating point yourself).
    Pure arithmetic; ``jit``/``vmap``/``grad``-compatible.
    """
    x = jnp.asarray(phasors)
    omega = jnp.asarray(omega)
    if derivative:
        x = (1j * omega[:, None]) ** derivative * x
    t = jnp.asarray(t)
    rotation = jnp.exp(1j * omega[None, :] * t[:, None])  # (N, L)
    return jnp.real(rotation @ x)


def respond(response: Complex[ArrayLike, "*b L C C"], inputs: Complex[ArrayLike, "L C"]) -> Complex[Array, "*b L C"]:
    """Output phasors ``Y_k = H(jω_k) U_k`` from a frequency response ``(..., L, C, C)`` and
    input phasors ``(L, C)``."""
    return jnp.einsum("...kij,kj->...ki", jnp.asarray(response), jnp.asarray(inputs))
