"""Measurement noise, added to a simulated record without re-simulating.

Two noise models for the joint angles (torques are taken as known exactly):

- ``"uniform"``: the paper's ``level * rand()``, uniform on ``[0, level)`` rad — **non-zero mean**
  ``level / 2`` and standard deviation ``level / √12`` (the paper uses ``level = 0.1``);
- ``"gaussian"``: zero-mean Gaussian with standard deviation ``level`` rad.

The mean of the uniform noise only moves the DC line, so it does not bias estimators that use the
excited lines; its standard deviation is what enters the Cramér–Rao bound.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
from jaxtyping import Array

from .simulation import Record

__all__ = ["NOISE_KINDS", "add_noise", "noise_draws", "noise_std", "noise_mean"]

NOISE_KINDS = ("uniform", "gaussian")
NoiseKind = Literal["uniform", "gaussian"]


def _check_kind(kind: str) -> None:
    if kind not in NOISE_KINDS:
        raise ValueError(f"Unknown noise kind {kind!r}; use 'uniform' (the paper's level*rand()) or 'gaussian'.")


def noise_std(kind: NoiseKind, level: float) -> float:
    """Standard deviation [rad] of one noise sample."""
    _check_kind(kind)
    return level / math.sqrt(12.0) if kind == "uniform" else level


def noise_mean(kind: NoiseKind, level: float) -> float:
    """Mean [rad] of one noise sample."""
    _check_kind(kind)
    return level / 2 if kind == "uniform" else 0.0


def add_noise(record: Record, *, key: Array, kind: NoiseKind = "uniform", level: float | Array = 0.1) -> Record:
    """A copy of ``record`` with noise added to the angles ``q``.

    ``level`` may be traced (a sweep over noise levels does not recompile); ``kind`` is static.
    Works under ``jit``/``vmap`` (vmap over keys for many draws, see ``noise_draws``).
    """
    _check_kind(kind)
    shape = record.q.shape
    if kind == "uniform":
        noise = level * jax.random.uniform(key, shape, dtype=record.q.dtype)
    else:
        noise = level * jax.random.normal(key, shape, dtype=record.q.dtype)
    return record.replace(q=record.q + noise)


def noise_draws(
    record: Record, *, key: Array, draws: int, kind: NoiseKind = "uniform", level: float | Array = 0.1
) -> Record:
    """``draws`` noisy copies of one record, stacked on a new leading axis (keys split from ``key``)."""
    if not (isinstance(draws, int) and draws >= 1):
        raise ValueError(f"draws must be a positive integer, got {draws!r}.")
    keys = jax.random.split(key, draws)
    return jax.vmap(lambda k: add_noise(record, key=k, kind=kind, level=level))(keys)
