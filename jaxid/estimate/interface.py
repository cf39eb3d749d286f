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
- **One class per estimator, whatever the data came from.** On a simulated record:
  ``estimator(record, excitation, nominal, *, unknowns, q0=(0, 0), noise_std=None,
  noise_mean=None) -> Estimate`` (``fit_record``); on measured logs: ``estimator(logs, model, *,
  start=None) -> Identification`` (``fit_logs``, ``model`` a ``jaxid.estimate.logs.RegressionModel``),
  chosen by the type of the first argument. ``accepts()`` says which data an estimator takes,
  ``log_options`` which options apply on logs; an option of the other kind, or an estimator on data
  it does not fit, is a one-line ``ValueError`` (``docs/estimators.md``, "Records and logs").
  On records, ``noise_mean`` [rad] is the known mean of the angle noise: estimators with
  ``takes_noise_mean`` subtract it (as their ``measurement_offset`` option, which wins if set);
  the others ignore it (the frequency-domain fits do not use the DC line, and ``nonlinear_oe``
  fits an offset).
- **One name table** ``ESTIMATORS`` (name → class); ``make_estimator(name, options)`` builds one
  from a TOML table, with one-line errors naming a bad option and the allowed ones.

The base class ``AbstractEstimator``, the traced/static field helpers and the type checks of
options live in ``jaxid.estimate.abstract``; this module holds the estimator classes and the
name table.

Under ``jit``/``vmap`` an estimator module behaves like the function it wraps (batch the record,
close over or ``eqx.filter_jit`` the module).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from jaxtyping import Array

from ..types import did_you_mean
from .abstract import (
    AbstractEstimator,
    Bound,
    Data,
    History,
    Model,
    option_choices,
    option_hints,
    option_type_error,
)
from .abstract import static_float_option as _static_float
from .abstract import static_option as _static
from .abstract import traced_option as _traced
from .base import Estimate
from .consistency import project_to_consistent, unconstrained_from_standard
from .equation_error import equation_error
from .kalman.logs import kalman_filter_fit
from .kalman.records import ekf, ukf
from .logs import consistent_estimate, idim_ls_consistent, idim_rls, output_error
from .logs import idim_iv as log_idim_iv
from .logs import idim_ls as log_idim_ls
from .logs.idim import Identification
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
    "IdimLSBounded",
    "IdimLSConsistent",
    "IdimIV",
    "EKF",
    "UKF",
    "OutputError",
    "OutputErrorConsistent",
    "ESTIMATORS",
    "names_for",
    "estimator_class",
    "make_estimator",
    "check_options",
]

SpectrumMethod = Literal["projection", "lstsq"]
SpectralWeighting = Literal["pooled", "per_line"]
Derivative = Literal["fourier", "butterworth"]
Keep = Literal["excited", "band", "detected"]
RegressionWeighting = Literal["none", "joint"]
Constraint = Literal["none", "sign", "consistent"]
StartEstimator = Literal["ml", "equation_error", "paper", "idim_ls", "idim_iv", "rls", "ekf", "ukf"]


# -- the estimators -----------------------------------------------------------------------------


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
    """Options shared by the inverse-dynamics regression estimators (``jaxid.estimate.rls`` on
    records, ``jaxid.estimate.logs.idim`` on logs). On logs ``weighting`` applies (``"joint"``:
    Gautier's per-joint weighting by the residual std) and ``decimate`` (the row stride, default
    ``⌊f_s/(4 f_c)⌋``); the derivative options do not (a log is filtered by ``filter_log``)."""

    model: ClassVar[Model] = "regressor"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = True
    log_only: ClassVar[tuple[str, ...]] = ("decimate",)

    measurement_offset: Array | None = _traced(None)
    derivative: Derivative = _static("fourier")
    keep: Keep = _static("detected")
    cutoff: int | None = _static(None)
    order: int = _static(4)
    threshold: float = _static_float(10.0)
    weighting: RegressionWeighting = _static("joint")
    decimate: int | None = _static(None)


class IdimLS(_AbstractRegression):
    """IDIM-LS: batch least squares of the inverse-dynamics regression (``idim_ls``).

    ``constraint`` (logs only): ``"none"``; ``"sign"`` — bounded least squares with the model's
    ``nonnegative`` parameters ``≥ 0``; ``"consistent"`` — IDIM-LS's weighted rows fitted over
    physically consistent standard parameters (``jaxid.estimate.consistency``, log-Cholesky, no SDP solver;
    needs the model's ``ConsistentMap``; covariance: the constrained problem's own).
    """

    name: ClassVar[str] = "idim_ls"
    function: ClassVar[Callable[..., Estimate] | None] = staticmethod(idim_ls)
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(log_idim_ls)
    history: ClassVar[History] = "none"
    uses_noise_std: ClassVar[bool] = False
    log_options: ClassVar[tuple[str, ...]] = ("weighting", "decimate", "constraint")
    log_only: ClassVar[tuple[str, ...]] = ("decimate", "constraint")

    constraint: Constraint = _static("none")

    def _fit_logs(self, logs, model, start, options):
        weighted = options.pop("weighting") == "joint"
        constraint = options.pop("constraint")
        if constraint == "consistent":
            _consistent_map(model, self.name)
            if start is None:
                start = log_idim_ls(logs, model.regressor, model.names, known=model.known, **options)
            return idim_ls_consistent(logs, model.consistent, model.names, start=start, known=model.known, **options)
        bounds = model.sign_bounds() if constraint == "sign" else None
        return log_idim_ls(
            logs, model.regressor, model.names, weighted=weighted, bounds=bounds, known=model.known, **options
        )


