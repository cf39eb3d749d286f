"""Which standard parameters a written URDF or MJCF holds for an estimate's base parameters.

Motion identifies the base parameters ``β = K φ`` only (``jaxid.base_parameters``);
a file needs all ``14 n`` standard parameters ``φ``. The rule (``choose_standard_parameters``): among the
physically consistent ``φ`` (each link's pseudo-inertia ``⪰ 0``; armature, viscous and Coulomb friction
``≥ 0``; Wensing et al. 2017) with ``K φ = β``, the one closest to the nominal ``φ₀`` (the ``[arm]``
description's: its URDF or MJCF values with the ``[arm]`` options) in ``Σ_k s_k² (φ_k − φ₀_k)²``, where
``s_k`` is the RMS over ``STATES`` random states of the standard regressor's column ``k`` (the torque of
a unit change of that parameter alone; a parameter that never enters the torque: 1 % of the median).
It is solved with ``jaxid.estimate.consistency.consistent_least_squares`` over the log-Cholesky parametrisation:
``‖Y φ − Y φ_β‖²`` on the random states (``φ_β``: any vector with ``K φ_β = β``) plus ``PRIOR_WEIGHT``
times the scaled squared distance to ``φ₀`` (a penalty, so the minimiser ``φ₁`` is the rule's up to
``O(PRIOR_WEIGHT)``); then polished by the same fit without that pull, regularised towards ``φ₁``
instead (``ρ = 1e-12``, from ``φ₁``: the nearest consistent vector whose torque misfit is at round-off,
where one exists), and the kept columns are set exactly, ``φ_kept = β − K_dep φ_dep``. Where that
vector is physically consistent (relative tolerance ``TOLERANCE``; joint parameters that far below
0 set to 0), ``β`` is realisable and the file reproduces the estimate's torque to round-off.
Otherwise no consistent arm has the estimate's base parameters (e.g. IDIM-LS with a negative
friction): the file holds its **consistent projection**, the polished minimiser (the consistent arm
whose torque on the random states is closest to the estimate's, up to the ``1e-12`` pull towards
``φ₁``); the file header and the returned note say so, with the torque difference.

The files themselves: ``jaxid.fit.writeback`` (headers, ``export_arm_files``) and
``jaxid.fit.writeback_xml`` (the URDF and MJCF text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["STATES", "PRIOR_WEIGHT", "TOLERANCE", "ChosenParameters", "choose_standard_parameters"]

#: Random states ``(q, q', q'')`` on which torques are compared (q in ±π rad, q' in ±3 rad/s, q'' in
#: ±10 rad/s², ``jax.random.key(1)``): the base parameters' states, other draws.
STATES = 64
#: Weight of the scaled distance to the nominal standard parameters against the torque misfit.
PRIOR_WEIGHT = 1e-4
#: Relative tolerance of the consistency test of the exact vector (``is_physically_consistent``).
TOLERANCE = 1e-10


@dataclass(frozen=True)
class ChosenParameters:
    """The standard parameters written for one estimate.

    Attributes:
        standard: ``(14 n,)`` in ``SerialArm.standard_names`` order, physically consistent.
        realisable: whether a consistent arm has the estimate's base parameters (then ``standard``
            has them exactly); ``False``: ``standard`` is the consistent projection.
        mismatch: relative RMS difference on the random states between the torque of ``standard``
            and the estimate's (round-off when realisable).
        nominal_distance: ``‖s (φ − φ₀)‖ / ‖s φ₀‖``, how far the rule moved from the nominal arm.
    """

    standard: np.ndarray
    realisable: bool
    mismatch: float
    nominal_distance: float


def _states(arm, count: int):
    import jax

    kq, kv, ka = jax.random.split(jax.random.key(1), 3)
    shape = (count, arm.dof)
    return (
        jax.random.uniform(kq, shape, minval=-np.pi, maxval=np.pi),
        jax.random.uniform(kv, shape, minval=-3.0, maxval=3.0),
        jax.random.uniform(ka, shape, minval=-10.0, maxval=10.0),
    )


def choose_standard_parameters(arm, base, beta, *, nominal=None) -> ChosenParameters:
    """The physically consistent standard parameters written for the base parameters ``beta`` (the
    rule of the module docstring).

    Args:
        arm: the ``SerialArm`` (geometry, gravity, Coulomb slope; its standard parameters are the
            default nominal ``φ₀``).
        base: its ``BaseParameters`` (``jaxid.base_parameters(arm)``).
        beta: ``(r,)`` base parameter values.
        nominal: ``(14 n,)`` the nominal standard parameters (default ``arm``'s); need not be consistent.

    Host-side (one ``consistent_least_squares`` solve, compiled once per arm structure).
    """
    import jax.numpy as jnp

    from ..estimate.consistency import consistent_least_squares, is_physically_consistent
    from ..model import standard_parameters

    n = arm.dof
    k = np.asarray(base.matrix, dtype=float)
    s = k.shape[1]
    kept = list(base.independent)
    dep = [j for j in range(s) if j not in kept]
    beta = np.asarray(beta, dtype=float)
    phi0 = np.asarray(standard_parameters(arm) if nominal is None else nominal, dtype=float)
    target = phi0.copy()
    target[kept] = beta - k[:, dep] @ phi0[dep]
    w = np.asarray(arm.standard_regressor(*_states(arm, STATES))).reshape(-1, s)
    y = w @ target
    scale = np.sqrt(np.mean(w**2, axis=0))
    entering = scale > 1e-12 * scale.max()
    scale = np.where(entering, scale, 1e-2 * np.median(scale[entering]))
    root = math.sqrt(PRIOR_WEIGHT)
    rows = np.concatenate([w, root * np.diag(scale)])
    rhs = np.concatenate([y, root * scale * phi0])
    first = consistent_least_squares(
        jnp.asarray(rows), jnp.asarray(rhs), arm, prior=jnp.asarray(phi0), regularisation=1e-12, start_floor=1e-9
    )
    near = first.standard
    rows[len(w) :], rhs[len(w) :] = 0.0, 0.0  # the same shapes: the same compiled solver
    est = consistent_least_squares(
        jnp.asarray(rows), jnp.asarray(rhs), arm, prior=near, regularisation=1e-12, start=near, start_floor=1e-14
    )
    phi = np.asarray(est.standard, dtype=float)
    exact = phi.copy()
    exact[kept] = beta - k[:, dep] @ phi[dep]
    joints = exact[10 * n : 13 * n].reshape(3, n)  # Ia, fv, fc: round-off below 0 is 0
    floor = -TOLERANCE * np.abs(joints).max(axis=1, keepdims=True)
    exact[10 * n : 13 * n] = np.where((joints < 0) & (joints >= floor), 0.0, joints).reshape(-1)
    realisable = bool(is_physically_consistent(exact, tolerance=TOLERANCE))
    if realisable:
        phi = exact
    norm = max(float(np.linalg.norm(y)), 1e-300)
    mismatch = float(np.linalg.norm(w @ phi - y)) / norm
    distance = float(np.linalg.norm(scale * (phi - phi0)) / max(np.linalg.norm(scale * phi0), 1e-300))
    return ChosenParameters(phi, realisable, mismatch, distance)
