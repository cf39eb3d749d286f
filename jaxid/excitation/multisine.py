"""Multisine torque excitation (paper eq. 19, Table 2).

``u_j(t) = s · Σ_i d_ji cos(k_ji ω_f t + φ_ji)`` for joints ``j = 1, 2``; the applied torque is
``tau(t) = tau0 + u(t)`` with ``tau0 = G(q0)`` added by the simulator. The period is
``T = 2π / ω_f``; the paper's ``ω_f = 2π · 0.01 rad/s`` gives ``T = 100 s``.

Phasor convention (DESIGN.md §2): ``x(t) = Re{X e^{jωt}} = C cos ωt + D sin ωt``, ``X = C − jD``;
the phasor of ``d cos(ωt + φ)`` is ``d e^{jφ}``.

Static vs traced: the harmonic indices and the fundamental frequency set the shapes and the
period, so they are static; amplitudes, phases and the scale are arrays and may vary across a
sweep without recompiling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

__all__ = [
    "Multisine",
    "TABLE2_HARMONICS",
    "TABLE2_AMPLITUDES",
    "PAPER_FUNDAMENTAL",
    "table2",
    "schroeder_phases",
]

#: Table 2 of the paper: harmonic indices and amplitudes [N m].
TABLE2_HARMONICS: tuple[int, ...] = (3, 5, 7, 9, 11, 13, 17, 21, 27, 42)
TABLE2_AMPLITUDES: tuple[float, ...] = (0.2, 1.5, 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.4, 2.0)
#: The paper's fundamental angular frequency ω_f = 2π · 0.01 rad/s (period 100 s).
PAPER_FUNDAMENTAL: float = 2 * math.pi * 0.01


def _check_harmonics(harmonics: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    if isinstance(harmonics, str) or len(harmonics) < 1 or any(isinstance(r, (int, float)) for r in harmonics):
        raise ValueError(
            "harmonics must list the lines of every joint, one row each, e.g. [[k_1i...], [k_2i...]] for two joints."
        )
    out = []
    for j, row in enumerate(harmonics):
        row_t = []
        for k in row:
            if isinstance(k, bool) or not float(k).is_integer():
                raise ValueError(
                    f"Harmonic index {k!r} of joint {j + 1} is not an integer: a multisine is periodic in "
                    "T = 2π/ω_f only if every line is an integer multiple k of ω_f."
                )
            if int(k) < 1:
                raise ValueError(f"Harmonic index {k} of joint {j + 1} must be >= 1 (no DC line; the offset is tau0).")
            row_t.append(int(k))
        if len(set(row_t)) != len(row_t):
            dup = sorted({k for k in row_t if row_t.count(k) > 1})
            raise ValueError(f"Joint {j + 1} lists harmonic(s) {dup} more than once; give each line once.")
        out.append(tuple(row_t))
    counts = [len(row) for row in out]
    if len(set(counts)) > 1:
        raise ValueError(
            f"Every joint needs the same number of lines (got {' and '.join(map(str, counts))}); "
            "pad with lines of zero amplitude."
        )
    if not out[0]:
        raise ValueError("A multisine needs at least one line per joint.")
    return tuple(out)


class Multisine(eqx.Module):
    """A periodic multisine torque on every joint, without the holding offset ``tau0``.

    Attributes:
        harmonics: static ``((k_11, …, k_1n), (k_21, …, k_2n), …)`` integer multiples of ``ω_f``,
            one row per joint (two for the two-link arm, ``J`` for an arm of ``J`` joints).
        amplitudes: ``(J, n)`` amplitudes ``d_ji`` [N m] before scaling.
        phases: ``(J, n)`` phases ``φ_ji`` [rad].
        scale: scalar factor ``s`` applied to all amplitudes.
        fundamental: static ``ω_f`` [rad/s].
    """

    harmonics: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    amplitudes: Float[Array, "J n"]
    phases: Float[Array, "J n"]
    scale: Float[Array, ""]
    fundamental: float = eqx.field(static=True)

    def __init__(
        self,
        harmonics: Sequence[Sequence[int]],
        amplitudes: ArrayLike,
        phases: ArrayLike | None = None,
        scale: ArrayLike = 1.0,
        fundamental: float = PAPER_FUNDAMENTAL,
    ):
        self.harmonics = _check_harmonics(harmonics)
        joints, n = len(self.harmonics), len(self.harmonics[0])
        amplitudes = jnp.asarray(amplitudes, dtype=float)
        if amplitudes.shape[-2:] != (joints, n):
            raise ValueError(
                f"amplitudes must have shape ({joints}, {n}) to match the harmonics, got {amplitudes.shape}."
            )
        self.amplitudes = amplitudes
        self.phases = jnp.zeros_like(amplitudes) if phases is None else jnp.asarray(phases, dtype=float)
        if self.phases.shape[-2:] != (joints, n):
            raise ValueError(f"phases must have shape ({joints}, {n}), got {self.phases.shape}.")
        self.scale = jnp.asarray(scale, dtype=float)
        if not (isinstance(fundamental, (int, float)) and fundamental > 0):
            raise ValueError(f"fundamental must be a positive angular frequency in rad/s, got {fundamental!r}.")
        self.fundamental = float(fundamental)

    # -- derived, static -------------------------------------------------------------------------
    @property
    def period(self) -> float:
        """``T = 2π / ω_f`` [s]."""
        return 2 * math.pi / self.fundamental

    @property
    def joints(self) -> int:
        """Number of driven joints ``J`` (rows of ``harmonics``)."""
        return len(self.harmonics)

    @property
    def lines(self) -> tuple[int, ...]:
        """Sorted union of the harmonic indices of all joints."""
        return tuple(sorted(set().union(*self.harmonics)))

    @property
    def line_frequencies(self) -> np.ndarray:
        """Angular frequencies ``k ω_f`` [rad/s] of ``lines``."""
        return np.asarray(self.lines, dtype=float) * self.fundamental

    @property
    def max_harmonic(self) -> int:
        return max(max(row) for row in self.harmonics)

    # -- values -----------------------------------------------------------------------------------
    def torque(self, t: Float[ArrayLike, "*t"]) -> Float[Array, "*t J"]:
        """``u(t)`` [N m] at times ``t`` [s], shape ``(..., J)`` (offset ``tau0`` not included)."""
        t = jnp.asarray(t)[..., None, None]
        k = jnp.asarray(self.harmonics, dtype=float)
        terms = self.amplitudes * jnp.cos(k * self.fundamental * t + self.phases)
        return self.scale * jnp.sum(terms, axis=-1)

    def phasors(self) -> Complex[Array, "L J"]:
        """Torque phasors ``U(ω_k)`` [N m] on ``lines``, shape ``(L, J)``; zero where a joint has no line."""
        index = {k: i for i, k in enumerate(self.lines)}
        u = jnp.zeros((len(self.lines), self.joints), dtype=complex)
        for j in range(self.joints):
            rows = np.asarray([index[k] for k in self.harmonics[j]])
            u = u.at[rows, j].add(self.scale * self.amplitudes[j] * jnp.exp(1j * self.phases[j]))
        return u

    def crest_factor(self, samples: int = 20_000) -> Float[Array, " J"]:
        """Peak over RMS of each joint's torque, on a fine grid over one period."""
        t = jnp.arange(samples) * (self.period / samples)
        u = self.torque(t)
        return jnp.max(jnp.abs(u), axis=0) / jnp.sqrt(jnp.mean(u**2, axis=0))

    def replace(self, **kwargs) -> Multisine:
        """A copy with ``amplitudes``, ``phases`` or ``scale`` replaced."""
        out = self
        for name, value in kwargs.items():
            if name not in ("amplitudes", "phases", "scale"):
                raise ValueError(f"Multisine.replace takes amplitudes, phases or scale, not {name!r}.")
            out = eqx.tree_at(lambda m, name=name: getattr(m, name), out, jnp.asarray(value, dtype=float))
        return out


