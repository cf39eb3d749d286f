"""Physically consistent inertial parameters of a ``SerialArm`` and least squares over them.

- ``parametrisation``: the pseudo-inertia test (Wensing et al. 2017), the log-Cholesky map
  (Rucker & Wensing 2022) and the ``exp`` map of the joint parameters, the projection into the
  consistent set and the checks (``is_physically_consistent``, ``link_eigenvalues``);
- ``least_squares``: ``consistent_least_squares``, regularised least squares over the consistent
  set by an interior-point (barrier) method on the LMIs that stops on a certified duality gap
  (the log-Cholesky trust-region Newton iteration as an option), with the estimate's own
  covariance (least squares on the active face, optionally a Newey–West sandwich).

The public names are re-exported here: import them from ``jaxid.estimate.consistency``.

LAPACK. The QR reduction, the start's projection and the dual bound (``eigh`` of 4×4 blocks),
the barrier's 4×4 Cholesky factors and inverses, the covariance's ``eigh`` and inverse, the
``s × s`` Cholesky factorisations of the Newton steps and the checks (``is_physically_consistent``,
``link_eigenvalues``: ``eigvalsh``) call LAPACK on CPU; ``consistent_least_squares`` is not one of
the batched study estimators that ``tests/test_lapack.py`` keeps LAPACK-free.
"""

from .least_squares import DEFAULT_GAP_TOLERANCE, DEFAULT_REGULARISATION, ConsistentEstimate, consistent_least_squares
from .parametrisation import (
    LOG_CHOLESKY_NAMES,
    is_physically_consistent,
    link_eigenvalues,
    log_cholesky_factor,
    log_cholesky_from_standard,
    project_to_consistent,
    pseudo_inertia,
    standard_from_log_cholesky,
    standard_from_pseudo_inertia,
    standard_from_unconstrained,
    unconstrained_from_standard,
)

__all__ = [
    "LOG_CHOLESKY_NAMES",
    "DEFAULT_REGULARISATION",
    "DEFAULT_GAP_TOLERANCE",
    "ConsistentEstimate",
    "pseudo_inertia",
    "standard_from_pseudo_inertia",
    "log_cholesky_factor",
    "standard_from_log_cholesky",
    "log_cholesky_from_standard",
    "standard_from_unconstrained",
    "unconstrained_from_standard",
    "project_to_consistent",
    "link_eigenvalues",
    "is_physically_consistent",
    "consistent_least_squares",
]
