"""Identifiable (base) parameters: which combinations of the standard parameters motion data fix.

The inverse dynamics are linear in the standard parameters, ``tau = Y(q, q', q'') φ``. Some columns
of ``Y`` are zero or linear combinations of others for *every* motion (e.g. ``m1`` never enters
except through ``I1`` and ``m1 r1``; for the two-link arm ``Y[m2] = l1² Y[I1] + l1 Y[m1r1]``), so only
``r = rank`` combinations ``β = K φ`` can be identified from motion, whatever the excitation:
the **base parameters**. They are found numerically (Gautier's method, generic in the arm): stack
``Y`` at random states, take the rank from a QR factorisation with column pivoting, keep the first
independent columns in the standard order (so the labels read ``I1 + 0.04 m2``), and express each
dependent column in the kept ones by least squares. Then ``Y φ = Y_B (K φ)`` with ``Y_B`` the kept
columns (``base_regressor``). Host-side (numpy/scipy); call it once per arm structure, outside
``jit``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..types import require_float64
from .interface import AbstractArm

__all__ = ["BaseParameters", "base_parameters", "base_regressor"]


class BaseParameters(eqx.Module):
    """The identifiable combinations ``base = K @ standard`` of an arm's standard parameters.

    Attributes:
        standard_names: names of the standard parameters (the columns of ``matrix``).
        independent: indices of the standard parameters kept as the base columns (static).
        labels: one readable label per base parameter, e.g. ``"I1 + 0.04 m2"`` (static).
        rank: the numerical rank of the stacked regressor (``len(independent)``).
        matrix: ``K`` of shape ``(rank, len(standard_names))``: 1 at each kept column, the
            combination coefficients at the dependent ones, 0 for parameters that never enter.
    """

    standard_names: tuple[str, ...] = eqx.field(static=True)
    independent: tuple[int, ...] = eqx.field(static=True)
    labels: tuple[str, ...] = eqx.field(static=True)
    rank: int = eqx.field(static=True)
    matrix: Float[Array, "r s"]

    @property
    def names(self) -> tuple[str, ...]:
        """The standard names of the kept columns (each base parameter's leading term)."""
        return tuple(self.standard_names[i] for i in self.independent)

    @property
    def dependent(self) -> tuple[str, ...]:
        """Standard parameters that are not identifiable on their own (they only enter through the
        combinations, or not at all)."""
        return tuple(n for i, n in enumerate(self.standard_names) if i not in self.independent)

    def values(self, standard: Float[ArrayLike, "*b s"]) -> Float[Array, "*b r"]:
        """The base parameters ``K @ standard`` of a standard vector (trailing axis)."""
        return jnp.asarray(standard) @ self.matrix.T

    def __str__(self) -> str:
        return f"{self.rank} base parameters: " + ", ".join(self.labels)


def _label(names: tuple[str, ...], row: np.ndarray, lead: int) -> str:
    text = names[lead]
    for j, c in enumerate(row):
        if j == lead or c == 0:
            continue
        sign = "-" if c < 0 else "+"
        coef = f"{abs(c):.6g}"
        text += f" {sign} {names[j]}" if coef == "1" else f" {sign} {coef} {names[j]}"
    return text


def base_parameters(
    arm: AbstractArm,
    *,
    samples: int = 64,
    key: jax.Array | None = None,
    tolerance: float = 1e-8,
) -> BaseParameters:
    """The base parameters of ``arm``'s structure (its known geometry: lengths, gravity, gear ratio).

    Args:
        arm: one arm (no batch axes); only its known geometry matters, not its inertial values.
        samples: random states ``(q, q', q'')`` at which the regressor is stacked (``samples · n``
            rows; q uniform in ±π rad, q' in ±3 rad/s, q'' in ±10 rad/s²).
        key: ``jax.random`` key for the states (default ``jax.random.key(0)``).
        tolerance: relative threshold on the pivots of the column-normalised regressor.

    For ``TwoLinkArm`` the answer is 11 combinations: ``I1 + l1² m2``, ``m1r1 + l1 m2``, ``I2``,
    ``m2r2``, ``Ir``, ``fv1``, ``fv2``, ``fc1``, ``fc2``, ``off1``, ``off2`` (``m1`` and ``m2``
    alone are not identifiable). Raises ``ValueError`` for a batched arm, float32, too few samples,
    or when the kept columns do not reproduce the dependent ones (a structure the sampling cannot
    resolve: raise ``samples``).
    """
    require_float64("base_parameters")
    names = tuple(arm.standard_names)
    if jnp.ndim(arm.standard_parameters()) != 1:
        raise ValueError("base_parameters needs one arm without batch axes (take arm[i] with jax.tree.map).")
    if not (isinstance(samples, int) and samples * arm.dof >= len(names)):
        raise ValueError(f"samples must be an integer with samples · dof ≥ {len(names)}, got {samples!r}.")
    key = jax.random.key(0) if key is None else key
    kq, kv, ka = jax.random.split(key, 3)
    shape = (samples, arm.dof)
    q = jax.random.uniform(kq, shape, minval=-np.pi, maxval=np.pi)
    qd = jax.random.uniform(kv, shape, minval=-3.0, maxval=3.0)
    qdd = jax.random.uniform(ka, shape, minval=-10.0, maxval=10.0)
    w = np.asarray(arm.standard_regressor(q, qd, qdd)).reshape(-1, len(names))

    norms = np.linalg.norm(w, axis=0)
    present = norms > tolerance * norms.max()
    scaled = np.where(present, w / np.where(present, norms, 1.0), 0.0)
    # Numerical rank: QR with column pivoting on the column-normalised regressor.
    import scipy.linalg  # imported when first needed: scipy takes ~0.9 s to import

    r = scipy.linalg.qr(scaled, mode="r", pivoting=True)[0]
    pivots = np.abs(np.diag(r))
    rank = int(np.sum(pivots > tolerance * pivots[0]))
    # Keep the first independent columns in the standard order (Gram–Schmidt, re-orthogonalised).
    basis: list[np.ndarray] = []
    kept: list[int] = []
    for j in np.flatnonzero(present):
        v = scaled[:, j]
        for _ in range(2):
            for b in basis:
                v = v - (b @ v) * b
        if np.linalg.norm(v) > tolerance:
            basis.append(v / np.linalg.norm(v))
            kept.append(int(j))
    if len(kept) != rank:
        raise ValueError(
            f"base_parameters: {len(kept)} independent columns in order but rank {rank}; "
            "raise samples or loosen tolerance."
        )
    dependent = [j for j in range(len(names)) if j not in kept]
    k = np.zeros((rank, len(names)))
    k[np.arange(rank), kept] = 1.0
    if dependent:
        beta = np.linalg.lstsq(w[:, kept], w[:, dependent], rcond=None)[0]
        residual = w[:, dependent] - w[:, kept] @ beta
        if np.any(np.linalg.norm(residual, axis=0) > 1e-8 * np.maximum(np.linalg.norm(w[:, dependent], axis=0), 1.0)):
            raise ValueError("base_parameters: a dependent column is not reproduced by the kept ones; raise samples.")
        # Drop coefficients whose contribution is round-off.
        negligible = np.abs(beta) * norms[kept][:, None] <= 1e-10 * np.maximum(norms[dependent][None, :], 1e-300)
        # A parameter that never enters (its column zero up to round-off) gets no coefficient at all.
        negligible |= ~present[dependent][None, :]
        k[:, dependent] = np.where(negligible, 0.0, beta)
    labels = tuple(_label(names, k[i], kept[i]) for i in range(rank))
    return BaseParameters(
        standard_names=names, independent=tuple(kept), labels=labels, rank=rank, matrix=jnp.asarray(k)
    )


def base_regressor(
    arm: AbstractArm,
    q: Float[ArrayLike, "*b n"],
    qd: Float[ArrayLike, "*b n"],
    qdd: Float[ArrayLike, "*b n"],
    base: BaseParameters,
) -> Float[Array, "*b n r"]:
    """``Y_B`` with ``inverse_dynamics(arm, q, qd, qdd) == Y_B @ base.values(standard_parameters(arm))``.

    The kept columns of ``standard_regressor``; traceable (``base`` is static but for ``matrix``).
    """
    return arm.standard_regressor(q, qd, qdd)[..., list(base.independent)]
