"""Estimators: one module each, all with the interface of ``base``."""

from .base import CONVERGED, ESTIMATOR_STATUS, ESTIMATORS, FAILED, MAX_ITERATIONS, SINGULAR, Estimate, get_estimator, register
