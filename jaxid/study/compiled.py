"""Compiled pieces of the study runner, cached so that settings with the same static options
share their compiles: the noise draw, and each estimator as one ``jit(vmap)`` over trials."""

from __future__ import annotations

import time

import equinox as eqx
import jax

from ..estimators import make_estimator
from ..measurement import add_noise
from ..simulation import Record

__all__ = ["noisy_records", "estimator_fn", "compiled", "freeze"]


@eqx.filter_jit
def noisy_records(record: Record, keys, kind: str, level):
    """Each trial's record plus its own noise draw (``keys``: one key per trial)."""
    return jax.vmap(lambda r, k: add_noise(r, key=k, kind=kind, level=level))(record, keys)


_ESTIMATORS: dict = {}


def estimator_fn(name: str, unknowns: tuple, q0: tuple, options: tuple):
    """``jit(vmap(estimator))`` over trials ``(record, nominal arm)``, shared excitation and σ."""
    key = (name, unknowns, q0, options)
    if key not in _ESTIMATORS:
        estimator = make_estimator(name, dict(options))

        def one(record, nominal, excitation, sigma):
            return estimator(record, excitation, nominal, unknowns=unknowns, q0=q0, noise_std=sigma)

        # Estimators run on one device per process. Splitting them over several XLA host devices
        # of one process can deadlock in jaxlib's batched LAPACK kernels (docs/lapack-deadlock.md);
        # the simulation, which needs no LAPACK, is the part sharded over devices.
        _ESTIMATORS[key] = jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))
    return _ESTIMATORS[key]


_EXECUTABLES: dict = {}


def compiled(key, jitted, args) -> tuple:
    """Ahead-of-time compile ``jitted`` for ``args`` once; return ``(executable, compile seconds)``."""
    leaves, treedef = jax.tree.flatten(args)
    sig = (key, treedef, tuple((x.shape, str(x.dtype), str(getattr(x, "sharding", ""))) for x in leaves))
    if sig in _EXECUTABLES:
        return _EXECUTABLES[sig], 0.0
    t0 = time.perf_counter()
    exe = jitted.lower(*args).compile()
    _EXECUTABLES[sig] = exe
    return exe, time.perf_counter() - t0


def freeze(value):
    """A hashable copy of nested dicts and lists (estimator options as a cache key)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value
