"""The estimator base class: options as fields, facts as class variables, one class per estimator.

``AbstractEstimator`` (an ``equinox.Module``) is what every estimator class of
``jaxid.estimate.interface`` derives from; the module docstring there describes the design. An
estimator is one class whatever the data came from: called on a simulated ``Record`` it runs its
record function (``function``), called on measured logs (``FilteredLog`` objects) its log function
(``log_function``); options that apply to one kind of data only are refused on the other.
This module holds the base class, the field helpers that make an option traced (an array leaf) or
static, and the type checks of static options (the one-line errors of ``check_options``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .base import Estimate
from .logs.data import FilteredLog
from .logs.idim import Identification
from .logs.model import RegressionModel
from .logs.reweighted import consistent_start, idim_ls_consistent

__all__ = [
    "AbstractEstimator",
    "simulation_start",
    "Data",
    "is_logs",
    "Model",
    "History",
    "Bound",
    "traced_option",
    "static_option",
    "static_float_option",
    "option_hints",
    "option_type_error",
    "option_choices",
]

Model = Literal["linearised", "nonlinear", "regressor"]
History = Literal["none", "time", "iterations"]
Bound = Literal["linear", "nonlinear"]
#: The two kinds of data an estimator takes: a simulated periodic ``Record`` or measured logs.
Data = Literal["record", "log"]


def is_logs(data) -> bool:
    """Whether ``data`` is measured logs: a ``FilteredLog`` or a non-empty sequence of them."""
    if isinstance(data, FilteredLog):
        return True
    return isinstance(data, (list, tuple)) and len(data) > 0 and all(isinstance(d, FilteredLog) for d in data)


def _array(x: ArrayLike) -> Array:
    """Converter of a traced option: a float array (a tracer passes through)."""
    if isinstance(x, (str, bool)) or x is None:
        raise TypeError(f"expected a number or an array of numbers, got {x!r}")
    return jnp.asarray(x, dtype=float)


def _optional_array(x: ArrayLike | None) -> Array | None:
    return None if x is None else _array(x)


def traced_option(default):
    """A traced option: an array leaf (varies without recompiling)."""
    converter = _optional_array if default is None else _array
    return eqx.field(default=default, converter=converter)


def static_option(default):
    """A static option: hashed into the compiled function (sets a shape, branch or loop)."""
    return eqx.field(default=default, static=True)


def static_float_option(default: float):
    return eqx.field(default=default, static=True, converter=float)


def simulation_start(logs, model: RegressionModel, start: Identification) -> Identification:
    """Where an estimator that simulates its model starts, given IDIM-LS's ``start``: ``consistent_start`` with the
    physically consistent LS (``idim_ls_consistent`` from ``start``: ``IdimLSConsistent()``'s call) where ``model``
    has a ``ConsistentMap`` and that fit converges; else ``start`` (also where the fit raises)."""
    if model.consistent is None:
        return start
    try:
        est = idim_ls_consistent(logs, model.consistent, model.names, start=start, known=model.known)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return start
    return consistent_start(start, est.value if est.status == "ok" else None)


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
        log_function: the function it runs on logs (``None``: records only), ``(logs, regressor,
            names, **options) -> Identification``; ``function`` is ``None`` for one of logs only.
        log_options: the options that apply on logs (the others apply to records only).
        log_only: the options that apply on logs only (refused on records when set).
        starts_from: on logs, the estimator class whose estimate it starts from (``IdimLS``) or ``None``.
        simulates: on logs, it simulates the model at its start (IDIM-IV, the Kalman filters, output error),
            so a caller that has the physically consistent fit starts it there (``consistent_start``).
    """

    name: eqx.AbstractClassVar[str]
    function: eqx.AbstractClassVar[Callable[..., Estimate] | None]
    model: eqx.AbstractClassVar[Model]
    history: eqx.AbstractClassVar[History]
    bound: eqx.AbstractClassVar[Bound]
    takes_noise_mean: eqx.AbstractClassVar[bool]
    uses_noise_std: eqx.AbstractClassVar[bool]
    needs_whole_periods: eqx.AbstractClassVar[bool]
    log_function: ClassVar[Callable[..., Identification] | None] = None
    log_options: ClassVar[tuple[str, ...]] = ()
    log_only: ClassVar[tuple[str, ...]] = ()
    starts_from: ClassVar[type[AbstractEstimator] | None] = None
    simulates: ClassVar[bool] = False

    def __check_init__(self):
        for field in dataclasses.fields(self):
            if field.metadata.get("static", False):
                error = option_type_error(option_hints(type(self))[field.name], getattr(self, field.name))
                if error:
                    raise ValueError(f"{type(self).__name__}: option {field.name!r} {error}.")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The options (constructor arguments) of this estimator, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def accepts(cls) -> tuple[Data, ...]:
        """The kinds of data it takes: ``("record",)``, ``("log",)`` or both."""
        return tuple(k for k, f in (("record", cls.function), ("log", cls.log_function)) if f is not None)

    @classmethod
    def data_options(cls, data: Data) -> tuple[str, ...]:
        """The options that apply to ``data``."""
        if data == "log":
            return cls.log_options
        return tuple(n for n in cls.option_names() if n not in cls.log_only)

    def options(self) -> dict[str, Any]:
        """All options, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _applicable(self, data: Data) -> dict[str, Any]:
        """The options for ``data``; raises ``ValueError`` if one of the other kind is set or the
        estimator does not take ``data``. ``None`` values are left out (the function's default)."""
        cls = type(self)
        if data not in cls.accepts():
            takes = "measured logs" if data == "record" else "simulated records"
            raise ValueError(
                f"Estimator {cls.name!r} fits {takes} only, not {'a record' if data == 'record' else 'logs'}; "
                f"estimators for {data}s: {_takers(data)}."
            )
        keep = cls.data_options(data)
        defaults = cls()
        for name, value in self.options().items():
            if name not in keep and _is_set(value, getattr(defaults, name)):
                where = "logs" if name in cls.log_only else "simulated records"
                raise ValueError(
                    f"Estimator {cls.name!r}: option {name!r} applies to {where} only; on {data}s its options are "
                    f"{', '.join(keep) or 'none'}."
                )
        return {k: v for k, v in self.options().items() if k in keep and v is not None}

    def __call__(self, data, *args, **kwargs):
        """``estimator(record, excitation, nominal, *, unknowns, …) -> Estimate`` on a simulated record
        (``fit_record``) or ``estimator(logs, model, *, start=None) -> Identification`` on measured logs
        (``fit_logs``), chosen by the type of ``data``."""
        if is_logs(data):
            return self.fit_logs(data, *args, **kwargs)
        return self.fit_record(data, *args, **kwargs)

    def fit_logs(self, logs, model: RegressionModel, *, start: Identification | None = None) -> Identification:
        """Estimate ``model``'s parameters from filtered logs (``jaxid.estimate.logs.filter_log``).

        Args:
            logs: a ``FilteredLog`` or a sequence of them (same model and sample step).
            model: the ``RegressionModel`` (regressor, names, known torque, constraints).
            start: the estimate it starts from where ``starts_from`` is set (default: computed, IDIM-LS with
                default options; for an estimator that ``simulates``, ``simulation_start`` of it: the consistent
                LS where the model has a ``ConsistentMap`` and that fit converges, ``jaxid fit``'s rule).

        Raises ``ValueError`` as the log function does (rank deficiency, divergence) and for an
        option that applies to records only.
        """
        options = self._applicable("log")
        logs = [logs] if isinstance(logs, FilteredLog) else list(logs)
        if type(self).starts_from is not None and start is None:
            start = type(self).starts_from().fit_logs(logs, model)
            if type(self).simulates:
                start = simulation_start(logs, model, start)
        return self._fit_logs(logs, model, start, options)

    def _fit_logs(self, logs, model: RegressionModel, start, options: dict[str, Any]) -> Identification:
        """The log function's call (a class overrides it to translate its options)."""
        if start is not None:
            options["start"] = start
        return type(self).log_function(logs, model.regressor, model.names, known=model.known, **options)

    def fit_record(
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

        Returns the function's ``Estimate``. Raises ``ValueError`` as the function does, and for an
        option that applies to logs only.
        """
        options = self._applicable("record")
        unknowns = (unknowns,) if isinstance(unknowns, str) else tuple(unknowns)
        if self.takes_noise_mean and options.get("measurement_offset") is None:
            options["measurement_offset"] = 0.0 if noise_mean is None else noise_mean
        return type(self).function(
            record, excitation, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std, **options
        )


def _is_set(value, default) -> bool:
    """Whether an option differs from its default (arrays compared by value)."""
    if value is None or default is None:
        return value is not default
    try:
        return not bool(np.all(np.asarray(value) == np.asarray(default)))
    except (TypeError, ValueError):
        return True


def _takers(data: Data) -> list[str]:
    """The names of the estimator classes (every concrete subclass) that take ``data``."""
    found, todo = set(), [AbstractEstimator]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if isinstance(cls.__dict__.get("name"), str) and data in cls.accepts():
            found.add(cls.name)
    return sorted(found)


@functools.cache
def option_hints(cls: type) -> dict[str, Any]:
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


def option_type_error(hint, value) -> str | None:
    if _matches(hint, value):
        return None
    return f"must be {_describe(hint)}, got {value!r}"


def option_choices(hint) -> list[str]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return [a for a in typing.get_args(hint) if isinstance(a, str)]
    if origin in (typing.Union, types.UnionType):
        return [c for a in typing.get_args(hint) for c in option_choices(a)]
    return []
