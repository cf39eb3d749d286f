"""Steady-state spectrum of a measured record: Fourier lines, noise level, distortion, steady state.

Phasor convention (DESIGN.md §2): ``x(t) = Re{X e^{jωt}} = C cos ωt + D sin ωt``, so ``X = C − jD``.
For a record of ``P`` whole periods of ``N`` samples each (``t_n = t_0 + nΔ``, no repeated end
point), the phasor of period ``p`` at harmonic ``k`` (``ω_k = k · 2π/T``) is the paper's eq. 48,

    X_p(ω_k) = (2/T) Σ_n x(t_n) e^{−jω_k t_n} Δ = (2/N) Σ_n x(t_n) e^{−jω_k t_n},

which is exact for a periodic signal band-limited below ``N/2`` harmonics. It is evaluated by an
FFT of each period (the same sum, for all harmonics at once). ``method="lstsq"`` instead fits
``x(t) ≈ c + Σ_k (C_k cos ω_k t + D_k sin ω_k t)`` by least squares (the paper's eq. 34 with a DC
column); on whole periods the columns are orthogonal and both methods agree to rounding, and least
squares also accepts a window that is *not* whole periods (projection refuses it).

The ``P`` per-period phasors are averaged; for ``P >= 2`` their period-to-period spread gives the
noise variance of every line, and the sample-by-sample spread the per-sample noise std (a
periodic distortion does not enter either). For ``P = 1`` the noise is estimated from the residual
at the non-excited harmonics instead (white-noise assumption; nonlinear distortion then counts as
noise). The *distortion ratio* compares the response at non-excited harmonics with the excited
lines: a linear system in steady state puts nothing there but noise, so a ratio well above its
noise floor flags nonlinearity (or a transient). The *steady-state test* compares the first and
the last measured period.

Everything here is pure and works under ``jit`` and ``vmap`` (batch the record); the harmonic
indices, the number of periods and the method are static.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Complex, Float

from ..excitation.multisine import Multisine
from ..types import Record, require_float64

__all__ = ["Spectrum", "fourier_coefficients", "line_noise_variance"]

Method = Literal["projection", "lstsq"]

# Threshold on |X_P − X_1|² / E|X_P − X_1|² (an Exp(1) variable under noise) for the steady test:
# with ~40 line-joint pairs the false-alarm rate is about 40·e^{−15} ≈ 1e-5.
_STEADY_THRESHOLD = 15.0


class Spectrum(eqx.Module):
    """Fourier lines of a steady-state record (torques and angles), averaged over the periods.

    Attributes:
        U: ``(L, 2)`` complex torque phasors [N m] at ``lines`` (joint on the last axis).
        Q: ``(L, 2)`` complex angle phasors [rad].
        noise_variance: ``(L, 2)`` variance ``E|Q̂ − Q|²`` [rad²] of each averaged angle phasor
            (from the period-to-period spread if ``P >= 2``, else ``4σ̂²/(NP)`` from the residual).
        torque_variance: ``(L, 2)`` the same for the torque phasors [N² m²] (zero for a known torque).
        noise_std: ``(2,)`` per-sample angle noise std [rad]: the sample-by-sample period-to-period
            spread if ``P >= 2``, else ``residual_std``.
        residual_std: ``(2,)`` RMS of the angle residual after removing the DC and the lines [rad],
            per degree of freedom (noise plus any distortion).
        q_mean: ``(2,)`` mean angle [rad] (the DC line; contains the mean of uniform noise).
        tau_mean: ``(2,)`` mean torque [N m] (``tau0``).
        distortion: ``(2,)`` RMS response at the non-excited harmonics ``1 … distortion_harmonics``
            over RMS response at the excited lines (of the period-averaged angles).
        distortion_floor: ``(2,)`` the value ``distortion`` would have from noise alone (from
            ``noise_std``). ``distortion`` well above it flags nonlinearity or a transient.
        drift: ``(2,)`` ``max_k |Q_P(ω_k) − Q_1(ω_k)| / max_k |Q̂(ω_k)|``: relative change of the
            angle lines from the first to the last period (0 for ``P = 1``).
        steady: ``()`` bool, ``True`` if the drift is consistent with noise (or below ``1e-6``
            relative); always ``True`` for ``P = 1`` (one period cannot tell).
        lines: static harmonic indices ``k`` (``ω_k = k · fundamental``).
        fundamental: static ``2π/T`` [rad/s].
        periods: static number of periods ``P`` (``M/N``, possibly fractional for ``lstsq`` on a
            window that is not whole periods).
        samples_per_period: static ``N``.
        method: static ``"projection"`` or ``"lstsq"``.
        distortion_harmonics: static highest harmonic in the distortion ratio (0 for ``lstsq`` on a
            window that is not whole periods).

    Under ``vmap`` every array gains a leading batch axis.
    """

    U: Complex[Array, "L 2"]
    Q: Complex[Array, "L 2"]
    noise_variance: Float[Array, "L 2"]
    torque_variance: Float[Array, "L 2"]
    noise_std: Float[Array, " 2"]
    residual_std: Float[Array, " 2"]
    q_mean: Float[Array, " 2"]
    tau_mean: Float[Array, " 2"]
    distortion: Float[Array, " 2"]
    distortion_floor: Float[Array, " 2"]
    drift: Float[Array, " 2"]
    steady: Bool[Array, ""]
    lines: tuple[int, ...] = eqx.field(static=True)
    fundamental: float = eqx.field(static=True)
    periods: float = eqx.field(static=True)
    samples_per_period: int = eqx.field(static=True)
    method: str = eqx.field(static=True)
    distortion_harmonics: int = eqx.field(static=True, default=0)

    def replace(self, **kwargs) -> Spectrum:
        """A copy with the given array fields replaced (``eqx.tree_at``)."""
        out = self
        for name, value in kwargs.items():
            out = eqx.tree_at(lambda s, name=name: getattr(s, name), out, value)
        return out

    @property
    def omega(self) -> np.ndarray:
        """Angular frequencies ``ω_k = k · fundamental`` [rad/s] of ``lines``, shape ``(L,)``."""
        return np.asarray(self.lines, dtype=float) * self.fundamental

    def frequency_response(self) -> Complex[Array, "L 2"]:
        """Ratio ``Q/U`` per joint (meaningful only on lines where one joint alone is excited)."""
        return self.Q / self.U


def line_noise_variance(noise_std: Float[Array, "*2"], samples_per_period: int, periods: float) -> Float[Array, "*2"]:
    """``E|X̂ − X|² = 4σ²/(N P)``: the variance of an averaged phasor for white noise of std ``σ``."""
    return 4.0 * jnp.asarray(noise_std) ** 2 / (samples_per_period * periods)


def _resolve_lines(record: Record, lines: Multisine | Sequence[int]) -> tuple[tuple[int, ...], float]:
    if isinstance(lines, Multisine):
        if not math.isclose(lines.period, record.period, rel_tol=1e-9):
            raise ValueError(
                f"The excitation's period {lines.period} s differs from the record's period {record.period} s; "
                "pass the excitation that produced the record."
            )
        return lines.lines, lines.fundamental
    ks = tuple(sorted(int(k) for k in lines))
    if not ks or any(k < 1 for k in ks) or len(set(ks)) != len(ks):
        raise ValueError(f"lines must be distinct positive harmonic indices, got {list(lines)}.")
    return ks, 2 * math.pi / record.period


def fourier_coefficients(
    record: Record,
    lines: Multisine | Sequence[int],
    *,
    method: Method = "projection",
    distortion_harmonics: int | None = None,
    steady_rtol: float = 1e-6,
) -> Spectrum:
    """Phasors of torques and angles at the excited lines, with noise and distortion diagnostics.

    Args:
        record: a measured ``Record`` (``q`` may be noisy). Its ``t`` must be the uniform grid
            ``t_0 + nΔ`` (as ``simulate`` makes it).
        lines: the ``Multisine`` that was applied (its ``lines``), or harmonic indices ``k`` of
            the record's period.
        method: ``"projection"`` (eq. 48, by FFT; needs whole periods) or ``"lstsq"`` (eq. 34
            with a DC column; any window).
        distortion_harmonics: highest harmonic included in the distortion ratio (default
            ``3 · max(lines)``, capped below Nyquist).
        steady_rtol: relative drift always accepted as steady (rounding, integration error).

    Returns:
        A ``Spectrum``.

    Raises:
        ValueError: projection on a window that is not whole periods (use ``method="lstsq"``);
            lines at or above Nyquist; a period mismatch; unknown method.
    """
    require_float64("fourier_coefficients")
    if method not in ("projection", "lstsq"):
        raise ValueError(f"method must be 'projection' or 'lstsq', got {method!r}.")
    ks, fundamental = _resolve_lines(record, lines)
    n = record.samples_per_period
    m = record.q.shape[-2]
    if 2 * max(ks) >= n:
        raise ValueError(f"Harmonic {max(ks)} is at or above Nyquist for N = {n} samples per period; sample faster.")
    whole = m % n == 0 and m > 0
    if not whole and method == "projection":
        raise ValueError(
            f"The record has {m} samples, not a whole number of periods of N = {n}: projection (eq. 48) is "
            "only exact on whole periods. Use method='lstsq' (least squares with a DC column) instead."
        )
    if not whole:
        return _lstsq_window(record, ks, fundamental, n, m / n)
    periods = m // n
    kmax = n // 2 - 1 if n % 2 == 0 else n // 2
    khigh = min(distortion_harmonics or 3 * max(ks), kmax)
    if khigh < max(ks):
        raise ValueError(f"distortion_harmonics={khigh} must be at least the highest line {max(ks)}.")

    x = jnp.concatenate([record.q, record.tau], axis=-1)  # (M, 4): q1, q2, tau1, tau2
    x = x.reshape(periods, n, 4)
    t0 = record.t[0]
    kk = np.asarray(ks)
    rot = jnp.exp(-1j * fundamental * kk * t0)  # e^{−jω_k t_0}: the window need not start at t = 0
    f = jnp.fft.rfft(x, axis=1)  # (P, N/2+1, 4)
    if method == "projection":
        per = (2.0 / n) * f[:, kk, :] * rot[None, :, None]  # (P, L, 4)
        mean_dc = jnp.mean(x, axis=(0, 1))
    else:
        # Least squares on each period with the same design matrix (t shifts by whole periods).
        tn = t0 + jnp.arange(n) * record.sample_step
        wt = fundamental * kk[None, :] * tn[:, None]
        design = jnp.concatenate([jnp.ones((n, 1)), jnp.cos(wt), jnp.sin(wt)], axis=1)
        rhs = jnp.moveaxis(x, 0, 1).reshape(n, periods * 4)
        coef = jnp.linalg.lstsq(design, rhs)[0].reshape(1 + 2 * len(ks), periods, 4)
        coef = jnp.moveaxis(coef, 1, 0)
        lk = len(ks)
        per = coef[:, 1 : 1 + lk] - 1j * coef[:, 1 + lk :]
        mean_dc = jnp.mean(coef[:, 0], axis=0)
    mean = jnp.mean(per, axis=0)  # (L, 4)

    # Residual energy per channel at the non-excited harmonics of each period (Parseval).
    power = jnp.abs(f) ** 2
    weight = np.full(f.shape[1], 2.0)
    weight[0] = 0.0  # DC removed
    if n % 2 == 0:
        weight[-1] = 1.0  # Nyquist bin counts once
    weight[kk] = 0.0
    resid_energy = jnp.einsum("pkc,k->c", power, weight) / n
    dof = periods * (n - 1 - 2 * len(ks))
    residual_std = jnp.sqrt(resid_energy / dof)

    if periods >= 2:
        spread = jnp.sum(jnp.abs(per - mean[None]) ** 2, axis=0) / (periods - 1) / periods  # (L, 4)
        sample_var = jnp.sum((x - jnp.mean(x, axis=0, keepdims=True)) ** 2, axis=(0, 1)) / (n * (periods - 1))
        noise_std = jnp.sqrt(sample_var)
        variance = spread
    else:
        noise_std = residual_std
        variance = jnp.broadcast_to(line_noise_variance(residual_std, n, periods), mean.shape)

    # Distortion of the period-averaged angles (noise variance shrinks by P there).
    fa = jnp.mean(f[:, : khigh + 1, :2], axis=0)  # (K+1, 2)
    excited = np.zeros(khigh + 1, dtype=bool)
    excited[kk] = True
    others = ~excited
    others[0] = False
    p_exc = jnp.sum(jnp.abs(fa[excited]) ** 2, axis=0)
    p_oth = jnp.sum(jnp.abs(fa[others]) ** 2, axis=0)
    distortion = jnp.sqrt(p_oth / p_exc)
    # E|F_k|² = Nσ² per period for white noise, /P after averaging.
    floor = jnp.sqrt(int(others.sum()) * n * noise_std[:2] ** 2 / periods / p_exc)

    qp = per[:, :, :2]
    scale_q = jnp.max(jnp.abs(mean[:, :2]), axis=0)
    if periods >= 2:
        change = jnp.abs(qp[-1] - qp[0])  # (L, 2)
        drift = jnp.max(change, axis=0) / scale_q
        # E|X_P − X_1|² = 2 · 4σ²/N; σ from the residual harmonics, which a drifting line does not inflate.
        expected = 8.0 * residual_std[:2] ** 2 / n
        ok = change**2 <= _STEADY_THRESHOLD * expected + (steady_rtol * scale_q) ** 2
        steady = jnp.all(ok)
    else:
        drift = jnp.zeros(2)
        steady = jnp.asarray(True)

    return Spectrum(
        U=mean[:, 2:],
        Q=mean[:, :2],
        noise_variance=variance[:, :2],
        torque_variance=variance[:, 2:],
        noise_std=noise_std[:2],
        residual_std=residual_std[:2],
        q_mean=mean_dc[:2],
        tau_mean=mean_dc[2:],
        distortion=distortion,
        distortion_floor=floor,
        drift=drift,
        steady=steady,
        lines=ks,
        fundamental=fundamental,
        periods=float(periods),
        samples_per_period=n,
        method=method,
        distortion_harmonics=khigh,
    )


def _lstsq_window(record: Record, ks: tuple[int, ...], fundamental: float, n: int, periods: float) -> Spectrum:
    # One least-squares fit over a window that is not whole periods; noise from the residual.
    x = jnp.concatenate([record.q, record.tau], axis=-1)
    m = x.shape[0]
    kk = np.asarray(ks)
    wt = fundamental * kk[None, :] * record.t[:, None]
    design = jnp.concatenate([jnp.ones((m, 1)), jnp.cos(wt), jnp.sin(wt)], axis=1)
    coef = jnp.linalg.lstsq(design, x)[0]
    lk = len(ks)
    ph = coef[1 : 1 + lk] - 1j * coef[1 + lk :]
    resid = x - design @ coef
    dof = m - 1 - 2 * lk
    sigma2 = jnp.sum(resid**2, axis=0) / dof  # (4,)
    gram_inv = jnp.linalg.inv(design.T @ design)
    diag = jnp.diag(gram_inv)
    unit_var = diag[1 : 1 + lk] + diag[1 + lk :]  # var(C) + var(D) per unit noise variance
    variance = unit_var[:, None] * sigma2[None, :]
    std = jnp.sqrt(sigma2)
    nan2 = jnp.full(2, jnp.nan)
    return Spectrum(
        U=ph[:, 2:],
        Q=ph[:, :2],
        noise_variance=variance[:, :2],
        torque_variance=variance[:, 2:],
        noise_std=std[:2],
        residual_std=std[:2],
        q_mean=coef[0, :2],
        tau_mean=coef[0, 2:],
        distortion=nan2,  # not separable from noise without whole periods
        distortion_floor=nan2,
        drift=jnp.zeros(2),
        steady=jnp.asarray(True),
        lines=ks,
        fundamental=fundamental,
        periods=periods,
        samples_per_period=n,
        method="lstsq",
    )
