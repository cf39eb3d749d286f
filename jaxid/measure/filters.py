"""Non-periodic zero-phase filtering and differentiation of measured logs.

A real log starts from rest and is not a whole number of periods of a steady state, so the
periodic (Fourier) differentiation of ``jaxid.measure.derivatives`` does not apply. Here:

- ``butterworth`` (default): the angles are low-passed by a Butterworth filter of ``order``
  (default 4) and cut-off ``cutoff_hz``, run forwards and backwards (``scipy.signal.filtfilt``,
  zero phase, effective order ``2·order``, gain ``1/2`` at the cut-off instead of ``1/√2``, odd
  extension at the ends); velocities and accelerations are then second-order central differences
  (``numpy.gradient``) of the filtered signal, one-sided at the two end samples.
- ``savgol``: a Savitzky–Golay filter (polynomial ``order``) gives the smoothed angle and its first
  two derivatives directly; its window is chosen so that its −3 dB frequency is ``cutoff_hz``
  (Schafer's rule ``f_c ≈ (order + 1) / (3.2 N − 4.6) · f_s``).

The torque goes through the *same* low-pass (``lowpass``), so both sides of the inverse-dynamics
equation see the same band (the usual parallel filtering of IDIM).

**Choosing the cut-off** (``default_cutoff``): ``cutoff = factor × f_exc`` with ``factor = 10``
and ``f_exc`` the highest dominant frequency of the *training* runs' torques (periodogram peak),
capped at ``0.2 / Δ`` (0.4 × Nyquist). Ten harmonics of the excitation pass unchanged, the
encoder quantisation and current noise above them do not. This is a rule, not a tuning: the
held-out runs are never looked at, and it gives the same answer for another build of the arm
driven the same way. All functions here are host (numpy/scipy) functions run once per log.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "lowpass",
    "residual_fraction",
    "differentiate",
    "min_samples",
    "default_cutoff",
    "dominant_frequency",
    "FILTER_METHODS",
]

FILTER_METHODS = ("butterworth", "savgol")


def _check(sample_step: float, cutoff_hz: float) -> None:
    if not (np.isfinite(cutoff_hz) and cutoff_hz > 0):
        raise ValueError(f"cutoff_hz must be a positive frequency [Hz], got {cutoff_hz!r}.")
    nyquist = 0.5 / sample_step
    if cutoff_hz >= nyquist:
        raise ValueError(
            f"cutoff_hz = {cutoff_hz} Hz is at or above the Nyquist frequency {nyquist:.4g} Hz of the "
            f"{sample_step} s grid; choose a lower cut-off."
        )


def _padlen(order: int) -> int:
    """The edge padding ``lowpass`` allows for, for a Butterworth low-pass of ``order``: ``3 (2 s + 1)``
    with ``s = ⌈order / 2⌉`` second-order sections (``sosfiltfilt``'s default padding; 3 more than it
    for an odd order). ``lowpass`` needs more samples than this."""
    return 3 * (2 * ((order + 1) // 2) + 1)


def min_samples(sample_step: float, cutoff_hz: float, *, method: str = "butterworth", order: int | None = None) -> int:
    """The fewest samples ``differentiate`` (``method``, ``order``) and ``lowpass`` (``method="butterworth"``)
    accept on a grid of step ``sample_step`` [s] at ``cutoff_hz`` [Hz].

    Butterworth: one more than the filter's edge padding (16 for order 4, whatever the step and
    cut-off). Savitzky–Golay: its window length (longer for a lower cut-off or a finer step).
    Raises ``ValueError`` for a cut-off at/above Nyquist or an unknown method.
    """
    _check(sample_step, cutoff_hz)
    if method == "butterworth":
        return _padlen(4 if order is None else order) + 1
    if method == "savgol":
        return _savgol_window(sample_step, cutoff_hz, 3 if order is None else order)
    raise ValueError(f"unknown filter method {method!r}; use one of {list(FILTER_METHODS)}.")


def lowpass(x: np.ndarray, sample_step: float, cutoff_hz: float, *, order: int = 4) -> np.ndarray:
    """Zero-phase Butterworth low-pass along axis 0 (``filtfilt``, odd extension at the ends).

    ``x``: ``(N, ...)`` samples on a uniform grid of step ``sample_step`` [s]. Returns an array of
    the same shape. Raises ``ValueError`` for a cut-off at/above Nyquist or a record too short
    for the filter's edge padding.
    """
    _check(sample_step, cutoff_hz)
    from scipy import signal  # imported when first needed: scipy takes ~0.9 s to import

    x = np.asarray(x, dtype=float)
    sos = _butter(sample_step, cutoff_hz, order)
    padlen = _padlen(order)  # = 3 (2 sos.shape[0] + 1)
    if x.shape[0] <= padlen:
        raise ValueError(f"record of {x.shape[0]} samples is too short for an order-{order} filter; need > {padlen}.")
    return signal.sosfiltfilt(sos, x, axis=0)


def _butter(sample_step: float, cutoff_hz: float, order: int) -> np.ndarray:
    """The Butterworth low-pass of ``lowpass`` (second-order sections)."""
    from scipy import signal

    return signal.butter(order, cutoff_hz, btype="low", fs=1.0 / sample_step, output="sos")


def residual_fraction(sample_step: float, cutoff_hz: float, *, order: int = 4) -> float:
    """The share of a white noise's variance left in ``x − lowpass(x)`` (``lowpass``: zero-phase, amplitude
    response ``|H|²``): the mean of ``(1 − |H(f)|²)²`` over ``0 … Nyquist`` (a 2¹⁴-point grid), e.g. 0.96 at 10 Hz
    of 500 Hz. Divides the variance of a signal's part above the cut-off into the noise's whole variance."""
    _check(sample_step, cutoff_hz)
    from scipy import signal

    _, h = signal.sosfreqz(_butter(sample_step, cutoff_hz, order), worN=1 << 14)
    return float(np.mean((1.0 - np.abs(h) ** 2) ** 2))


def _savgol_window(sample_step: float, cutoff_hz: float, order: int) -> int:
    fs = 1.0 / sample_step
    n = ((order + 1) * fs / cutoff_hz + 4.6) / 3.2
    n = max(int(round(n)), order + 2)
    return n if n % 2 == 1 else n + 1


def differentiate(
    q: np.ndarray,
    sample_step: float,
    cutoff_hz: float,
    *,
    method: str = "butterworth",
    order: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-phase smoothed angles and their first two time derivatives.

    Args:
        q: ``(N, J)`` angles [rad] on a uniform grid.
        sample_step: the grid step ``Δ`` [s].
        cutoff_hz: the filter's cut-off [Hz] (see ``default_cutoff`` for the rule).
        method: ``"butterworth"`` (filtfilt + central differences) or ``"savgol"``.
        order: filter order (Butterworth, default 4) or polynomial order (Savitzky–Golay, default 3).

    Returns:
        ``(q_filtered, qd, qdd)``, each ``(N, J)``, in rad, rad/s, rad/s².

    Raises ``ValueError`` for an unknown method or a cut-off at/above Nyquist.
    """
    _check(sample_step, cutoff_hz)
    q = np.asarray(q, dtype=float)
    if method == "butterworth":
        qf = lowpass(q, sample_step, cutoff_hz, order=4 if order is None else order)
        qd = np.gradient(qf, sample_step, axis=0)
        qdd = np.gradient(qd, sample_step, axis=0)
        return qf, qd, qdd
    if method == "savgol":
        poly = 3 if order is None else order
        n = _savgol_window(sample_step, cutoff_hz, poly)
        kw = dict(window_length=n, polyorder=poly, delta=sample_step, axis=0, mode="interp")
        from scipy import signal  # imported when first needed: scipy takes ~0.9 s to import

        return (
            signal.savgol_filter(q, deriv=0, **kw),
            signal.savgol_filter(q, deriv=1, **kw),
            signal.savgol_filter(q, deriv=2, **kw),
        )
    raise ValueError(f"unknown filter method {method!r}; use one of {list(FILTER_METHODS)}.")


