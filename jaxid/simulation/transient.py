"""How many periods of transient to discard: from the slowest decay rate of the linearisation.

The initial transient is of the order of the response itself and dies like ``e^{−σ t}`` with
``σ = min |Re λ|`` over the linearised arm's poles, so ``D = ⌈ln(1/tolerance) / (σ T)⌉`` whole
periods bring it below ``tolerance`` (relative). A batch gets one count per trial, from that
trial's own parameters (``transient_periods_each``), so a trial's record never depends on the
batch it shares.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from ..excitation.multisine import Multisine
from ..model import TwoLinkArm
from .linearisation import linearise

__all__ = ["transient_periods", "transient_periods_each"]


def transient_periods(
    arm: TwoLinkArm,
    excitation: Multisine,
    q0: ArrayLike = (0.0, 0.0),
    tolerance: float = 1e-10,
) -> int:
    """Whole periods to discard so the slowest transient ``e^{−σ t}`` falls below ``tolerance``.

    ``σ`` is the smallest decay rate ``min |Re λ|`` of the linearisation at ``q0`` (the smallest
    over all arms if ``arm`` is batched: a count that suits every one of them; use
    ``transient_periods_each`` for one count per trial). Needs concrete (not traced) parameters;
    raises ``ValueError`` if the linearisation is not stable (then give ``discard_periods``
    yourself and add feedback).
    """
    return int(np.max(transient_periods_each(arm, excitation, q0, tolerance)))


def transient_periods_each(
    arms: TwoLinkArm,
    excitation: Multisine,
    q0: ArrayLike = (0.0, 0.0),
    tolerance: float = 1e-10,
) -> np.ndarray:
    """``transient_periods`` of each arm of a batch, an integer array ``(B,)`` (``(1,)`` for one
    arm); each count depends only on that arm's parameters. Raises like ``transient_periods``."""
    q0 = jnp.asarray(q0, dtype=float)
    rates = np.atleast_1d(np.asarray(_decay_rates(arms, q0)))
    sigma = float(np.min(rates))
    if not sigma > 0:
        raise ValueError(
            f"The linearisation at q0={list(np.asarray(q0))} is not asymptotically stable (slowest decay "
            f"rate {sigma:.3g} 1/s): without friction or at an unstable posture there is no steady state. "
            "Add viscous friction, choose a stable q0, or pass discard_periods explicitly."
        )
    factor = math.log(1 / tolerance)
    return np.asarray([max(1, math.ceil(factor / float(s) / excitation.period)) for s in rates], dtype=np.int64)


@jax.jit
def _decay_rates(arm, q0):
    if arm.masses.ndim == 1:
        return linearise(arm, q0).slowest_decay_rate()
    return jax.vmap(lambda a: linearise(a, q0).slowest_decay_rate())(arm)
