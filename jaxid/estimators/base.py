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
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..linalg import inverse_2x2, small_qr, upper_triangular_inverse
from ..linearisation import LinearArm, linearise
from ..model import LINEAR_PARAMETERS, PARAMETER_NAMES, TwoLinkArm, validate_unknowns
from ..types import ESTIMATOR_STATUSES, Estimate, Status

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


# -- parameterisations of the linearised arm ----------------------------------------------------
#
# The frequency-domain estimators and the Cramér–Rao bound work on the linearisation
# ``D0 δq'' + Fv δq' + K0 δq = δτ``. Its unknowns are either *physical* parameters of the arm
# (any of ``PARAMETER_NAMES``; the linearisation is re-derived by autodiff for each value), or an
# *unstructured* set of entries of ``D0``, ``K0`` and ``Fv`` themselves (``UNSTRUCTURED_NAMES``;
# ``D0`` and ``K0`` are symmetric, ``Fv`` diagonal), useful when the arm's geometry is not
# trusted (e.g. the table1 arm with unknown inertias and centres of mass).

#: Entries of the linearisation that an unstructured fit may take as unknowns: ``d11, d12, d22``
#: of ``D0`` [kg m²], ``k11, k12, k22`` of ``K0`` [N m/rad] and ``fv1, fv2`` of ``Fv`` [N m s/rad].
UNSTRUCTURED_NAMES: tuple[str, ...] = ("d11", "d12", "d22", "k11", "k12", "k22", "fv1", "fv2")

_MATRIX_ENTRIES = {
    "d11": ("mass", 0, 0),
    "d12": ("mass", 0, 1),
    "d22": ("mass", 1, 1),
    "k11": ("stiffness", 0, 0),
    "k12": ("stiffness", 0, 1),
    "k22": ("stiffness", 1, 1),
    "fv1": ("damping", 0, 0),
    "fv2": ("damping", 1, 1),
}


def resolve_unknowns(unknowns: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """Check a set of unknowns; return ``(unknowns, unstructured)``.

    The set is *unstructured* when it names any entry of ``D0`` or ``K0`` (``d11 … k22``); then
    every name must be in ``UNSTRUCTURED_NAMES`` (``fv1``/``fv2`` are the diagonal of ``Fv``).
    Otherwise every name must be a physical parameter (``PARAMETER_NAMES``). Raises
    ``ValueError`` saying what to change.
    """
    if isinstance(unknowns, str):
        unknowns = (unknowns,)
    unknowns = tuple(unknowns)
    matrix = [u for u in unknowns if u in _MATRIX_ENTRIES and u not in ("fv1", "fv2")]
    if matrix:
        return validate_unknowns(unknowns, UNSTRUCTURED_NAMES), True
    return validate_unknowns(unknowns, PARAMETER_NAMES), False


def linear_system(
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    theta: Float[ArrayLike, " p"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> LinearArm:
    """The linearisation at ``q0`` of ``nominal`` with the unknowns set to ``theta``.

    Physical unknowns are written into the arm and the arm is linearised by autodiff; unstructured
    unknowns overwrite entries of the nominal linearisation (symmetrically for ``d12``, ``k12``).
    Traceable in ``theta`` (this is the model every frequency-domain estimator fits, and what the
    Cramér–Rao bound differentiates).
    """
    unknowns, unstructured = resolve_unknowns(unknowns)
    theta = jnp.asarray(theta)
    if theta.shape != (len(unknowns),):
        raise ValueError(f"theta must have shape ({len(unknowns)},) for {list(unknowns)}, got {theta.shape}.")
    if not unstructured:
        return linearise(nominal.with_parameters(unknowns, theta), q0)
    lin = linearise(nominal, q0)
    for i, name in enumerate(unknowns):
        field, r, c = _MATRIX_ENTRIES[name]
        m = getattr(lin, field).at[r, c].set(theta[i]).at[c, r].set(theta[i])
        lin = eqx.tree_at(lambda a, field=field: getattr(a, field), lin, m)
    return lin


def parameter_values(
    arm: TwoLinkArm, unknowns: Sequence[str], q0: Float[ArrayLike, " 2"] = (0.0, 0.0)
) -> Float[Array, " p"]:
    """The true values of ``unknowns`` for ``arm`` (physical or unstructured; see ``linear_system``)."""
    unknowns, unstructured = resolve_unknowns(unknowns)
    if not unstructured:
        return arm.parameter_vector(unknowns)
    lin = linearise(arm, q0)
    return jnp.stack(
        [getattr(lin, _MATRIX_ENTRIES[n][0])[_MATRIX_ENTRIES[n][1], _MATRIX_ENTRIES[n][2]] for n in unknowns]
    )


def frequency_response(system: LinearArm, omega: Float[ArrayLike, " L"]) -> Array:
    """``H(jω) = (K0 − ω² D0 + jω Fv)⁻¹`` by the closed-form 2x2 inverse, shape ``(L, 2, 2)``.

    Same values as ``LinearArm.frequency_response``, but without a batched LAPACK call: with
    ``jnp.linalg.inv`` inside an optimiser's ``while_loop`` under a large ``vmap`` (a few hundred
    trials), XLA:CPU was seen to deadlock (jax 0.10.2, 2 threads). Also faster.
    """
    return inverse_2x2(system.impedance(omega))


def is_affine(unknowns: Sequence[str]) -> bool:
    """Whether the impedance ``Z(ω; θ)`` is affine in ``θ`` (masses, inertias, friction, or
    unstructured entries; not lengths or centres of mass)."""
    unknowns, unstructured = resolve_unknowns(unknowns)
    return unstructured or all(u in LINEAR_PARAMETERS for u in unknowns)


def impedance_model(
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    omega: Float[ArrayLike, " L"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> Callable[[Array], Array]:
    """``θ ↦ Z(ω_k; θ)``, shape ``(L, 2, 2)`` complex, for the lines ``omega`` [rad/s].

    When ``Z`` is affine in ``θ`` (``is_affine``) it is precomputed once as
    ``Z0 + Σ_i θ_i Z_i`` (exact), which keeps iterative fits cheap; otherwise the arm is
    re-linearised at every call.
    """
    unknowns, _ = resolve_unknowns(unknowns)
    omega = jnp.asarray(omega)
    q0 = jnp.asarray(q0, dtype=float)

    def full(theta):
        return linear_system(nominal, unknowns, theta, q0).impedance(omega)

    if not is_affine(unknowns):
        return full

    def split(theta):
        z = full(theta)
        return jnp.stack([jnp.real(z), jnp.imag(z)])

    zero = jnp.zeros(len(unknowns))
    z0 = full(zero)
    jac = jax.jacfwd(split)(zero)  # (2, L, 2, 2, p), exact for an affine map
    zi = jac[0] + 1j * jac[1]
    return lambda theta: z0 + zi @ theta.astype(zi.dtype)
