"""Per-setting tables that need the model rather than the trials: the Cramér–Rao bounds of the
setting's experiment and the Fourier-coefficient comparison (the paper's Figs. 2-3).

Each table is one compiled function of the setting's arrays (static: unknowns, operating point,
sampling), so settings of the same shape share a compile, and the persistent compilation cache
serves later processes (run eagerly, the shooting solve behind the nonlinear bound dispatched
thousands of small kernels per setting)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..estimate import resolve_unknowns
from ..estimate.crlb import linear_crlb
from ..estimate.nonlinear import nonlinear_crlb
from ..excitation.phasors import respond
from ..measure.noise import add_noise, noise_mean
from ..measure.spectrum import fourier_coefficients
from ..simulation.linearisation import linearise
from ..simulation.open_loop import Record
from .files import write_text
from .sampling import trial_key

__all__ = ["write_setting_extras", "coefficients_table"]


@partial(jax.jit, static_argnames=("unknowns", "q0", "sample_step", "periods"))
def _linear_bound(nominal, excitation, sigma, *, unknowns, q0, sample_step, periods):
    """``linear_crlb`` of the setting, compiled (``sigma`` traced)."""
    return linear_crlb(nominal, excitation, unknowns, noise_std=sigma, sample_step=sample_step, periods=periods, q0=q0)


@partial(jax.jit, static_argnames=("unknowns", "q0", "sample_step", "periods"))
def _nonlinear_unit_bound(nominal, excitation, *, unknowns, q0, sample_step, periods):
    """``nonlinear_crlb`` of the setting at unit noise std, compiled."""
    return nonlinear_crlb(nominal, excitation, unknowns, 1.0, q0=q0, sample_step=sample_step, measured_periods=periods)


_UNIT_CRLB: dict = {}


def _unit_nonlinear_crlb(nominal, excitation, unknowns, q0, sample_step, measured_periods) -> np.ndarray:
    """The nonlinear CRLB at unit noise std, once per arm, excitation and design.

    The Fisher information of white Gaussian angle noise is ``JᵀJ / σ²``, so the bound of every
    noise level of a sweep is ``σ²`` times this one (the shooting solve behind it is the
    expensive part of a setting's extras).
    """
    leaves = jax.tree.leaves((nominal, excitation))
    key = (
        str(jax.tree.structure((nominal, excitation))),
        tuple(np.asarray(x).tobytes() for x in leaves),
        unknowns,
        q0,
        sample_step,
        measured_periods,
    )
    if key not in _UNIT_CRLB:
        _UNIT_CRLB[key] = np.asarray(
            _nonlinear_unit_bound(
                nominal, excitation, unknowns=unknowns, q0=q0, sample_step=sample_step, periods=measured_periods
            )
        )
    return _UNIT_CRLB[key]


def write_setting_extras(exp, plan, out: Path, record0: Record) -> None:
    """Write ``chunks/<setting>/extras.json``: √CRLB (linear, and nonlinear for the nonlinear
    simulator with physical unknowns), the noise mean and the coefficient table.

    ``record0`` is parameter set 0's noise-free record (unbatched). A bound that cannot be
    computed is reported as ``crlb_error`` / ``crlb_nonlinear_error``, never silently dropped.
    """
    s = plan.setting
    path = out / "chunks" / s.name / "extras.json"
    extras = {"crlb": {}, "coefficients": []}
    unknowns = tuple(s["unknowns"])
    try:
        cov = np.asarray(
            _linear_bound(
                plan.nominal,
                plan.excitation,
                jnp.asarray(plan.sigma, dtype=float),
                unknowns=unknowns,
                q0=tuple(s["q0"]),
                sample_step=s["sample_step"],
                periods=s["measured_periods"],
            )
        )
        extras["crlb"] = {u: float(np.sqrt(cov[i, i])) for i, u in enumerate(unknowns)}
    except Exception as err:  # reported, never silently dropped
        extras["crlb_error"] = f"{type(err).__name__}: {err}"
    if s["simulator"] == "nonlinear" and not resolve_unknowns(unknowns)[1]:
        try:
            cov = plan.sigma**2 * _unit_nonlinear_crlb(
                plan.nominal, plan.excitation, unknowns, tuple(s["q0"]), s["sample_step"], s["measured_periods"]
            )
            extras["crlb_nonlinear"] = {u: float(np.sqrt(cov[i, i])) for i, u in enumerate(unknowns)}
        except Exception as err:
            extras["crlb_nonlinear_error"] = f"{type(err).__name__}: {err}"
    extras["coefficients"] = coefficients_table(exp, plan, record0)
    extras["noise_mean"] = noise_mean(s["noise"], s["noise_level"])
    write_text(json.dumps(extras, indent=1, default=float), path)


@eqx.filter_jit
def _coefficient_arrays(nominal, excitation, record, key, kind, level, q0):
    """Line coefficients ``(L, 2)``: linearised theory, the noise-free and trial 0's noisy record."""
    record = jax.tree.map(jnp.asarray, record)
    noisy = add_noise(record, key=key, kind=kind, level=level)
    lin = linearise(nominal, jnp.asarray(q0, dtype=float))
    theory = respond(lin.frequency_response(jnp.asarray(excitation.line_frequencies)), excitation.phasors())
    return theory, fourier_coefficients(record, excitation).Q, fourier_coefficients(noisy, excitation).Q


def coefficients_table(exp, plan, record0: Record) -> list[dict]:
    """Theoretical (linearised, exact) vs extracted (noise-free and trial 0's noisy record) line
    coefficients ``C``, ``D`` of ``x(t) = C cos ωt + D sin ωt`` per harmonic and joint."""
    s = plan.setting
    key = trial_key(exp.seed, s.name, 0)
    theory, clean, dirty = (
        np.asarray(x)
        for x in _coefficient_arrays(
            plan.nominal, plan.excitation, record0, key, s["noise"], jnp.asarray(s["noise_level"], dtype=float), s["q0"]
        )
    )
    rows = []
    for i, k in enumerate(plan.excitation.lines):
        for j in range(2):
            for source, x in (
                ("theory (linearised)", theory),
                ("extracted, noise-free", clean),
                ("extracted, noisy", dirty),
            ):
                rows.append(
                    {
                        "setting": s.name,
                        "harmonic": k,
                        "joint": j + 1,
                        "source": source,
                        "C": float(np.real(x[i, j])),
                        "D": float(-np.imag(x[i, j])),
                    }
                )
    return rows