def dominant_frequency(x: np.ndarray, sample_step: float) -> float:
    """The highest, over columns, of each column's periodogram peak [Hz] (mean removed, Hann window).

    Used on the torques of the training runs to find the excitation frequency when the config
    does not state it. The DC bin is excluded.
    """
    x = np.asarray(x, dtype=float)
    x = x.reshape(x.shape[0], -1)
    from scipy import signal  # imported when first needed: scipy takes ~0.9 s to import

    freqs, power = signal.periodogram(x - x.mean(0), fs=1.0 / sample_step, window="hann", axis=0)
    power[0] = 0.0
    return float(np.max(freqs[np.argmax(power, axis=0)]))


def default_cutoff(excitation_hz: float, sample_step: float, *, factor: float = 10.0) -> float:
    """The default cut-off [Hz]: ``factor × excitation_hz``, at most ``0.2 / sample_step``.

    ``excitation_hz`` is the highest frequency the training runs are driven at (stated in the
    config or ``dominant_frequency`` of their torques). Rounded to 0.1 Hz so it is readable.
    """
    if not (excitation_hz > 0 and math.isfinite(excitation_hz)):
        raise ValueError(f"excitation frequency must be positive [Hz], got {excitation_hz!r}.")
    return round(min(factor * excitation_hz, 0.2 / sample_step), 1)
