"""Joint velocities and accelerations from noisy, periodic angle records.

The time-domain baselines (RLS, IDIM-LS) regress the torque on ``Y(q, q', q'')``, so they need
``q'`` and ``q''`` from the measured angles. jaxid's records hold an integer number ``P`` of whole
periods of a periodic steady state (``M = P·N`` samples, no repeated end point), so every filter
here works on the record as **one period of a periodic signal**: it is zero-phase, has no start-up
transient, and is exact for a noise-free periodic signal inside its pass band. It is non-causal
(it uses the whole record), as offline inverse-dynamics identification (IDIM) usually is.

Two methods (``method``):

- ``"fourier"`` — differentiation in the frequency domain: ``Q_k = FFT(q)``, keep a set of bins,
  multiply by ``jω_k`` and ``(jω_k)²``, inverse FFT. Which bins are kept (``keep``):

  - ``"excited"``: DC and the excited lines of the multisine only (harmonic ``k`` of ``ω_f`` with
    ``k`` in ``excitation.lines``). Least noise; drops the harmonics the nonlinear arm
    generates itself (small at small amplitudes, a bias source at large ones).
  - ``"band"``: every harmonic ``0 … cutoff`` of ``ω_f`` (``cutoff`` in units of ``ω_f``;
    default ``2 · max excited harmonic``). Keeps the arm's own distortion, at the price of noise
    in ``q''`` that grows like ``cutoff^{5/2}``.

  - ``"detected"``: the excited lines, plus every other harmonic ``≤ cutoff`` whose power in
    either channel exceeds ``threshold`` times the noise floor (``M σ²``, ``σ²`` from
    ``noise_variance`` over the bins above ``cutoff``). Adapts to the amplitude: at small
    amplitudes it is ``"excited"``, at large ones it also keeps the arm's strong distortion lines.

  With ``P > 1`` only the bins at multiples of ``P`` (the harmonics of ``ω_f``) are kept, which
  averages the noise over the periods.
- ``"butterworth"`` — a zero-phase Butterworth low-pass of order ``order`` and cut-off
  ``cutoff · ω_f`` (gain ``1 / (1 + (ω/ω_c)^{2·order})``, i.e. the squared magnitude a
  forward-backward ``filtfilt`` gives, applied circularly), then periodic central differences
  ``q' ≈ (q_{n+1} − q_{n−1}) / 2Δ``, ``q'' ≈ (q_{n+1} − 2q_n + q_{n−1}) / Δ²``. The classic IDIM
  recipe, for comparison.

Everything is pure JAX (``jnp.fft``), ``jit``/``vmap``-compatible; the method, the kept bins and
the cut-off are static (they set the bin mask). This is the one derivative filter: RLS/IDIM
(``regression_data``), IDIM-IV (``derivative_filter``, frozen on the measured angles) and the
nonlinear output-error start all use it, with one noise floor and threshold
(``DETECTION_THRESHOLD``) and one default cut-off rule (``default_cutoff``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = [
    "periodic_derivatives",
    "derivative_filter",
    "default_cutoff",
    "kept_bins",
    "noise_variance",
    "DERIVATIVE_METHODS",
    "DETECTION_THRESHOLD",
]

DERIVATIVE_METHODS = ("fourier", "butterworth")
#: ``keep="detected"`` keeps a harmonic whose power exceeds this many times the noise floor
#: ``M σ²`` (``σ²`` from ``noise_variance`` above the cut-off): the one detection policy.
DETECTION_THRESHOLD = 10.0
_MIN_NOISE_BINS = 32
Keep = Literal["excited", "band", "detected"]


def _check(method: str, keep: str, n_samples: int, periods: int) -> None:
    if method not in DERIVATIVE_METHODS:
        raise ValueError(f"derivative method must be one of {DERIVATIVE_METHODS}, got {method!r}.")
    if keep not in ("excited", "band", "detected"):
        raise ValueError(
            f"keep must be 'excited' (DC + excited lines), 'band' (harmonics 0..cutoff) or 'detected' "
            f"(excited lines + harmonics up to cutoff that stand out of the noise), got {keep!r}."
        )
    if periods < 1:
        raise ValueError(
            f"The record of {n_samples} samples is not {periods} whole periods; the periodic filters need "
            "a record of whole periods with no repeated end point."
        )


def kept_bins(
    n_samples: int,
    periods: int,
    *,
    keep: Keep = "band",
    cutoff: int | None = None,
    lines: tuple[int, ...] = (),
) -> np.ndarray:
    """Boolean mask ``(n_samples // 2 + 1,)`` over ``rfft`` bins kept by the ``"fourier"`` method.

    ``cutoff`` and ``lines`` are harmonic indices of the fundamental ``ω_f = 2π/T``; bin ``b`` of
    a record of ``P`` periods is harmonic ``b / P``. Static (NumPy): it sets which bins survive.
    """
    bins = np.arange(n_samples // 2 + 1)
    harmonic = bins // periods
    on_harmonic = bins % periods == 0
    if keep in ("excited", "detected"):
        wanted = np.isin(harmonic, np.asarray((0, *lines), dtype=int))
    else:
        if cutoff is None:
            raise ValueError("keep='band' needs a cutoff harmonic.")
        wanted = harmonic <= cutoff
    mask = on_harmonic & wanted
    # The Nyquist bin of an even-length record has no well-defined derivative; never keep it.
    if n_samples % 2 == 0:
        mask[-1] = False
    return mask


def default_cutoff(max_harmonic: int, samples_per_period: int, keep: Keep = "detected") -> int:
    """The default band edge (harmonic index): ``4 ×`` the highest excited harmonic for
    ``"detected"`` (it keeps only the lines that stand out of the noise, so it can look further
    out), ``2 ×`` otherwise; at most ``N/4``, so that a quarter of the spectrum is left above the
    cut-off to read the noise floor from."""
    return min((4 if keep == "detected" else 2) * max_harmonic, samples_per_period // 4)


def derivative_filter(
    q: Float[Array, "M 2"],
    sample_step: float,
    period: float,
    *,
    method: Literal["fourier", "butterworth"] = "fourier",
    keep: Keep = "band",
    cutoff: int | None = None,
    lines: tuple[int, ...] = (),
    order: int = 4,
    threshold: float = DETECTION_THRESHOLD,
) -> Callable[[Array], tuple[Array, Array, Array]]:
    """The filter ``x ↦ (x_f, x', x'')`` of ``periodic_derivatives``, decided on ``q`` and frozen.

    For ``keep="detected"`` the kept bins depend on the data: they are decided once on ``q`` (the
    measured angles) and the same bins are used for any other ``(M, d)`` signal passed to the
    returned map (e.g. a simulated trajectory that must see exactly the filter the data saw). The
    map is linear; arguments as ``periodic_derivatives``. Raises ``ValueError`` for bad options.
    """
    q = jnp.asarray(q)
    n_samples = q.shape[0]
    n_per = int(round(period / sample_step))
    periods = n_samples // n_per if n_per and n_samples % n_per == 0 else 0
    _check(method, keep, n_samples, periods)
    omega_f = 2 * math.pi / period
    omega = np.arange(n_samples // 2 + 1) * (omega_f / periods)
    if method == "fourier":
        mask = kept_bins(n_samples, periods, keep=keep, cutoff=cutoff, lines=lines)
        if keep == "detected":
            if cutoff is None:
                raise ValueError("keep='detected' needs a cutoff harmonic (the highest one considered).")
            band = kept_bins(n_samples, periods, keep="band", cutoff=cutoff)
            floor = n_samples * noise_variance(q, periods, above=cutoff)
            loud = jnp.any(jnp.abs(jnp.fft.rfft(q, axis=0)) ** 2 > threshold * floor, axis=1)
            mask = jax.lax.stop_gradient(jnp.asarray(mask) | (jnp.asarray(band) & loud))
        jw = (1j * omega)[:, None]

        def fourier(x):
            kept = jnp.fft.rfft(x, axis=0) * mask[:, None]
            return (
                jnp.fft.irfft(kept, n=n_samples, axis=0),
                jnp.fft.irfft(jw * kept, n=n_samples, axis=0),
                jnp.fft.irfft(jw**2 * kept, n=n_samples, axis=0),
            )

        return fourier
    if cutoff is None:
        raise ValueError("method='butterworth' needs a cutoff harmonic.")
    gain = 1.0 / (1.0 + (omega / (cutoff * omega_f)) ** (2 * order))

    def butterworth(x):
        q_f = jnp.fft.irfft(jnp.fft.rfft(x, axis=0) * gain[:, None], n=n_samples, axis=0)
        ahead, behind = jnp.roll(q_f, -1, axis=0), jnp.roll(q_f, 1, axis=0)
        qd = (ahead - behind) / (2 * sample_step)
        qdd = (ahead - 2 * q_f + behind) / sample_step**2
        return q_f, qd, qdd

    return butterworth


def periodic_derivatives(
    q: Float[Array, "M 2"],
    sample_step: float,
    period: float,
    *,
    method: Literal["fourier", "butterworth"] = "fourier",
    keep: Keep = "band",
    cutoff: int | None = None,
    lines: tuple[int, ...] = (),
    order: int = 4,
    threshold: float = DETECTION_THRESHOLD,
) -> tuple[Float[Array, "M 2"], Float[Array, "M 2"], Float[Array, "M 2"]]:
    """Filtered angles, velocities and accelerations from a record of whole periods.

    Args:
        q: ``(M, d)`` angles [rad] on the grid ``t_n = t_0 + nΔ``, ``M`` a multiple of ``T/Δ``.
        sample_step: ``Δ`` [s] (static).
        period: ``T`` [s] (static).
        method: ``"fourier"`` or ``"butterworth"`` (see the module docstring).
        keep: ``"excited"``, ``"band"`` or ``"detected"`` (``"fourier"`` only).
        cutoff: the band edge as a harmonic index of ``ω_f`` (``"band"``, ``"detected"`` and
            ``"butterworth"``; ``default_cutoff`` gives the default rule).
        lines: the excited harmonic indices (``keep="excited"``/``"detected"``).
        order: Butterworth order.
        threshold: detection threshold over the noise floor (``keep="detected"``; default
            ``DETECTION_THRESHOLD``).

    Returns:
        ``(q_f, q', q'')`` each ``(M, d)`` [rad, rad/s, rad/s²]. ``jit``/``vmap``-compatible; the
        options are static. ``derivative_filter(q, …)(q)``.
    """
    return derivative_filter(
        q,
        sample_step,
        period,
        method=method,
        keep=keep,
        cutoff=cutoff,
        lines=lines,
        order=order,
        threshold=threshold,
    )(jnp.asarray(q))


def noise_variance(
    q: Float[Array, "M 2"],
    periods: int,
    *,
    above: int,
) -> Float[Array, "2"]:
    """Per-channel white-noise variance [rad²] estimated from bins that hold no signal.

    For white noise of variance ``σ²``, ``E|FFT_b|² = M σ²`` for every bin ``0 < b < M/2``. The
    bins used are those off the harmonics of ``ω_f`` (``b mod P ≠ 0``, only noise in a periodic
    steady state) and, of the harmonic bins, those above harmonic ``above`` (where the arm's
    response has died out). ``periods`` and ``above`` are static.
    """
    q = jnp.asarray(q)
    n_samples = q.shape[0]
    bins = np.arange(n_samples // 2 + 1)
    use = ((bins % periods != 0) | (bins // periods > above)) & (bins > 0)
    if n_samples % 2 == 0:
        use[-1] = False
    if use.sum() < _MIN_NOISE_BINS:
        raise ValueError(
            f"Only {int(use.sum())} spectral bins above harmonic {above} to estimate the noise from (need "
            f"{_MIN_NOISE_BINS}); lower the cut-off, sample faster or measure more periods."
        )
    power = jnp.abs(jnp.fft.rfft(q, axis=0)) ** 2
    return jnp.sum(power * use[:, None], axis=0) / (use.sum() * n_samples)
