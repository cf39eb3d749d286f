"""Estimators: one module each for simulated records, all with the interface of ``base``; and the
estimator classes (``interface``): one equinox class per estimator, called on a simulated record or
on measured logs (``jaxid.estimate.logs`` holds the log-side kernels)."""

from .base import (
    CONVERGED,
    ESTIMATOR_STATUS,
    FAILED,
    MAX_ITERATIONS,
    SINGULAR,
    UNSTRUCTURED_NAMES,
    Estimate,
    frequency_response,
    get_estimator,
    impedance_model,
    inverse_2x2,
    is_affine,
    linear_system,
    parameter_values,
    register,
    resolve_unknowns,
    small_qr,
    upper_triangular_inverse,
)
from .equation_error import equation_error, equation_error_fit, line_variance
from .ml import gauss_newton_covariance, levenberg_marquardt, ml, ml_fit, output_error_residual
from .paper import PaperFit, paper, paper_fit, paper_masses, paper_template_parameters, paper_template_response

__all__ = [
    "CONVERGED",
    "ESTIMATOR_STATUS",
    "ESTIMATORS",
    "FAILED",
    "MAX_ITERATIONS",
    "SINGULAR",
    "UNSTRUCTURED_NAMES",
    "Estimate",
    "frequency_response",
    "get_estimator",
    "impedance_model",
    "inverse_2x2",
    "is_affine",
    "linear_system",
    "parameter_values",
    "register",
    "resolve_unknowns",
    "small_qr",
    "upper_triangular_inverse",
    "equation_error",
    "equation_error_fit",
    "line_variance",
    "gauss_newton_covariance",
    "levenberg_marquardt",
    "ml",
    "ml_fit",
    "output_error_residual",
    "PaperFit",
    "paper",
    "paper_fit",
    "paper_masses",
    "paper_template_parameters",
    "paper_template_response",
]

# Time-domain baselines and the nonlinear output-error estimator register themselves on import.
from . import (
    nonlinear,
    rls,  # noqa: E402,F401
)

# The estimators as equinox modules (options as fields, facts as class variables) and the
# name -> class table ``ESTIMATORS``; the functions above stay the documented API.
from .interface import (  # noqa: E402
    ESTIMATORS,
    AbstractEstimator,
    check_options,
    estimator_class,
    make_estimator,
    names_for,
)
from .kalman import records as ekf
from .linearised_estimators import ML, EquationError, Paper
from .nonlinear_estimators import EKF, UKF, NonlinearOutputError, OutputError, OutputErrorConsistent
from .regressor_estimators import RLS, IdimIV, IdimLS, IdimLSBounded, IdimLSConsistent

__all__ += [
    "AbstractEstimator",
    "Paper",
    "EquationError",
    "ML",
    "NonlinearOutputError",
    "RLS",
    "IdimLS",
    "IdimLSBounded",
    "IdimLSConsistent",
    "IdimIV",
    "EKF",
    "UKF",
    "OutputError",
    "OutputErrorConsistent",
    "estimator_class",
    "make_estimator",
    "check_options",
    "names_for",
]
