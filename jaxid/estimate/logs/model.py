"""The arm as the log-side estimators see it: a model linear in its parameters.

``RegressionModel`` bundles ``τ − known(q, q', q'') = Y(q, q', q'') θ``: the regressor ``Y``, the
names of ``θ``, the torque of the fixed parameters, which parameters are non-negative for any
physical arm (the ``constraint="sign"`` of IDIM-LS) and, where the model is an arm's base
parameters, the map from the arm's physically consistent standard parameters to ``θ``
(``ConsistentMap``: the ``constraint="consistent"`` of IDIM-LS). It is a value built from an arm
(``jaxid.fit`` builds one from the config's ``[arm]`` table, the benchmark from its URDF), never a
name looked up: every estimator of ``jaxid.estimate`` takes ``(logs, model)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..consistency import standard_from_unconstrained
from .data import Known, Regressor

__all__ = ["RegressionModel", "ConsistentMap"]


@dataclass(frozen=True)
class ConsistentMap:
    """How an arm's standard parameters ``φ`` (``14 n`` of a ``SerialArm``) give the model's ``θ``.

    Attributes:
        arm: the nominal arm (its ``standard_names``; its values are the default prior).
        regressor: ``Y_s(q, q', q'') -> (..., n, 14 n)``, the standard regressor (zero columns for
            terms the model leaves out, e.g. Coulomb friction).
        to_model: ``φ -> θ`` (e.g. the base values at the model's columns), pure JAX (it is traced
            and differentiated by consistent output error).
        prior: ``(14 n,)`` the standard parameters the fit is regularised towards (default the arm's).
    """

    arm: Any
    regressor: Regressor
    to_model: Callable[[Any], Any]
    prior: np.ndarray | None = None

    @functools.cached_property
    def parametrisation(self) -> Callable[[Any], Any]:
        """``z -> θ = to_model(standard_from_unconstrained(z))``: every ``z`` a physically consistent
        arm (``jaxid.estimate.consistency``); one function object per map, so that its compiled Jacobian is
        reused (output error keys its programs by the function's identity)."""

        def theta(z):
            return self.to_model(standard_from_unconstrained(z))

        return theta


@dataclass(frozen=True)
class RegressionModel:
    """``τ − known = Y θ``: what ``idim_ls``, ``idim_iv``, ``output_error``, the filters and RLS need.

    Attributes:
        regressor: ``Y(q, q', q'') -> (..., n, p)`` (``jaxid.estimate.logs.data.Regressor``).
        names: the ``p`` parameter names, the order of ``θ``.
        known: the torque of the fixed parameters (default none).
        nonnegative: names of the parameters that are ``≥ 0`` for any physical arm (friction,
            armature, joint-axis inertias; the bounds of ``constraint="sign"``).
        consistent: the standard-parameter map for ``constraint="consistent"``, or ``None`` where
            the model is not an arm's base parameters (then that constraint is refused).
    """

    regressor: Regressor
    names: tuple[str, ...]
    known: Known | None = None
    nonnegative: tuple[str, ...] = ()
    consistent: ConsistentMap | None = field(default=None, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        unknown = [n for n in self.nonnegative if n not in self.names]
        if unknown:
            raise ValueError(f"RegressionModel: nonnegative names {unknown} are not among the parameters {self.names}.")

    def sign_bounds(self) -> tuple[list[float], list[float]]:
        """``(lower, upper)``: 0 below the ``nonnegative`` parameters, ``−inf`` below the others, ``+inf`` above."""
        lower = [0.0 if n in self.nonnegative else -np.inf for n in self.names]
        return lower, [np.inf] * len(self.names)
