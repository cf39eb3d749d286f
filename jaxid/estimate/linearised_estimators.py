"""The estimator classes of the linearised model (``model = "linearised"``): ``Paper``, ``EquationError``
and ``ML``, the frequency-domain fits of a simulated periodic record (records only, whole periods).

The design (options as fields, facts as class variables) is ``jaxid.estimate.interface``'s module
docstring; the name table is there too. The regressor's estimators are
``jaxid.estimate.regressor_estimators``, the nonlinear model's ``jaxid.estimate.nonlinear_estimators``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

from .abstract import AbstractEstimator, Bound, History, Model
from .abstract import static_float_option as _static_float
from .abstract import static_option as _static
from .base import Estimate
from .equation_error import equation_error
from .ml import ml
from .paper import paper

__all__ = ["Paper", "EquationError", "ML"]

SpectrumMethod = Literal["projection", "lstsq"]
SpectralWeighting = Literal["pooled", "per_line"]


class Paper(AbstractEstimator):
    """The paper's route (``jaxid.estimate.paper``): masses from per-joint template fits."""

    name: ClassVar[str] = "paper"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(paper)
    model: ClassVar[Model] = "linearised"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = False
    uses_noise_std: ClassVar[bool] = False
    needs_whole_periods: ClassVar[bool] = True

    method: SpectrumMethod = _static("projection")
    allow_shared_lines: bool = _static(False)


class EquationError(AbstractEstimator):
    """Frequency-domain equation-error least squares (``jaxid.estimate.equation_error``)."""

    name: ClassVar[str] = "equation_error"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(equation_error)
    model: ClassVar[Model] = "linearised"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = False
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = True

    method: SpectrumMethod = _static("projection")
    weighting: SpectralWeighting = _static("pooled")


class ML(AbstractEstimator):
    """Frequency-domain maximum likelihood (``jaxid.estimate.ml``); tolerances are static."""

    name: ClassVar[str] = "ml"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(ml)
    model: ClassVar[Model] = "linearised"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = False
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = True

    method: SpectrumMethod = _static("projection")
    weighting: SpectralWeighting = _static("pooled")
    start: Literal["equation_error", "nominal"] = _static("equation_error")
    max_steps: int = _static(100)
    rtol: float = _static_float(1e-10)
    atol: float = _static_float(1e-12)
    solver: Literal["levenberg_marquardt", "gauss_newton"] = _static("levenberg_marquardt")
