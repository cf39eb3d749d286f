"""The common estimator interface and registry.

Every estimator is a function

    estimator(record, excitation, nominal, *, unknowns, q0=(0, 0), noise_std=None, **options) -> Estimate

- ``record``: a measured ``Record`` (whole periods; angles possibly noisy);
- ``excitation``: the ``Multisine`` that was applied (its lines and period);
- ``nominal``: a ``TwoLinkArm`` holding the *known* parameters (lengths, centre-of-mass
  distances, …); the values it holds for the unknowns are ignored except as a starting point
  where an estimator needs one (documented per estimator);
- ``unknowns``: static tuple of parameter names, e.g. ``("m1", "m2", "fv1", "fv2")``;
- ``noise_std``: the angle noise standard deviation if known, else estimated from the data.

It is pure, ``jit``-compatible and ``vmap``-able over records (batch the record, keep the rest
shared). It returns an ``Estimate`` with the estimate, its covariance and a status code; a
failed trial has ``status != CONVERGED`` (the value may then be anything and is never to be
used silently).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, Float, Int

__all__ = ["Estimate", "CONVERGED", "FAILED", "MAX_ITERATIONS", "SINGULAR", "ESTIMATOR_STATUS", "register", "get_estimator", "ESTIMATORS"]

CONVERGED, FAILED, MAX_ITERATIONS, SINGULAR = 0, 1, 2, 3
ESTIMATOR_STATUS = {CONVERGED: "ok", FAILED: "failed", MAX_ITERATIONS: "max_iterations", SINGULAR: "singular"}


class Estimate(eqx.Module):
    """An estimate of the unknown parameters.

    Attributes:
        value: ``(p,)`` estimate, in the order of ``names``.
        covariance: ``(p, p)`` estimated covariance of ``value`` (from the data's noise level).
        status: integer status (``CONVERGED``, ``FAILED``, ``MAX_ITERATIONS``, ``SINGULAR``).
        names: static tuple of parameter names.
        history: optional ``(n, p)`` estimate over time/iterations (recursive estimators).
    """

    value: Float[Array, "p"]
    covariance: Float[Array, "p p"]
    status: Int[Array, ""]
    names: tuple[str, ...] = eqx.field(static=True)
    history: Float[Array, "n p"] | None = None


ESTIMATORS: dict[str, Callable[..., Estimate]] = {}


def register(name: str):
    """Decorator registering an estimator under ``name`` (used by the study runner and CLI)."""

    def wrap(fn):
        ESTIMATORS[name] = fn
        return fn

    return wrap


def get_estimator(name: str) -> Callable[..., Estimate]:
    """The estimator registered as ``name``; raises ``ValueError`` listing the names (with a suggestion)."""
    if name not in ESTIMATORS:
        close = difflib.get_close_matches(name, list(ESTIMATORS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"Unknown estimator {name!r}; available: {sorted(ESTIMATORS)}.{hint}")
    return ESTIMATORS[name]
