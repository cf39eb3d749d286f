"""The model of a fit: the arm, its base parameters, the free/fixed split and consistency checks.

The arm is any ``AbstractArm`` of ``n`` joints (a ``TwoLinkArm`` from an ``[arm]`` description, a
``SerialArm`` from a URDF); the model is its base regressor (``jaxid.base_parameters``): names
``base.names`` (each base parameter's leading standard parameter), labels ``base.labels``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config.fit import FitConfig
from ..config.fit_checks import config_error
from ..estimate.logs.model import ConsistentMap, RegressionModel
from ..types import did_you_mean

__all__ = [
    "FitModel",
    "BaseColumns",
    "HeldTorque",
    "StandardColumns",
    "build_model",
    "SIGN_CONSTRAINED",
    "SIGN_CONSTRAINED_PREFIXES",
    "MASS_POSTURES",
    "sign_constrained",
    "regression_model",
    "nonnegative_names",
    "consistency_checks",
]


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
    #: ``fit.compare``'s parameter sets as base parameters, ``{label: (p,)}``.
    compare: dict[str, np.ndarray] = field(default_factory=dict)
    _mass: Any = field(default=None, repr=False)

    @property
    def free_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.free)

    @property
    def dof(self) -> int:
        """The number of joints ``n``."""
        return int(self.arm.dof)

    def mass_matrices(self, theta) -> np.ndarray:
        """``D(q_k)`` ``(MASS_POSTURES, n, n)`` [kg m²] of the base parameters ``theta`` at ``mass_postures``:
        ``∂(Y_B(q, 0, q'') θ)/∂q''`` (compiled once per model)."""
        import jax
        import jax.numpy as jnp

        from ..estimate.logs.data import model_torque

        if self._mass is None:
            q = jnp.asarray(mass_postures(self.arm))
            zero = jnp.zeros(self.dof)

            def mass(th, qi):
                return jax.jacfwd(lambda a: model_torque(self.regressor, th, qi, zero, a))(zero)

            self._mass = jax.jit(lambda th: jax.vmap(mass, (None, 0))(th, q))
        return np.asarray(self._mass(jnp.asarray(theta, dtype=float)))

    def embed(self, est):
        """The estimate as a full base vector (fixed parameters at their values, std 0)."""
        from ..estimate.logs import Identification

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
            est.status,
            getattr(est, "standard", None),
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

    if not isinstance(arm, m.TwoLinkArm):
        # The same model, its torque by one Newton–Euler pass (``BaseColumns.torque``) instead of ``Y θ``.
        regressor = BaseColumns(arm, base, tuple(range(len(names))))
        # All free: the same object, so that the estimators and the metrics share compiled programs.
        free_regressor = regressor if not held else BaseColumns(arm, base, free)
        if held:
            known = HeldTorque(BaseColumns(arm, base, tuple(held)), values[held])

    compare = {k: np.asarray(base.values(m.standard_parameters(a))) for k, a in config.compare.items()}
    return FitModel(
        arm, base, names, tuple(base.labels), regressor, reference, free, values, free_regressor, known, compare
    )


class StandardColumns:
    """``Y(q, q', q'')`` of all ``14 n`` standard parameters of a ``SerialArm`` with the ``zero`` columns set
    to 0 (e.g. the Coulomb columns of a model without Coulomb friction). Hashable by identity, so one
    compile per object (a bound ``arm.standard_regressor`` is not hashable: the arm holds arrays)."""

    def __init__(self, arm, zero: tuple[int, ...] = ()):
        self.arm = arm
        keep = np.ones(len(arm.standard_names))
        keep[list(zero)] = 0.0
        self.keep = keep

    def __call__(self, q, qd, qdd):
        import jax.numpy as jnp

        return self.arm.standard_regressor(q, qd, qdd) * jnp.asarray(self.keep)


class BaseColumns:
    """Columns ``columns`` of an arm's base regressor, ``Y_B[..., columns]`` ``(..., n, len(columns))``, and
    its product with parameters computed without forming it (``jaxid.estimate.logs.data.Regressor``).

    ``Y_B[..., columns] θ = Y φ``: the standard regressor times the standard vector ``φ`` holding ``θ`` at
    the kept standard columns ``base.independent[columns]`` and 0 elsewhere; the inverse dynamics are
    linear in ``φ``, so this is ``inverse_dynamics`` of the arm with standard parameters ``φ`` (one
    Newton–Euler pass instead of one per standard parameter). Hashable by identity (a static argument).
    """

    def __init__(self, arm, base, columns: tuple[int, ...]):
        self.arm, self.base, self.columns = arm, base, tuple(columns)
        self.standard_columns = tuple(base.independent[i] for i in self.columns)  # θ's entries in φ

    def __call__(self, q, qd, qdd):
        from ..model import base_regressor

        return base_regressor(self.arm, q, qd, qdd, self.base)[..., list(self.columns)]

    def standard(self, theta):
        """The standard vector ``φ`` ``(14 n,)``: ``θ`` at the kept standard columns, 0 elsewhere."""
        import jax.numpy as jnp

        theta = jnp.asarray(theta)
        return jnp.zeros(len(self.base.standard_names), theta.dtype).at[jnp.asarray(self.standard_columns)].set(theta)

    def torque(self, theta, q, qd, qdd):
        """``Y_B[..., columns](q, q', q'') θ`` [N m], ``(..., n)``."""
        return _inverse_dynamics()(self.arm, self.standard(theta), q, qd, qdd)


class HeldTorque:
    """The torque of the base parameters a fit holds (``fit.fixed`` and the ones not in ``fit.unknowns``):
    ``held(q, q', q'') = Y_B[..., columns] θ_held`` (``jaxid.estimate.logs.data.Known``), and ``standard()``,
    their standard vector, so that a simulation of the free model plus this torque can run on the arm's
    unrolled dynamics at ``free.standard(θ) + held.standard()`` (``jaxid.estimate.logs.stepping``: the
    dynamics are linear in the standard vector). Hashable by identity (a static argument)."""

    def __init__(self, columns: BaseColumns, theta):
        self.columns, self.theta = columns, np.asarray(theta, dtype=float)
        self.arm = columns.arm

    def __call__(self, q, qd, qdd):
        return self.columns.torque(self.theta, q, qd, qdd)

    def standard(self):
        """The held parameters' standard vector ``(14 n,)`` (0 at every other column)."""
        return self.columns.standard(self.theta)


@functools.cache
def _inverse_dynamics():
    """The arm's inverse dynamics at a standard vector, jitted: the vector is then traced, so an identified
    one that the arm's constructor would refuse (e.g. a negative friction) is not refused."""
    import jax

    return jax.jit(
        lambda arm, standard, q, qd, qdd: arm.with_standard_parameters(standard).inverse_dynamics(q, qd, qdd)
    )


#: The two-link arm's base parameters that are non-negative for any physical arm (joint-axis inertias,
#: first moments with ``r_i ≥ 0``, rotor inertia, friction).
SIGN_CONSTRAINED = ("I1", "m1r1", "I2", "m2r2", "Ir", "fv1", "fv2", "fc1", "fc2")
#: Any other arm (a ``SerialArm``): armature ``Ia<i>``, viscous ``fv<i>`` and Coulomb ``fc<i>`` friction
#: are non-negative where the base parameter is that single standard parameter (its label is its name:
#: no other parameter folded into it; e.g. an armature merged into a link inertia is not constrained).
SIGN_CONSTRAINED_PREFIXES = ("Ia", "fv", "fc")
#: Postures at which a general arm's mass matrix is checked (uniform within the joint limits, clipped
#: to ±π rad; ``jax.random.key(0)``).
MASS_POSTURES = 64


def sign_constrained(model: FitModel) -> tuple[str, ...]:
    """The base parameters of ``model`` that must be non-negative (``SIGN_CONSTRAINED`` for the two-link
    arm; the rule of ``SIGN_CONSTRAINED_PREFIXES`` otherwise)."""
    if _two_link(model):
        return SIGN_CONSTRAINED
    return nonnegative_names(model.names, model.labels)


def nonnegative_names(names, labels) -> tuple[str, ...]:
    """The base parameters of a ``SerialArm`` that are non-negative: a friction or armature not merged
    with any other parameter (``SIGN_CONSTRAINED_PREFIXES``; its label is its name)."""
    out = []
    for name, label in zip(names, labels, strict=True):
        prefix = name.rstrip("0123456789")
        if prefix in SIGN_CONSTRAINED_PREFIXES and prefix != name and label == name:
            out.append(name)
    return tuple(out)


def regression_model(model: FitModel, prior: np.ndarray | None = None) -> RegressionModel:
    """The fit's free parameters as the estimators see them (``jaxid.estimate.logs.RegressionModel``):
    regressor, names, the fixed parameters' torque, the sign constraints and, for a ``SerialArm`` with
    every base parameter free, the consistent map (prior: ``prior``, else the arm's own standard
    parameters, e.g. its URDF's)."""
    from ..model import SerialArm

    consistent = None
    if isinstance(model.arm, SerialArm) and len(model.free) == len(model.names):
        consistent = ConsistentMap(model.arm, StandardColumns(model.arm), model.base.values, prior)
    nonnegative = tuple(n for n in sign_constrained(model) if n in model.free_names)
    return RegressionModel(model.free_regressor, model.free_names, model.known, nonnegative, consistent)


def _two_link(model: FitModel) -> bool:
    from ..model import TwoLinkArm

    return isinstance(model.arm, TwoLinkArm)


def consistency_checks(model: FitModel, theta: np.ndarray) -> list[dict[str, Any]]:
    """Physical-consistency checks of a base-parameter vector.

    Sign checks on the combinations that are positive for any physical arm (``sign_constrained``:
    for the two-link arm joint-axis inertias and first moments with ``r_i ≥ 0``, rotor inertia,
    friction; for any other arm armature and friction where they are base parameters on their own),
    and positive definiteness of the mass matrix ``D(q)`` (from the base regressor, so it holds for
    the combinations themselves): for the two-link arm on a 5° grid of ``q2`` (``D`` does not depend
    on ``q1``), for any other arm at ``MASS_POSTURES`` random postures. The masses themselves are
    not identifiable from motion, so no check on them.
    """
    import jax
    import jax.numpy as jnp

    rows = []
    constrained = sign_constrained(model)
    for name, label, value in zip(model.names, model.labels, theta, strict=True):
        if name in constrained:
            rows.append({"check": f"{label} >= 0", "value": float(value), "ok": bool(value >= 0)})
    if not _two_link(model):
        eig = np.linalg.eigvalsh(np.asarray(model.mass_matrices(theta)))
        rows.append(
            {
                "check": f"mass matrix D(q) positive definite (min eigenvalue, {MASS_POSTURES} random postures)",
                "value": float(eig.min()),
                "ok": bool(eig.min() > 0),
            }
        )
        return rows
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


def mass_postures(arm, count: int = MASS_POSTURES) -> np.ndarray:
    """``(count, n)`` postures uniform within the joint limits (clipped to ±π rad), ``jax.random.key(0)``."""
    import jax

    n = arm.dof
    limits = np.asarray(getattr(arm, "position_limits", [(-np.pi, np.pi)] * n), dtype=float)
    lo, hi = np.clip(limits[:, 0], -np.pi, np.pi), np.clip(limits[:, 1], -np.pi, np.pi)
    u = np.asarray(jax.random.uniform(jax.random.key(0), (count, n)))
    return lo + (hi - lo) * u
