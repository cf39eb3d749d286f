"""Compiled pieces of the study runner, cached so that settings with the same static options
share their compiles: the noise draw, and each estimator as one ``jit(vmap)`` over trials.

The spectral noise path (``noise_path = "spectral"``) has its own pieces: the clean spectrum of
each parameter set, the noisy spectra drawn from it (``add_line_noise``), and the estimators'
spectrum fits (``equation_error_fit``, ``ml_fit``); no per-trial record is materialised."""

from __future__ import annotations

import time

import equinox as eqx
import jax

from .. import _platform
from ..estimate import equation_error_fit, make_estimator, ml_fit
from ..measure.noise import add_line_noise, add_noise
from ..measure.spectrum import fourier_coefficients
from ..simulation.open_loop import Record

__all__ = [
    "noisy_records",
    "estimator_fn",
    "clean_spectra",
    "noisy_spectra",
    "spectral_estimator_fn",
    "compiled",
    "freeze",
]


@eqx.filter_jit
def noisy_records(record: Record, keys, kind: str, level):
    """Each trial's record plus its own noise draw (``keys``: one key per trial)."""
    return jax.vmap(lambda r, k: add_noise(r, key=k, kind=kind, level=level))(record, keys)


@eqx.filter_jit
def clean_spectra(records: Record, excitation):
    """The projection spectrum of each (noise-free) record on a leading axis."""
    return jax.vmap(lambda r: fourier_coefficients(r, excitation))(records)


@eqx.filter_jit
def noisy_spectra(spectra, keys, level):
    """Each trial's spectrum with its own Gaussian noise drawn on the lines (``add_line_noise``)."""
    return jax.vmap(lambda s, k: add_line_noise(s, key=k, kind="gaussian", level=level))(spectra, keys)


#: The spectrum-level fit of each estimator the spectral path runs (``config.SPECTRAL_ESTIMATORS``).
SPECTRUM_FITS = {"equation_error": equation_error_fit, "ml": ml_fit}

_ESTIMATORS: dict = {}


def spectral_estimator_fn(name: str, unknowns: tuple, q0: tuple, options: tuple):
    """``jit(vmap(fit))`` over trials ``(spectrum, nominal arm)``, shared excitation and σ."""
    key = ("spectral", name, unknowns, q0, options)
    if key not in _ESTIMATORS:
        make_estimator(name, dict(options))  # the options, checked as for the time path
        fit = SPECTRUM_FITS[name]
        opts = {k: v for k, v in dict(options).items() if k != "method"}

        def one(spectrum, nominal, excitation, sigma):
            return fit(spectrum, nominal, unknowns=unknowns, q0=q0, noise_std=sigma, **opts)

        _ESTIMATORS[key] = jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))
    return _ESTIMATORS[key]


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
_platform.register_cache(_EXECUTABLES)  # emptied when the process nears its memory-map limit


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