class IdimLSBounded(IdimLS):
    """IDIM-LS with the sign-constrained parameters ``≥ 0`` (``IdimLS(constraint="sign")``), logs only."""

    name: ClassVar[str] = "idim_ls_bounded"
    function: ClassVar[Callable[..., Estimate] | None] = None

    constraint: Constraint = _static("sign")


class IdimLSConsistent(IdimLS):
    """Physically consistent IDIM-LS (``IdimLS(constraint="consistent")``), logs only."""

    name: ClassVar[str] = "idim_ls_consistent"
    function: ClassVar[Callable[..., Estimate] | None] = None

    constraint: Constraint = _static("consistent")


class RLS(_AbstractRegression):
    """Recursive least squares on the inverse-dynamics regression (``rls``; on logs ``idim_rls``
    over IDIM-LS's weighted rows, columns scaled to unit norm, started at 0).

    Traced: ``forgetting``, ``initial_covariance``, ``initial_guess``, ``initial_factor``,
    ``measurement_offset``. ``initial_covariance`` defaults to 1e6 on records and 1e8 (scaled
    units) on logs.
    """

    name: ClassVar[str] = "rls"
    function: ClassVar[Callable[..., Estimate] | None] = staticmethod(rls)
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(idim_rls)
    history: ClassVar[History] = "time"
    uses_noise_std: ClassVar[bool] = False
    log_options: ClassVar[tuple[str, ...]] = ("forgetting", "initial_covariance", "decimate")
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS

    forgetting: Array = _traced(1.0)
    initial_covariance: Array | None = _traced(None)
    initial_guess: Array | None = _traced(None)
    initial_factor: Array = _traced(1.3)
    history_points: int = _static(200)

    def _fit_logs(self, logs, model, start, options):
        options = {k: float(v) if k != "decimate" else v for k, v in options.items()}
        return idim_rls(logs, model.regressor, model.names, start=start, known=model.known, **options)


class IdimIV(_AbstractRegression):
    """IDIM-IV: instrumental variables (``idim_iv``): on records from the simulated steady state, on
    logs from simulations of the estimate restarted from the filtered state every ``segment_s``."""

    name: ClassVar[str] = "idim_iv"
    function: ClassVar[Callable[..., Estimate] | None] = staticmethod(idim_iv)
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(log_idim_iv)
    history: ClassVar[History] = "none"
    uses_noise_std: ClassVar[bool] = True
    log_options: ClassVar[tuple[str, ...]] = ("iterations", "segment_s", "decimate")
    log_only: ClassVar[tuple[str, ...]] = ("segment_s", "decimate")
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS

    iterations: int = _static(3)
    covariance: Literal["delta", "white"] = _static("delta")
    substeps: int = _static(1)
    newton_iterations: int = _static(20)
    segment_s: float = _static_float(0.5)


class _AbstractArmFilter(AbstractEstimator):
    """Options shared by the Kalman filters on the augmented state ``(q, q', θ)`` (``ekf`` on records,
    ``kalman_filter_fit`` on logs). ``velocity_process_std`` defaults to 1e-4 on records (the exact
    model) and 0.01 on logs (model error); ``measurement_std`` (logs only) defaults to the logs'
    own angle noise."""

    model: ClassVar[Model] = "nonlinear"
    history: ClassVar[History] = "time"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = False
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(kalman_filter_fit)
    log_options: ClassVar[tuple[str, ...]] = ("measurement_std", "velocity_process_std", "initial_relative_std")
    log_only: ClassVar[tuple[str, ...]] = ("measurement_std",)
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS

    measurement_offset: Array | None = _traced(None)
    initial_guess: Array | None = _traced(None)
    initial_factor: Array = _traced(1.3)
    initial_relative_std: Array = _traced(0.3)
    initial_velocity_std: Array = _traced(5.0)
    velocity_process_std: Array | None = _traced(None)
    parameter_process_std: Array = _traced(0.0)
    history_points: int = _static(200)
    measurement_std: float | None = _static(None)

    def _fit_logs(self, logs, model, start, options):
        options = {k: float(v) for k, v in options.items()}
        return kalman_filter_fit(
            logs, model.regressor, model.names, start=start, kind=self.name, known=model.known, **options
        )


class EKF(_AbstractArmFilter):
    """Extended Kalman filter with the parameters in the state (``ekf``); scales are traced.

    ``needs_whole_periods`` is false; without ``noise_std`` the noise level is read from the
    record's spectrum.
    """

    name: ClassVar[str] = "ekf"
    function: ClassVar[Callable[..., Estimate] | None] = staticmethod(ekf)


