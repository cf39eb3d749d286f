"""The model of a fit: the arm, its base parameters, the free/fixed split and consistency checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..types import did_you_mean
from .config import FitConfig, config_error

__all__ = ["FitModel", "build_model", "SIGN_CONSTRAINED", "bounds", "consistency_checks"]


@dataclass
class FitModel:
    arm: Any
    base: Any
    names: tuple[str, ...]
    labels: tuple[str, ...]
    regressor: Any
    reference: np.ndarray | None
    free: tuple[int, ...]
    fixed_values: np.ndarray  # full-length; used at the fixed indices
    free_regressor: Any
    known: Any

    @property
    def free_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.free)

    def embed(self, est):
        """The estimate as a full base vector (fixed parameters at their values, std 0)."""
        from ..identification import Identification

        p = len(self.names)
        value = np.array(self.fixed_values, dtype=float)
        value[list(self.free)] = est.value
        cov = np.zeros((p, p))
        cov[np.ix_(self.free, self.free)] = est.covariance
        return Identification(
            est.method,
            self.names,
            value,
            cov,
            est.rank,
            est.condition,
            est.residual_std,
            est.samples,
            est.iterations,
            est.notes,
        )


def build_model(config: FitConfig) -> FitModel:
    from .. import model as m

    arm = config.arm
    base = m.base_parameters(arm)

    def regressor(q, qd, qdd):
        return m.base_regressor(arm, q, qd, qdd, base)

    reference = None
    if config.reference is not None:
        reference = np.asarray(base.values(m.standard_parameters(config.reference)))
    names = tuple(base.names)
    fit = config.section("fit")
    unknowns = fit["unknowns"]
    if unknowns == "base":
        unknowns = list(names)
    if not isinstance(unknowns, list) or not unknowns:
        raise config_error(f'fit.unknowns must be "base" or a non-empty list of {list(names)}.')
    for n in unknowns:
        if n not in names:
            raise config_error(
                f"fit.unknowns: {n!r} is not a base parameter; use {list(names)}.{did_you_mean(n, names)}"
            )
    fixed = fit["fixed"]
    if not isinstance(fixed, dict):
        raise config_error("fit.fixed must be a table {name = value}.")
    for n, v in fixed.items():
        if n not in names or n in unknowns:
            raise config_error(
                f"fit.fixed: {n!r} must be a base parameter not in fit.unknowns; fixable: "
                f"{[x for x in names if x not in unknowns]}.{did_you_mean(n, names)}"
            )
        if not isinstance(v, int | float):
            raise config_error(f"fit.fixed.{n} must be a number, got {v!r}.")
    free = tuple(i for i, n in enumerate(names) if n in unknowns)
    held = [i for i in range(len(names)) if i not in free]
    values = np.asarray(base.values(m.standard_parameters(arm)), dtype=float).copy()
    for n, v in fixed.items():
        values[names.index(n)] = float(v)

    def free_regressor(q, qd, qdd):
        return m.base_regressor(arm, q, qd, qdd, base)[..., list(free)]

    known = None
    if held:
        theta_known = values[held]

        def known(q, qd, qdd):
            return m.base_regressor(arm, q, qd, qdd, base)[..., held] @ theta_known

    return FitModel(arm, base, names, tuple(base.labels), regressor, reference, free, values, free_regressor, known)


SIGN_CONSTRAINED = ("I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2")


def bounds(names):
    lo = [0.0 if n in SIGN_CONSTRAINED else -np.inf for n in names]
    return lo, [np.inf] * len(names)


def consistency_checks(model: FitModel, theta: np.ndarray) -> list[dict[str, Any]]:
    """Physical-consistency checks of a base-parameter vector.

    Sign checks on the combinations that are positive for any physical arm (joint-axis inertias
    and first moments with ``r_i ≥ 0``, rotor inertia, friction), and positive definiteness of the
    mass matrix ``D(q2)`` (from the base regressor, so it holds for the combinations themselves) on
    a 5° grid of ``q2``. The masses themselves are not identifiable from motion, so no check on them.
    """
    import jax
    import jax.numpy as jnp

    rows = []
    for name, label, value in zip(model.names, model.labels, theta, strict=True):
        if name in SIGN_CONSTRAINED:
            rows.append({"check": f"{label} >= 0", "value": float(value), "ok": bool(value >= 0)})
    q2 = jnp.linspace(0, 2 * np.pi, 72, endpoint=False)
    q = jnp.stack([jnp.zeros_like(q2), q2], -1)

    def mass(qi):
        return jax.jacfwd(lambda a: model.regressor(qi, jnp.zeros(2), a) @ jnp.asarray(theta))(jnp.zeros(2))

    eig = np.linalg.eigvalsh(np.asarray(jax.vmap(mass)(q)))
    rows.append(
        {
            "check": "mass matrix D(q2) positive definite (min eigenvalue, all q2)",
            "value": float(eig.min()),
            "ok": bool(eig.min() > 0),
        }
    )
    return rows
