"""The estimator classes of the nonlinear model (``model = "nonlinear"``): ``NonlinearOutputError`` on
the periodic steady state of a simulated record, the Kalman filters ``EKF`` and ``UKF`` on the
augmented state ``(q, q', θ)`` (records and logs), and multiple-shooting ``OutputError`` on measured
logs (with its physically consistent variant and the margin its start keeps inside the consistent set).

The design (options as fields, facts as class variables) is ``jaxid.estimate.interface``'s module
docstring; the name table is there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Literal

from jaxtyping import Array

from .abstract import AbstractEstimator, Bound, History, Model
from .abstract import static_float_option as _static_float
from .abstract import static_option as _static
from .abstract import traced_option as _traced
from .base import Estimate
from .kalman.logs import kalman_filter_fit
from .kalman.records import ekf, ukf
from .logs import consistent_estimate, output_error, output_error_batch
from .logs.idim import Identification
from .logs.output_error import PARAMETER_TOLERANCE
from .logs.output_error_consistent import output_error_consistent
from .nonlinear import nonlinear_output_error
from .regressor_estimators import IdimLS, _consistent_map

__all__ = ["NonlinearOutputError", "EKF", "UKF", "OutputError", "OutputErrorConsistent", "CONSISTENT_START_FLOOR"]

StartEstimator = Literal["ml", "equation_error", "paper", "idim_ls", "idim_iv", "rls", "ekf", "ukf"]


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


class _AbstractArmFilter(AbstractEstimator):
    """Options shared by the Kalman filters on the augmented state ``(q, q', θ)`` (``ekf`` on records,
    ``kalman_filter_fit`` on logs). ``velocity_process_std`` defaults to 1e-4 on records (the exact
    model) and 0.01 on logs (model error); ``measurement_std`` (logs only) defaults to the logs'
    own angle noise; ``torque_std`` [N m] (logs only), the torque reading's noise where known, is carried
    through the model to the velocities' process noise instead (``kalman_filter_fit``)."""

    model: ClassVar[Model] = "nonlinear"
    history: ClassVar[History] = "time"
    bound: ClassVar[Bound] = "linear"
    takes_noise_mean: ClassVar[bool] = True
    uses_noise_std: ClassVar[bool] = True
    needs_whole_periods: ClassVar[bool] = False
    log_function: ClassVar[Callable[..., Identification] | None] = staticmethod(kalman_filter_fit)
    log_options: ClassVar[tuple[str, ...]] = (
        "measurement_std",
        "velocity_process_std",
        "initial_relative_std",
        "torque_std",
    )
    log_only: ClassVar[tuple[str, ...]] = ("measurement_std", "torque_std")
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS
    simulates: ClassVar[bool] = True

    measurement_offset: Array | None = _traced(None)
    initial_guess: Array | None = _traced(None)
    initial_factor: Array = _traced(1.3)
    initial_relative_std: Array = _traced(0.3)
    initial_velocity_std: Array = _traced(5.0)
    velocity_process_std: Array | None = _traced(None)
    parameter_process_std: Array = _traced(0.0)
    history_points: int = _static(200)
    measurement_std: float | None = _static(None)
    torque_std: float | None = _static(None)

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

    ``constraint="consistent"``: the same cost minimised over physically consistent arms
    (``jaxid.estimate.logs.output_error_consistent``: constrained Gauss–Newton, each step a consistent
    least squares on the linearised problem, so the optimum may lie on the consistency boundary),
    started from the consistent least squares on IDIM-LS's rows; needs the model's ``ConsistentMap``.

    ``solver`` (``constraint="none"`` only; default ``None``: ``"hybrid"``): ``output_error``'s ``"hybrid"``
    (``jaxid.estimate.logs.shooting_hybrid``: Gauss–Newton steps with a line search, the trust region where they
    fail), ``"trust_region"`` (scipy's ``trf``) or ``"gauss_newton"`` (Nielsen-damped). At the default continuity
    weight 100 the hybrid converges where the trust region crawls (``benchmark_panda``'s poorly exciting trials,
    12 from consistent LS: ``ok`` in 9 against 6 within 30 passes; rich, 6: ``ok`` in 4-6 passes) and damped
    Gauss–Newton more rarely still (0 of 5). ``jaxid fit`` weighs the gaps 1 and runs Gauss–Newton
    (``jaxid.config.fit.FIT_OPTIONS``), which stops with a stationarity certificate there. The consistent variant
    runs its own constrained Gauss–Newton (``solver`` ``None`` or ``"gauss_newton"``).

    ``parameter_tolerance`` (Gauss–Newton and the hybrid, ``constraint="none"``; default 0.05): stop once the
    undamped step moves no parameter by more than this many of its standard deviations (``output_error``); 0:
    only the stationarity certificate, ``ftol`` and ``xtol``.

    ``covariance`` (default ``"inputs"``): the first-order covariance with the torque reading's noise as an
    error in the simulated input (``jaxid.estimate.logs.shooting_inputs``), never below the segment sandwich;
    ``torque_std`` [N m] the reading's noise where known (default: estimated from the log, an upper bound in
    closed loop); ``"sandwich"``: the segment sandwich alone (docs/estimators.md, "Output error's covariance").
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
        "solver",
        "parameter_tolerance",
        "covariance",
        "torque_std",
    )
    log_only: ClassVar[tuple[str, ...]] = log_options
    starts_from: ClassVar[type[AbstractEstimator] | None] = IdimLS
    simulates: ClassVar[bool] = True

    segment_s: float = _static_float(0.5)
    stride: int = _static(5)
    continuity_weight: float = _static_float(100.0)
    max_iterations: int = _static(30)
    constraint: Literal["none", "consistent"] = _static("none")
    solver: Literal["gauss_newton", "trust_region", "hybrid"] | None = _static(None)
    parameter_tolerance: float = _static_float(PARAMETER_TOLERANCE)
    covariance: Literal["sandwich", "inputs"] = _static("inputs")
    torque_std: float | None = _static(None)

    def __check_init__(self):  # equinox runs the base class's check (the options' types) as well
        if not (math.isfinite(self.parameter_tolerance) and self.parameter_tolerance >= 0):
            raise ValueError(
                f"{type(self).__name__}: option 'parameter_tolerance' must be a finite number ≥ 0 (standard "
                f"deviations; 0 stops on the stationarity certificate alone), got {self.parameter_tolerance!r}."
            )

    def _plain_options(self, options: dict) -> dict:
        """``output_error``'s keyword arguments for the plain variant (``constraint="none"``) from the options."""
        solver = options.pop("solver", None) or "hybrid"
        tolerance = options.pop("parameter_tolerance", PARAMETER_TOLERANCE)
        options.pop("constraint")
        if solver in ("gauss_newton", "hybrid"):
            options["parameter_tolerance"] = tolerance
        elif tolerance != PARAMETER_TOLERANCE:
            raise ValueError(
                f"{self.name}: parameter_tolerance is Gauss–Newton's and the hybrid's stopping rule, and this runs "
                "the trust region; drop solver = 'trust_region' or parameter_tolerance."
            )
        return dict(options, solver=solver)

    def fit_logs_batch(self, logs, model, starts) -> list[Identification | Exception]:
        """``fit_logs(logs[i], model, start=starts[i])`` for every trial ``i`` (each a list of logs) in lockstep
        (``jaxid.estimate.logs.output_error_batch``: their passes as one program; the same numbers up to
        round-off). Per trial its ``Identification`` or the error its fit raised (returned: a status). Plain
        output error only: raises ``ValueError`` for the consistent variant (call it trial by trial)."""
        options = self._applicable("log")
        if options["constraint"] != "none":
            raise ValueError(
                f"{self.name}: fit_logs_batch runs plain output error; call the consistent variant per trial."
            )
        kwargs = self._plain_options(options)
        return output_error_batch(logs, model.regressor, model.names, starts=starts, known=model.known, **kwargs)

    def _fit_logs(self, logs, model, start, options):
        if options["constraint"] == "none":
            kwargs = self._plain_options(options)
            return output_error(logs, model.regressor, model.names, start=start, known=model.known, **kwargs)
        solver = options.pop("solver", None)
        tolerance = options.pop("parameter_tolerance", PARAMETER_TOLERANCE)
        options.pop("constraint")
        if solver == "trust_region":
            raise ValueError(
                f"{self.name}: the consistent variant runs its own constrained Gauss–Newton, not the trust region; "
                "solver='trust_region' applies to constraint='none' only: drop it."
            )
        if tolerance != PARAMETER_TOLERANCE:
            raise ValueError(
                f"{self.name}: parameter_tolerance is plain output error's Gauss–Newton stopping rule; the consistent "
                "variant stops on its own certificate: drop it."
            )
        consistent = _consistent_map(model, self.name)
        standard = consistent_estimate(logs, consistent, start=start, known=model.known).standard
        return output_error_consistent(
            logs, model.regressor, model.names, consistent, standard, known=model.known, **options
        )


class OutputErrorConsistent(OutputError):
    """Physically consistent output error (``OutputError(constraint="consistent")``), 100 evaluations."""

    name: ClassVar[str] = "output_error_consistent"

    max_iterations: int = _static(100)
    constraint: Literal["none", "consistent"] = _static("consistent")


#: The margin inside the consistent set for a start of ``output_error`` over log-Cholesky coordinates
#: (``parametrisation``): a coordinate started at the brink (``e^z ≈ 0``) has a vanishing gradient and
#: barely moves. (The estimator's consistent variant no longer takes that route.)
CONSISTENT_START_FLOOR = 1e-2
