"""Estimators as equinox modules: options are fields, facts about the estimator are class variables.

Each estimator function (``ml``, ``rls``, ``ekf``, …) stays the documented public API. The class
layer here gives every estimator the same shape:

    estimator = RLS(forgetting=0.999)               # options, checked when constructed
    est = estimator(record, excitation, nominal, unknowns=("m1", "m2", "fv1", "fv2"), noise_std=0.02)

- **Options are fields.** Values that only enter the arithmetic (forgetting factor, initial
  covariance, prior and process-noise scales, guesses, the measurement offset) are JAX array
  leaves: a sweep over them under ``eqx.filter_jit`` compiles once. Values that set a shape, a
  branch or a loop length (methods, weightings, cut-offs, iteration counts, history lengths) are
  static fields; changing them recompiles. Defaults equal the function's defaults, so
  ``ML()(record, …)`` is ``ml(record, …)``.
- **Facts are class variables** that callers read instead of keeping lists of names:
  ``model`` (the model fitted), ``history`` (what ``Estimate.history`` holds), ``bound`` (the
  Cramér–Rao bound its spread is compared with), ``takes_noise_mean`` (the angles' noise mean
  enters it and must be subtracted), ``uses_noise_std``, ``needs_whole_periods``.
- **One call signature** ``estimator(record, excitation, nominal, *, unknowns, q0=(0, 0),
  noise_std=None, noise_mean=None) -> Estimate``. ``noise_mean`` [rad] is the known mean of the
  angle noise: estimators with ``takes_noise_mean`` subtract it (as their ``measurement_offset``
  option, which wins if set); the others ignore it (the frequency-domain fits do not use the DC
  line, and ``nonlinear_oe`` fits an offset).
- **One name table** ``ESTIMATORS`` (name → class); ``make_estimator(name, options)`` builds one
  from a TOML table, with one-line errors naming a bad option and the allowed ones.

The base class ``AbstractEstimator``, the traced/static field helpers and the type checks of
options live in ``jaxid.estimators.abstract``; this module holds the estimator classes and the
name table.

Under ``jit``/``vmap`` an estimator module behaves like the function it wraps (batch the record,
close over or ``eqx.filter_jit`` the module).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from jaxtyping import Array

from ..types import did_you_mean
from .abstract import AbstractEstimator, Bound, History, Model, option_choices, option_hints, option_type_error
from .abstract import static_float_option as _static_float
from .abstract import static_option as _static
from .abstract import traced_option as _traced
from .base import Estimate
from .ekf import ekf, ukf
from .equation_error import equation_error
from .ml import ml
from .nonlinear import nonlinear_output_error
from .paper import paper
from .rls import idim_iv, idim_ls, rls

__all__ = [
    "AbstractEstimator",
    "Paper",
    "EquationError",
    "ML",
    "NonlinearOutputError",
    "RLS",
    "IdimLS",
    "IdimIV",
    "EKF",
    "UKF",
    "ESTIMATORS",
    "estimator_class",
    "make_estimator",
    "check_options",
]

SpectrumMethod = Literal["projection", "lstsq"]
SpectralWeighting = Literal["pooled", "per_line"]
Derivative = Literal["fourier", "butterworth"]
Keep = Literal["excited", "band", "detected"]
RegressionWeighting = Literal["none", "joint"]
StartEstimator = Literal["ml", "equation_error", "paper", "idim_ls", "idim_iv", "rls", "ekf", "ukf"]


# -- the estimators -----------------------------------------------------------------------------


class Paper(AbstractEstimator):
    """The paper's route (``jaxid.estimators.paper``): masses from per-joint template fits."""

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
    """Frequency-domain equation-error least squares (``jaxid.estimators.equation_error``)."""

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
    """Frequency-domain maximum likelihood (``jaxid.estimators.ml``); tolerances are static."""

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


class NonlinearOutputError(AbstractEstimator):
    """Output error on the nonlinear periodic steady state (``nonlinear_output_error``).

    Traced: ``initial``, ``rtol``, ``state_tolerance``; ``damping`` (the initial ``λ``) is static.
    """

    name: ClassVar[str] = "nonlinear_oe"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(nonlinear_output_error)
    model: ClassVar[Model] = "nonlinear"
    history: ClassVar[History] = "iterations"
    bound: ClassVar[Bound] = "nonlinear"
    takes_noise_mean: ClassVar[bool] = False
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = True

    initial: Array | None = _traced(None)
    initial_estimator: StartEstimator | None = _static("ml")
    substeps: int = _static(1)
    fit_offset: bool = _static(True)
    max_iterations: int = _static(30)
    rtol: Array = _traced(1e-10)
    state_tolerance: Array = _traced(1e-9)
    damping: float = _static_float(1e-4)
    derivative_cutoff: int | None = _static(None)
    route: Literal["coarse", "shooting"] = _static("coarse")
    step_tolerance: float | None = _static(None)
    coarse_step: float = _static_float(0.04)


