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

import functools
from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..linalg import inverse_2x2, small_qr, upper_triangular_inverse
from ..simulation.linearisation import (
    UNSTRUCTURED_NAMES,
    LinearArm,
    impedance_model,
    is_affine,
    linear_system,
    parameter_values,
    resolve_unknowns,
)
from ..types import (
    ESTIMATOR_STATUSES,
    Estimate,
    Status,
    any_traced,
    compiled_when_concrete,
    did_you_mean,
    require_float64,
)

__all__ = [
    "Estimate",
    "CONVERGED",
    "FAILED",
    "MAX_ITERATIONS",
    "SINGULAR",
    "ESTIMATOR_STATUS",
    "register",
    "get_estimator",
    "ESTIMATORS",
    "UNSTRUCTURED_NAMES",
    "resolve_unknowns",
    "linear_system",
    "parameter_values",
    "frequency_response",
    "impedance_model",
    "is_affine",
    "inverse_2x2",
    "small_qr",
    "upper_triangular_inverse",
]

CONVERGED, FAILED, MAX_ITERATIONS, SINGULAR = Status.CONVERGED, Status.FAILED, Status.MAX_ITERATIONS, Status.SINGULAR
ESTIMATOR_STATUS = ESTIMATOR_STATUSES


ESTIMATORS: dict[str, Callable[..., Estimate]] = {}


def register(name: str):
    """Decorator registering an estimator under ``name`` (used by the study runner and CLI).

    A call on concrete inputs (outside ``jit``/``vmap``) runs the estimator compiled as one
    program (``eqx.filter_jit``: arrays traced, other arguments static), not op by op: the same
    numbers, 1.5-7× sooner on a first call (``scripts/bench_eager.py`` on the README quickstart's
    record: ``ml`` 10.9 → 3.2 s, ``nonlinear_oe`` 16.2 → 10.0 s), as each of its loops and hundreds
    of small operations would otherwise be compiled one by one. A later call with the same shapes
    and static arguments reuses the program; ``noise_std`` given as a number is passed as an
    array, so a new value does not recompile. Under a transformation (traced inputs) the function
    is called as it is.
    """

    def wrap(fn):
        run = compiled_when_concrete(fn)

        @functools.wraps(fn)
        def estimator(*args, **kwargs):
            require_float64(name)  # the estimators' tolerances are far below float32's reach
            sigma = kwargs.get("noise_std")
            if isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and not any_traced((args, kwargs)):
                # traced (every estimator takes a traced σ, as in a study): a new σ does not recompile
                kwargs = {**kwargs, "noise_std": jnp.asarray(kwargs["noise_std"], dtype=float)}
            return run(*args, **kwargs)

        ESTIMATORS[name] = estimator
        return estimator

    return wrap


def get_estimator(name: str) -> Callable[..., Estimate]:
    """The estimator registered as ``name``; raises ``ValueError`` listing the names (with a suggestion)."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"Unknown estimator {name!r}; available: {sorted(ESTIMATORS)}.{did_you_mean(name, ESTIMATORS)}"
        )
    return ESTIMATORS[name]


# The linear parameterisation (``resolve_unknowns``, ``linear_system``, ``parameter_values``,
# ``impedance_model``, ``is_affine``, ``UNSTRUCTURED_NAMES``) lives in ``jaxid.simulation.linearisation``;
# the names are re-exported here.


def frequency_response(system: LinearArm, omega: Float[ArrayLike, " L"]) -> Array:
    """``H(jω)``, shape ``(L, 2, 2)``: ``system.frequency_response(omega)`` (closed form, no LAPACK)."""
    return system.frequency_response(omega)
