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

Under ``jit``/``vmap`` an estimator module behaves like the function it wraps (batch the record,
close over or ``eqx.filter_jit`` the module).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

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

Model = Literal["linearised", "nonlinear", "regressor"]
History = Literal["none", "time", "iterations"]
Bound = Literal["linear", "nonlinear"]

SpectrumMethod = Literal["projection", "lstsq"]
SpectralWeighting = Literal["pooled", "per_line"]
Derivative = Literal["fourier", "butterworth"]
Keep = Literal["excited", "band", "detected"]
RegressionWeighting = Literal["none", "joint"]
StartEstimator = Literal["ml", "equation_error", "paper", "idim_ls", "idim_iv", "rls", "ekf", "ukf"]


def _array(x: ArrayLike) -> Array:
    """Converter of a traced option: a float array (a tracer passes through)."""
    if isinstance(x, (str, bool)) or x is None:
        raise TypeError(f"expected a number or an array of numbers, got {x!r}")
    return jnp.asarray(x, dtype=float)


def _optional_array(x: ArrayLike | None) -> Array | None:
    return None if x is None else _array(x)


def _traced(default):
    """A traced option: an array leaf (varies without recompiling)."""
    converter = _optional_array if default is None else _array
    return eqx.field(default=default, converter=converter)


def _static(default):
    """A static option: hashed into the compiled function (sets a shape, branch or loop)."""
    return eqx.field(default=default, static=True)


def _static_float(default: float):
    return eqx.field(default=default, static=True, converter=float)


class AbstractEstimator(eqx.Module):
    """An estimator: options as fields, facts as class variables, one call signature.

    Class variables (facts; read them instead of keeping lists of estimator names):
        name: the name in ``ESTIMATORS`` and in experiment files.
        function: the estimator function this class calls (the documented API of its options).
        model: what it fits — ``"linearised"`` (the arm linearised at ``q0``, frequency domain),
            ``"nonlinear"`` (the nonlinear arm: its periodic steady state or its state-space
            model) or ``"regressor"`` (the inverse-dynamics regressor ``tau = Y(q, q', q'') θ``
            on filtered angles).
        history: what ``Estimate.history`` holds — ``"none"``, ``"time"`` (the estimate over the
            record's time: recursive in time) or ``"iterations"`` (the iterate of an iterative fit).
        bound: the Cramér–Rao bound the report compares its spread with: ``"nonlinear"`` (of the
            nonlinear periodic steady state) or ``"linear"`` (of the linearised arm).
        takes_noise_mean: the mean of the angle noise biases it, so the caller passes it as
            ``noise_mean`` (subtracted from the angles) when known.
        uses_noise_std: it uses ``noise_std`` when given (else estimates what it needs).
        needs_whole_periods: the record must be whole periods (with the default options).
    """

    name: eqx.AbstractClassVar[str]
    function: eqx.AbstractClassVar[Callable[..., Estimate]]
    model: eqx.AbstractClassVar[Model]
    history: eqx.AbstractClassVar[History]
    bound: eqx.AbstractClassVar[Bound]
    takes_noise_mean: eqx.AbstractClassVar[bool]
    uses_noise_std: eqx.AbstractClassVar[bool]
    needs_whole_periods: eqx.AbstractClassVar[bool]

    def __check_init__(self):
        for field in dataclasses.fields(self):
            if field.metadata.get("static", False):
                error = _type_error(_hints(type(self))[field.name], getattr(self, field.name))
                if error:
                    raise ValueError(f"{type(self).__name__}: option {field.name!r} {error}.")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The options (constructor arguments) of this estimator, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def options(self) -> dict[str, Any]:
        """The options as keyword arguments of ``function``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __call__(
        self,
        record,
        excitation,
        nominal,
        *,
        unknowns: Sequence[str],
        q0: ArrayLike = (0.0, 0.0),
        noise_std: ArrayLike | None = None,
        noise_mean: ArrayLike | None = None,
    ) -> Estimate:
        """Estimate ``unknowns`` from ``record``.

        Args:
            record: the measured ``Record`` (angles possibly noisy), unbatched (``vmap`` it).
            excitation: the ``Multisine`` applied.
            nominal: ``TwoLinkArm`` with the known parameters (its values of the unknowns are a
                starting point at most; see each function).
            unknowns: static tuple of parameter names.
            q0: operating point [rad].
            noise_std: angle noise standard deviation [rad] if known (used where
                ``uses_noise_std``), else ``None``.
            noise_mean: mean of the angle noise [rad] if known; subtracted where
                ``takes_noise_mean`` unless the ``measurement_offset`` option is set; ignored by
                the others.

        Returns the function's ``Estimate``. Raises ``ValueError`` as the function does.
        """
        options = self.options()
        unknowns = (unknowns,) if isinstance(unknowns, str) else tuple(unknowns)
        if self.takes_noise_mean and options.get("measurement_offset") is None:
            options["measurement_offset"] = 0.0 if noise_mean is None else noise_mean
        return type(self).function(
            record, excitation, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std, **options
        )


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _alternatives(hint) -> list[str]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return [repr(a) for a in typing.get_args(hint)]
    if origin in (typing.Union, types.UnionType):
        return [d for a in typing.get_args(hint) for d in _alternatives(a)]
    if hint is type(None):
        return ["None"]
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    return [names.get(hint, "a number or an array of numbers")]


def _describe(hint) -> str:
    alternatives = _alternatives(hint)
    return alternatives[0] if len(alternatives) == 1 else ", ".join(alternatives[:-1]) + " or " + alternatives[-1]


def _matches(hint, value) -> bool:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return any(_matches(a, value) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    # An array option: numbers, (nested) lists of numbers or arrays (checked without touching a device).
    if isinstance(value, (str, bool)) or value is None:
        return False
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(value).dtype
        except (TypeError, ValueError):
            return False
    return np.issubdtype(dtype, np.number) and not np.issubdtype(dtype, np.bool_)


def _type_error(hint, value) -> str | None:
    if _matches(hint, value):
        return None
    return f"must be {_describe(hint)}, got {value!r}"


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


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def estimator_class(name: str) -> type[AbstractEstimator]:
    """The estimator class called ``name``; raises ``ValueError`` listing the names (with a suggestion)."""
    if name not in ESTIMATORS:
        raise ValueError(f"Unknown estimator {name!r}; available: {sorted(ESTIMATORS)}.{_suggest(name, ESTIMATORS)}")
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
                f"Estimator {name!r} has no option {key!r}; its options: {listed}.{_suggest(key, allowed)}"
            )
        error = _type_error(_hints(cls)[key], value)
        if error:
            raise ValueError(
                f"Estimator {name!r}: option {key!r} {error}.{_suggest(str(value), _choices(_hints(cls)[key]))}"
            )


def _choices(hint) -> list[str]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return [a for a in typing.get_args(hint) if isinstance(a, str)]
    if origin in (typing.Union, types.UnionType):
        return [c for a in typing.get_args(hint) for c in _choices(a)]
    return []