class _AbstractRegression(AbstractEstimator):
    """Options shared by the inverse-dynamics regression estimators (``jaxid.estimators.rls``)."""

    measurement_offset: Array | None = _traced(None)
    derivative: Derivative = _static("fourier")
    keep: Keep = _static("detected")
    cutoff: int | None = _static(None)
    order: int = _static(4)
    threshold: float = _static_float(10.0)
    weighting: RegressionWeighting = _static("joint")


class IdimLS(_AbstractRegression):
    """IDIM-LS: batch least squares of the inverse-dynamics regression (``idim_ls``)."""

    name: ClassVar[str] = "idim_ls"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(idim_ls)
    model: ClassVar[Model] = "regressor"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = False
    needs_whole_periods: ClassVar[bool] = True


class RLS(_AbstractRegression):
    """Recursive least squares on the inverse-dynamics regression (``rls``).

    Traced: ``forgetting``, ``initial_covariance``, ``initial_guess``, ``initial_factor``,
    ``measurement_offset``.
    """

    name: ClassVar[str] = "rls"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(rls)
    model: ClassVar[Model] = "regressor"
    history: ClassVar[History] = "time"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = False
    needs_whole_periods: ClassVar[bool] = True

    forgetting: Array = _traced(1.0)
    initial_covariance: Array = _traced(1e6)
    initial_guess: Array | None = _traced(None)
    initial_factor: Array = _traced(1.3)
    history_points: int = _static(200)


class IdimIV(_AbstractRegression):
    """IDIM-IV: instrumental variables from the simulated steady state (``idim_iv``)."""

    name: ClassVar[str] = "idim_iv"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(idim_iv)
    model: ClassVar[Model] = "regressor"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = True

    iterations: int = _static(3)
    covariance: Literal["delta", "white"] = _static("delta")
    substeps: int = _static(1)
    newton_iterations: int = _static(20)


class _AbstractArmFilter(AbstractEstimator):
    """Options shared by the Kalman filters on the augmented state ``(q, q', θ)`` (``ekf``)."""

    model: ClassVar[Model] = "nonlinear"
    history: ClassVar[History] = "time"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = False

    measurement_offset: Array | None = _traced(None)
    initial_guess: Array | None = _traced(None)
    initial_factor: Array = _traced(1.3)
    initial_relative_std: Array = _traced(0.3)
    initial_velocity_std: Array = _traced(5.0)
    velocity_process_std: Array = _traced(1e-4)
    parameter_process_std: Array = _traced(0.0)
    history_points: int = _static(200)


class EKF(_AbstractArmFilter):
    """Extended Kalman filter with the parameters in the state (``ekf``); scales are traced.

    ``needs_whole_periods`` is false; without ``noise_std`` the noise level is read from the
    record's spectrum.
    """

    name: ClassVar[str] = "ekf"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(ekf)


class UKF(_AbstractArmFilter):
    """Unscented Kalman filter, otherwise as ``EKF`` (``ukf``); ``alpha, beta, kappa`` are static."""

    name: ClassVar[str] = "ukf"
    function: ClassVar[Callable[..., Estimate]] = staticmethod(ukf)

    alpha: float = _static_float(1.0)
    beta: float = _static_float(2.0)
    kappa: float = _static_float(0.0)


#: Name → estimator class: the names experiment files, the study runner and the CLI use.
ESTIMATORS: dict[str, type[AbstractEstimator]] = {
    cls.name: cls for cls in (Paper, EquationError, ML, NonlinearOutputError, RLS, IdimLS, IdimIV, EKF, UKF)
}


def estimator_class(name: str) -> type[AbstractEstimator]:
    """The estimator class called ``name``; raises ``ValueError`` listing the names (with a suggestion)."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"Unknown estimator {name!r}; available: {sorted(ESTIMATORS)}.{did_you_mean(name, ESTIMATORS)}"
        )
    return ESTIMATORS[name]


def make_estimator(name: str, options: Mapping[str, Any] | None = None) -> AbstractEstimator:
    """The estimator ``name`` with ``options`` (e.g. an experiment's ``estimator_options`` table).

    Raises ``ValueError`` with a one-line message for an unknown estimator, an option it does not
    have (naming the options it has, and the closest) or a value of the wrong type.
    """
    options = dict(options or {})
    check_options(name, options)
    return ESTIMATORS[name](**options)


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Check ``options`` of estimator ``name`` as ``make_estimator`` does, without building it
    (no JAX array is created: safe while parsing a configuration). Raises ``ValueError``."""
    cls = estimator_class(name)
    allowed = cls.option_names()
    for key, value in options.items():
        if key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(
                f"Estimator {name!r} has no option {key!r}; its options: {listed}.{did_you_mean(key, allowed)}"
            )
        hint = option_hints(cls)[key]
        error = option_type_error(hint, value)
        if error:
            raise ValueError(
                f"Estimator {name!r}: option {key!r} {error}.{did_you_mean(str(value), option_choices(hint))}"
            )
