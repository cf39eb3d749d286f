"""The estimator classes of the inverse-dynamics regression (``model = "regressor"``): ``IdimLS`` (with
its sign-bounded and physically consistent variants), ``RLS`` and ``IdimIV``, each on a simulated
record (``jaxid.estimate.rls``) or on measured logs (``jaxid.estimate.logs``), and the check that a
model has the ``ConsistentMap`` a ``constraint="consistent"`` needs.

The design (options as fields, facts as class variables) is ``jaxid.estimate.interface``'s module
docstring; the name table is there too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

from jaxtyping import Array

from .abstract import AbstractEstimator, Bound, History, Model
from .abstract import static_float_option as _static_float
from .abstract import static_option as _static
from .abstract import traced_option as _traced
from .base import Estimate
from .logs import idim_iv as log_idim_iv
from .logs import idim_ls as log_idim_ls
from .logs import idim_ls_consistent, idim_rls
from .logs.idim import Identification
from .rls import idim_iv, idim_ls, rls

__all__ = ["IdimLS", "IdimLSBounded", "IdimLSConsistent", "RLS", "IdimIV"]

Derivative = Literal["fourier", "butterworth"]
Keep = Literal["excited", "band", "detected"]
RegressionWeighting = Literal["none", "joint"]
Constraint = Literal["none", "sign", "consistent"]


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
    simulates: ClassVar[bool] = True

    iterations: int = _static(3)
    covariance: Literal["delta", "white"] = _static("delta")
    substeps: int = _static(1)
    newton_iterations: int = _static(20)
    segment_s: float = _static_float(0.5)


def _consistent_map(model, name: str):
    if model.consistent is None:
        raise ValueError(
            f'{name}: constraint "consistent" needs a model of an arm\'s base parameters with all of them '
            'free (RegressionModel.consistent); use constraint "none".'
        )
    return model.consistent