def schroeder_phases(amplitudes: ArrayLike, harmonics: Sequence[int] | None = None) -> Array:
    """Schroeder's low-crest-factor phases for one joint's line amplitudes.

    ``φ_i = −2π Σ_{l<i} (k_i − k_l) p_l`` with power fractions ``p_l = d_l² / Σ d²`` and the
    lines' harmonic indices ``k`` in increasing order (Schroeder 1970). ``harmonics=None`` means
    consecutive lines ``k = 1, 2, …``; give the actual indices for sparse lines such as Table 2's
    (with consecutive positions instead, the crest factor of Table 2 barely improves).
    """
    d = jnp.asarray(amplitudes, dtype=float)
    p = d**2 / jnp.sum(d**2)
    n = d.shape[-1]
    if harmonics is None:
        k = np.arange(1, n + 1, dtype=float)
    else:
        k = np.asarray(harmonics, dtype=float)
        if k.shape != (n,) or np.any(np.diff(k) <= 0):
            raise ValueError(f"harmonics must be {n} increasing indices matching the amplitudes, got {list(k)}.")
    weights = np.where(k[:, None] > k[None, :], k[:, None] - k[None, :], 0.0)
    return jnp.mod(-2 * jnp.pi * jnp.asarray(weights) @ p, 2 * jnp.pi)


def table2(
    lines: str = "same",
    scale: ArrayLike = 1.0,
    phases: str = "zero",
    *,
    key: Array | None = None,
    fundamental: float = PAPER_FUNDAMENTAL,
) -> Multisine:
    """The paper's Table 2 multisine.

    Args:
        lines: ``"same"`` — the same torque on both joints, as the paper; ``"split"`` — joint 2 on
            the lines ``k + 1`` so the two joints' lines are disjoint (needed by the per-joint
            routes; with ``same`` the paper's eq. 33 regressor is singular).
        scale: factor ``s`` on all amplitudes.
        phases: ``"zero"`` (the paper), ``"schroeder"`` or ``"random"`` (uniform on [0, 2π), needs ``key``).
        key: a ``jax.random.key`` for random phases.
    """
    k = TABLE2_HARMONICS
    if lines == "same":
        harmonics = (k, k)
    elif lines == "split":
        harmonics = (k, tuple(i + 1 for i in k))
    else:
        raise ValueError(f"lines must be 'same' or 'split', got {lines!r}.")
    amplitudes = jnp.asarray([TABLE2_AMPLITUDES, TABLE2_AMPLITUDES])
    if phases == "zero":
        ph = jnp.zeros_like(amplitudes)
    elif phases == "schroeder":
        ph = jnp.stack([schroeder_phases(amplitudes[j], harmonics[j]) for j in range(2)])
        if lines == "same":
            ph = ph.at[1].set(ph[0])
    elif phases == "random":
        if key is None:
            raise ValueError("phases='random' needs key=jax.random.key(seed).")
        ph = jax.random.uniform(key, amplitudes.shape, maxval=2 * jnp.pi)
        if lines == "same":
            ph = ph.at[1].set(ph[0])
    else:
        raise ValueError(f"phases must be 'zero', 'schroeder' or 'random', got {phases!r}.")
    return Multisine(harmonics, amplitudes, ph, scale, fundamental)
