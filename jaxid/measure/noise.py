"""Measurement noise, added to a simulated record without re-simulating.

Two noise models for the joint angles (torques are taken as known exactly):

- ``"uniform"``: the paper's ``level * rand()``, uniform on ``[0, level)`` rad — **non-zero mean**
  ``level / 2`` and standard deviation ``level / √12`` (the paper uses ``level = 0.1``);
- ``"gaussian"``: zero-mean Gaussian with standard deviation ``level`` rad.

The mean of the uniform noise only moves the DC line, so it does not bias estimators that use the
excited lines; its standard deviation is what enters the Cramér–Rao bound.

**Spectral noise path** (``add_line_noise``): for white Gaussian noise of std ``σ`` on a record of
``P`` whole periods of ``N`` samples, everything ``fourier_coefficients`` computes from the angles
is a function of a few independent Gaussian blocks of the noise's orthonormal DFT coordinates
(per period: the DC, the ``2L`` line coordinates, the ``2 n_o`` coordinates of the other harmonics
up to ``distortion_harmonics``, and the rest; each split into its mean over the periods and the
period-to-period deviations). ``add_line_noise`` draws those blocks directly, instead of ``N P``
samples per channel and an FFT: per period and line the phasor noise is complex Gaussian with
independent real and imaginary parts of variance ``2σ²/N`` each (``2σ²/(N P)`` after averaging
the periods: ``Re E = (2/M) Σ e_n cos ω t_n`` has variance ``(4/M²) σ² Σ cos² ω t_n = 2σ²/M``
for ``M = N P`` samples, and the cross terms vanish on whole periods), the DC noise ``N(0, σ²/N)``
per period, and the energies of the other blocks are (non-central) χ² variables whose
non-centrality is the clean record's energy there. The result has exactly the distribution of
``fourier_coefficients(add_noise(record, kind="gaussian"), …)`` when the clean record is in
steady state (its periods equal). The paper's uniform noise keeps the time-domain path.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..types import Record
from .spectrum import _STEADY_THRESHOLD, Spectrum, line_noise_variance

__all__ = ["NOISE_KINDS", "add_noise", "noise_draws", "noise_std", "noise_mean", "add_line_noise", "line_noise_draws"]

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


class _Stream:
    """Slices of one normal and one uniform draw: two random-bit kernels for the whole trial.

    (Each ``jax.random`` call site compiles its own kernel, and XLA:CPU takes ~1 s per kernel.)
    """

    def __init__(self, key: Array, normals: int, uniforms: int, dtype):
        kn, ku = jax.random.split(key)
        self._n = jax.random.normal(kn, (normals,), dtype)
        self._u = jax.random.uniform(ku, (uniforms,), dtype)
        self._i = self._j = 0

    def normal(self, shape: tuple[int, ...]) -> Array:
        size = math.prod(shape)
        out = self._n[self._i : self._i + size].reshape(shape)
        self._i += size
        return out

    def uniform(self, shape: tuple[int, ...]) -> Array:
        size = math.prod(shape)
        out = self._u[self._j : self._j + size].reshape(shape)
        self._j += size
        return out


_CANDIDATES = 8


def _gamma(stream: _Stream, shape_parameter: float, shape: tuple[int, ...]) -> Array:
    """Gamma(``shape_parameter``, 1) variates by Marsaglia–Tsang with 8 candidates drawn at once.

    ``jax.random.gamma`` compiles a rejection ``while_loop`` per call site (seconds each); here the
    candidates are drawn in parallel and the first accepted one is taken. For shape ≥ 1 each
    candidate is accepted with probability ≥ 0.95, so all 8 are rejected with probability
    < 4e-11 (the last candidate is then used). Shapes below 1 use ``Gamma(a) = Gamma(a + 1) U^{1/a}``.
    """
    a = float(shape_parameter)
    boost = a < 1.0
    d = (a + 1.0 if boost else a) - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    x = stream.normal((_CANDIDATES, *shape))
    u = stream.uniform((_CANDIDATES, *shape))
    v = (1.0 + c * x) ** 3
    safe_v = jnp.where(v > 0, v, 1.0)
    accept = (v > 0) & (jnp.log(u) < 0.5 * x * x + d - d * safe_v + d * jnp.log(safe_v))
    first = jnp.argmax(jnp.concatenate([accept[:-1], jnp.ones_like(accept[-1:])]), axis=0)
    out = d * jnp.take_along_axis(safe_v, first[None], axis=0)[0]
    u_boost = stream.uniform(shape)
    if boost:
        out = out * u_boost ** (1.0 / a)
    return out


def _energy(stream: _Stream, clean: Array, sigma: Array, dof: int) -> Array:
    """``||c + σ z||²`` for ``z ~ N(0, I_dof)`` and ``||c||² = clean`` (per channel): a scaled
    non-central χ² with ``dof`` degrees of freedom, drawn as ``(√clean + σ z₁)² + σ² χ²_{dof−1}``.
    Always takes the same number of draws from ``stream``."""
    z = stream.normal(clean.shape)
    chi2 = 2.0 * _gamma(stream, max(dof - 1, 1) / 2.0, clean.shape)
    if dof <= 0:
        return jnp.zeros_like(clean)
    out = (jnp.sqrt(jnp.maximum(clean, 0.0)) + sigma * z) ** 2
    return out + sigma**2 * chi2 if dof > 1 else out


# Draws per channel taken by one _energy call.
_ENERGY_NORMALS = 1 + _CANDIDATES
_ENERGY_UNIFORMS = _CANDIDATES + 1


def add_line_noise(
    spectrum: Spectrum,
    *,
    key: Array,
    kind: NoiseKind = "gaussian",
    level: float | Array = 0.1,
    steady_rtol: float = 1e-6,
) -> Spectrum:
    """The spectrum of the noisy record, drawn directly from the clean record's spectrum.

    Same distribution as ``fourier_coefficients(add_noise(record, key=…, kind="gaussian",
    level=σ), lines)`` for ``spectrum = fourier_coefficients(record, lines)`` of a steady clean
    record (see the module docstring): ``Q``, its per-line variance, the per-sample noise and
    residual std, the DC, the distortion ratio and its floor, the drift and the steady test. The
    torques are noise-free and kept. A few dozen random numbers per trial instead of ``2 N P``
    samples and an FFT; the realisations differ from the time-domain path's (same distribution,
    not the same numbers).

    Args:
        spectrum: the clean record's spectrum (``method="projection"``, whole periods).
        key: PRNG key.
        kind: only ``"gaussian"`` (uniform noise has no exact line-domain form: use ``add_noise``).
        level: noise std ``σ`` [rad] (may be traced; a sweep over levels does not recompile).
        steady_rtol: as in ``fourier_coefficients``.

    Raises:
        ValueError: a kind other than Gaussian; a spectrum not from whole periods by projection.
    """
    _check_kind(kind)
    if kind != "gaussian":
        raise ValueError(
            f"The spectral noise path is exact for Gaussian noise only, got kind={kind!r}; add "
            "uniform noise to the record (add_noise) and take its spectrum instead."
        )
    p_float = float(spectrum.periods)
    if spectrum.method != "projection" or not p_float.is_integer() or spectrum.distortion_harmonics < 1:
        raise ValueError(
            "add_line_noise needs the spectrum of whole periods by projection "
            "(fourier_coefficients(record, lines) with the default method)."
        )
    n, p, lines = spectrum.samples_per_period, int(p_float), len(spectrum.lines)
    khigh = spectrum.distortion_harmonics
    others = khigh - lines  # non-excited harmonics 1 … khigh
    rest = n - 1 - 2 * lines  # per period: the non-DC, non-line coordinates
    dtype = spectrum.q_mean.dtype
    sigma = jnp.asarray(level, dtype=dtype)
    stream = _Stream(key, 4 * p * lines + 2 * p + 3 * 2 * _ENERGY_NORMALS, 3 * 2 * _ENERGY_UNIFORMS, dtype)

    # Per-period line phasor noise and DC noise (drawn in full: they enter several statistics).
    shape = (p, lines, 2)
    d = jnp.sqrt(2.0 / n) * sigma * (stream.normal(shape) + 1j * stream.normal(shape))
    per = spectrum.Q[None] + d
    q = jnp.mean(per, axis=0)
    dc = sigma / jnp.sqrt(n) * stream.normal((p, 2))
    q_mean = spectrum.q_mean + jnp.mean(dc, axis=0)

    # Energies [rad² · samples] of the other blocks, with the clean record's energy in them.
    p_exc0 = (n / 2) ** 2 * jnp.sum(jnp.abs(spectrum.Q) ** 2, axis=0)
    p_oth0 = jnp.where(p_exc0 > 0, spectrum.distortion**2 * p_exc0, 0.0)
    e_oth0 = p * (2.0 / n) * p_oth0  # period-averaged other harmonics, over the P periods
    e_rest0 = jnp.maximum(spectrum.residual_std**2 * p * rest - e_oth0, 0.0)
    e_oth = _energy(stream, e_oth0, sigma, 2 * others)
    e_rest = _energy(stream, e_rest0, sigma, rest - 2 * others)
    e_dev = _energy(stream, jnp.zeros(2, dtype), sigma, (p - 1) * rest)  # period deviations
    residual_std = jnp.sqrt((e_oth + e_rest + e_dev) / (p * rest))

    p_exc = (n / 2) ** 2 * jnp.sum(jnp.abs(q) ** 2, axis=0)
    distortion = jnp.sqrt(e_oth * n / (2 * p) / p_exc)
    if p >= 2:
        dev_lines = (n / 2) * jnp.sum(jnp.abs(per - q[None]) ** 2, axis=(0, 1))
        dev_dc = n * jnp.sum((dc - jnp.mean(dc, axis=0)) ** 2, axis=0)
        noise_std = jnp.sqrt((e_dev + dev_lines + dev_dc) / (n * (p - 1)))
        variance = jnp.sum(jnp.abs(per - q[None]) ** 2, axis=0) / (p - 1) / p
        scale_q = jnp.max(jnp.abs(q), axis=0)
        change = jnp.abs(per[-1] - per[0])
        drift = jnp.max(change, axis=0) / scale_q
        expected = 8.0 * residual_std**2 / n
        steady = jnp.all(change**2 <= _STEADY_THRESHOLD * expected + (steady_rtol * scale_q) ** 2)
    else:
        noise_std = residual_std
        variance = jnp.broadcast_to(line_noise_variance(residual_std, n, p), q.shape)
        drift = jnp.zeros(2, dtype)
        steady = jnp.asarray(True)
    floor = jnp.sqrt(others * n * noise_std**2 / p / p_exc)
    return spectrum.replace(
        Q=q,
        noise_variance=variance,
        noise_std=noise_std,
        residual_std=residual_std,
        q_mean=q_mean,
        distortion=distortion,
        distortion_floor=floor,
        drift=drift,
        steady=steady,
    )


def line_noise_draws(
    spectrum: Spectrum, *, key: Array, draws: int, kind: NoiseKind = "gaussian", level: float | Array = 0.1
) -> Spectrum:
    """``draws`` noisy spectra of one clean spectrum on a new leading axis (keys split from ``key``)."""
    if not (isinstance(draws, int) and draws >= 1):
        raise ValueError(f"draws must be a positive integer, got {draws!r}.")
    keys = jax.random.split(key, draws)
    return jax.vmap(lambda k: add_line_noise(spectrum, key=k, kind=kind, level=level))(keys)