class UKF(_AbstractArmFilter):
    """Unscented Kalman filter, otherwise as ``EKF`` (``ukf``); ``alpha, beta, kappa`` are static
    (records only: on logs the filter's defaults)."""

    name: ClassVar[str] = "ukf"
    function: ClassVar[Callable[..., Estimate] | None] = staticmethod(ukf)

    alpha: float = _static_float(1.0)
    beta: float = _static_float(2.0)
    kappa: float = _static_float(0.0)


class OutputError(AbstractEstimator):
    """Multiple-shooting output error on measured angles (``jaxid.estimate.logs.output_error``),
    logs only; on simulated periodic records the output error is ``nonlinear_oe``.

    ``constraint="consistent"``: the fit runs over the log-Cholesky coordinates ``z`` of the arm's
    standard parameters (``θ = to_model(standard_from_unconstrained(z))``: every iterate a physically
    consistent arm), started from the consistent least squares on IDIM-LS's rows (projected inside
    with the margin 1e-2); needs the model's ``ConsistentMap``.
    """

    name: ClassVar[str] = "output_error"
    function: ClassVar[Callable[..., Estimate] | None] = None
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(output_error)
    model: ClassVar[Model] = "nonlinear"
    history: ClassVar[History] = "none"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = False
    uses_noise_std: ClassVar[bool] = False
    needs_whole_periods: ClassVar[bool] = False
    log_options: ClassVar[tuple[str, ...]] = (
        "segment_s",
        "stride",
        "continuity_weight",
        "max_iterations",
        "constraint",
    )
    log_only: ClassVar[tuple[str, ...]] = log_options
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS

    segment_s: float = _static_float(0.5)
    stride: int = _static(5)
    continuity_weight: float = _static_float(100.0)
    max_iterations: int = _static(30)
    constraint: Literal["none", "consistent"] = _static("none")

    def _fit_logs(self, logs, model, start, options):
        if options.pop("constraint") == "none":
            return output_error(logs, model.regressor, model.names, start=start, known=model.known, **options)
        consistent = _consistent_map(model, self.name)
        standard = consistent_estimate(logs, consistent, start=start, known=model.known).standard
        z0 = unconstrained_from_standard(project_to_consistent(standard, floor=CONSISTENT_START_FLOOR))
        return output_error(
            logs,
            model.regressor,
            model.names,
            parametrisation=consistent.parametrisation,
            start_z=np.asarray(z0),
            known=model.known,
            **options,
        )


class OutputErrorConsistent(OutputError):
    """Physically consistent output error (``OutputError(constraint="consistent")``), 100 evaluations."""

    name: ClassVar[str] = "output_error_consistent"

    max_iterations: int = _static(100)
    constraint: Literal["none", "consistent"] = _static("consistent")


#: The margin inside the consistent set of consistent output error's start: a coordinate started at
#: the brink (``e^z ≈ 0``) has a vanishing gradient and barely moves.
CONSISTENT_START_FLOOR = 1e-2


def _consistent_map(model, name: str):
    if model.consistent is None:
        raise ValueError(
            f'{name}: constraint "consistent" needs a model of an arm\'s base parameters with all of them '
            'free (RegressionModel.consistent); use constraint "none".'
        )
    return model.consistent


#: Name → estimator class: the names experiment files, the study runner and the CLI use.
ESTIMATORS: dict[str, type[AbstractEstimator]] = {
    cls.name: cls
    for cls in (
        Paper,
        EquationError,
        ML,
        NonlinearOutputError,
        RLS,
        IdimLS,
        IdimLSBounded,
        IdimLSConsistent,
        IdimIV,
        EKF,
        UKF,
        OutputError,
        OutputErrorConsistent,
    )
}


def names_for(data: Data) -> list[str]:
    """The names of the estimators that take ``data`` (``"record"`` or ``"log"``), sorted."""
    return sorted(n for n, c in ESTIMATORS.items() if data in c.accepts())


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


def check_options(name: str, options: Mapping[str, Any], data: Data | None = None) -> None:
    """Check ``options`` of estimator ``name`` as ``make_estimator`` does, without building it
    (no JAX array is created: safe while parsing a configuration). With ``data`` (``"record"`` or
    ``"log"``) also check that the estimator takes that data and each option applies to it.
    Raises ``ValueError``."""
    cls = estimator_class(name)
    if data is not None and data not in cls.accepts():
        raise ValueError(
            f"Estimator {name!r} does not fit {'simulated records' if data == 'record' else 'measured logs'}; "
            f"those that do: {names_for(data)}.{did_you_mean(name, names_for(data))}"
        )
    allowed = cls.option_names() if data is None else cls.data_options(data)
    for key, value in options.items():
        if key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            where = "" if data is None or len(cls.accepts()) == 1 else f" on {data}s"
            raise ValueError(
                f"Estimator {name!r} has no option {key!r}{where}; its options{where}: {listed}.{did_you_mean(key, allowed)}"
            )
        hint = option_hints(cls)[key]
        error = option_type_error(hint, value)
        if error:
            raise ValueError(
                f"Estimator {name!r}: option {key!r} {error}.{did_you_mean(str(value), option_choices(hint))}"
            )
