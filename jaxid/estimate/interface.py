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
options live in ``jaxid.estimate.abstract``; the estimator classes, by the model they fit, in
``jaxid.estimate.linearised_estimators`` (``Paper``, ``EquationError``, ``ML``),
``jaxid.estimate.regressor_estimators`` (``IdimLS`` and its variants, ``RLS``, ``IdimIV``) and
``jaxid.estimate.nonlinear_estimators`` (``NonlinearOutputError``, ``EKF``, ``UKF``, ``OutputError``
and its variant); this module holds the name table and the option checks.

Under ``jit``/``vmap`` an estimator module behaves like the function it wraps (batch the record,
close over or ``eqx.filter_jit`` the module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..types import did_you_mean
from .abstract import AbstractEstimator, Data, option_choices, option_hints, option_type_error
from .linearised_estimators import ML, EquationError, Paper
from .nonlinear_estimators import EKF, UKF, NonlinearOutputError, OutputError, OutputErrorConsistent
from .regressor_estimators import RLS, IdimIV, IdimLS, IdimLSBounded, IdimLSConsistent

__all__ = [
    "AbstractEstimator",
    "ESTIMATORS",
    "names_for",
    "estimator_class",
    "make_estimator",
    "check_options",
]


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
