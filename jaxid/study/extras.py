"""Per-setting tables that need the model rather than the trials: the Cramér–Rao bounds of the
setting's experiment and the Fourier-coefficient comparison (the paper's Figs. 2-3)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..crlb import linear_crlb
from ..estimators import resolve_unknowns
from ..estimators.nonlinear import nonlinear_crlb
from ..linearisation import linearise
from ..measurement import add_noise, noise_mean
from ..phasors import respond
from ..simulation import Record
from ..spectrum import fourier_coefficients
from .files import write_text
from .sampling import trial_key

__all__ = ["write_setting_extras", "coefficients_table"]


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
            nonlinear_crlb(
                nominal, excitation, unknowns, 1.0, q0=q0, sample_step=sample_step, measured_periods=measured_periods
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
        cov = linear_crlb(
            plan.nominal,
            plan.excitation,
            unknowns,
            noise_std=plan.sigma,
            sample_step=s["sample_step"],
            periods=s["measured_periods"],
            q0=s["q0"],
        )
        cov = np.asarray(cov)
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


def coefficients_table(exp, plan, record0: Record) -> list[dict]:
    """Theoretical (linearised, exact) vs extracted (noise-free and trial 0's noisy record) line
    coefficients ``C``, ``D`` of ``x(t) = C cos ωt + D sin ωt`` per harmonic and joint."""
    s = plan.setting
    rec0 = jax.tree.map(jnp.asarray, record0)
    noisy = add_noise(rec0, key=trial_key(exp.seed, s.name, 0), kind=s["noise"], level=s["noise_level"])
    lin = linearise(plan.nominal, jnp.asarray(s["q0"], dtype=float))
    omega = jnp.asarray(plan.excitation.line_frequencies)
    theory = np.asarray(respond(lin.frequency_response(omega), plan.excitation.phasors()))
    clean = np.asarray(fourier_coefficients(rec0, plan.excitation).Q)
    dirty = np.asarray(fourier_coefficients(noisy, plan.excitation).Q)
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
