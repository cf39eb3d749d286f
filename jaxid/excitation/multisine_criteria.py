"""The predicted-RMSE criterion of a multisine excitation: bias and Cramér–Rao bound per estimator.

For an arm, a noise level and a record length (``measured_periods`` periods of ``T/Δ`` samples)
the predicted mean squared error of an estimator at excitation scale ``s`` is

    MSE_i(s) = bias_i(s)² + CRLB_ii(s)

- **linear-model estimators** (``"equation_error"``, ``"ml"``, …): ``bias(s)`` is the
  *linearisation bias*, measured by running the estimator on the **noise-free** nonlinear steady
  state at scale ``s`` (it grows with ``s``); the variance is the linearised arm's Cramér–Rao bound
  ``jaxid.estimate.crlb.linear_crlb`` (it falls as ``1/s²``). The noise-induced (errors-in-variables) bias
  of equation error at low SNR is not included.
- **nonlinear output error** (``"nonlinear_oe"``): the nonlinear model has no linearisation bias;
  its "bias" column is the error of the estimator on the noise-free record from its default
  start (ML / inverse-dynamics estimate, with a nominal 10 % off), i.e. zero whenever the fit
  converges to the truth (and it exposes a scale where it does not). The variance is the nonlinear bound ``nonlinear_crlb``.

A scale is marked **infeasible** (``rmse`` ``inf``) when the simulated arm does not settle on the
periodic orbit the shooting solver finds (the simulation is not steady, diverged, or the two
differ by more than ``orbit_tolerance``: multiple or unstable periodic orbits, link 2 going over
the top), or when an estimator fails on the noise-free data.

``predict_rmse`` is the pure, batched computation (one compiled ``vmap`` over the candidate
excitations); ``jaxid.excitation.multisine_design.design_scale`` searches the scale with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..estimate.base import CONVERGED
from ..estimate.crlb import linear_crlb
from ..estimate.interface import estimator_class
from ..estimate.nonlinear import nonlinear_crlb
from ..model import TwoLinkArm, validate_unknowns
from ..simulation.open_loop import SUCCESS, simulate, transient_periods
from ..simulation.steady_state import periodic_steady_state
from .multisine import Multisine

__all__ = ["NONLINEAR", "RmsePrediction", "predict_rmse"]

NONLINEAR = "nonlinear_oe"


class RmsePrediction(eqx.Module):
    """Predicted errors for ``B`` candidate excitations and ``E`` estimators.

    Attributes:
        bias: ``(B, E, p)`` noise-free error of each estimator (linearisation bias) [SI units].
        crlb_std: ``(B, E, p)`` square root of the Cramér–Rao bound's diagonal (linear bound for
            linear-model estimators, nonlinear bound for ``nonlinear_oe``).
        rmse: ``(B, E, p)`` ``sqrt(bias² + crlb_std²)``; ``inf`` where infeasible.
        feasible: ``(B, E)`` the steady state is the shooting orbit and the estimator converged.
        orbit_error: ``(B,)`` max |simulated − shooting| steady-state angle [rad].
        names: static estimator names.
    """

    bias: Float[Array, "B E p"]
    crlb_std: Float[Array, "B E p"]
    rmse: Float[Array, "B E p"]
    feasible: Array
    orbit_error: Float[Array, " B"]
    names: tuple[str, ...] = eqx.field(static=True)


def _with_gains(excitation: Multisine, scale: Array, gains: Array) -> Multisine:
    return excitation.replace(scale=scale, amplitudes=excitation.amplitudes * gains[:, None])


_PREDICTIONS: dict = {}


def _batched_prediction(
    unknowns, estimators, noise_std, measured_periods, sample_step, q0, discard_periods, orbit_tolerance
):
    """``jit(vmap)`` of one candidate's prediction over ``(scale, gain)``, built once per static
    design (a new closure per call would be traced and compiled again every call)."""
    key = (unknowns, estimators, noise_std, measured_periods, sample_step, q0, discard_periods, orbit_tolerance)
    if key in _PREDICTIONS:
        return _PREDICTIONS[key]
    classes = [estimator_class(name) for name in estimators]
    q0 = jnp.asarray(q0, dtype=float)

    def one(arm, excitation, scale, gain):
        truth = arm.parameter_vector(unknowns)
        # The nonlinear fit's last-resort start is the nominal's values: make them wrong (+10 %)
        # so the feasibility check does not start at the truth.
        guess = arm.with_parameters(unknowns, truth * 1.1)
        ex = _with_gains(excitation, scale, gain)
        rec = simulate(arm, ex, q0=q0, sample_step=sample_step, discard_periods=discard_periods)
        orbit = periodic_steady_state(arm, ex, q0=q0, sample_step=sample_step)
        orbit_error = jnp.max(jnp.abs(orbit.q - rec.q))
        steady = (rec.status == SUCCESS) & orbit.converged & (orbit_error <= orbit_tolerance)
        lin_std = jnp.sqrt(
            jnp.diag(
                linear_crlb(
                    arm, ex, unknowns, noise_std=noise_std, sample_step=sample_step, periods=measured_periods, q0=q0
                )
            )
        )
        nl_std = jnp.sqrt(
            jnp.diag(
                nonlinear_crlb(
                    arm, ex, unknowns, noise_std, q0=q0, sample_step=sample_step, measured_periods=measured_periods
                )
            )
        )
        bias, std, ok = [], [], []
        for cls in classes:
            # Estimators that fit the nonlinear arm start from a wrong nominal, never the truth.
            nominal = guess if cls.model == "nonlinear" else arm
            est = cls()(rec, ex, nominal, unknowns=unknowns, q0=q0, noise_std=noise_std)
            std.append(nl_std if cls.bound == "nonlinear" else lin_std)
            bias.append(est.value - truth)
            ok.append(steady & (est.status == CONVERGED) & jnp.all(jnp.isfinite(est.value)))
        bias, std, ok = jnp.stack(bias), jnp.stack(std), jnp.stack(ok)
        rmse = jnp.where(ok[:, None], jnp.sqrt(bias**2 + std**2), jnp.inf)
        return bias, std, rmse, ok, orbit_error

    _PREDICTIONS[key] = jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0)))
    return _PREDICTIONS[key]


def predict_rmse(
    arm: TwoLinkArm,
    excitation: Multisine,
    scales: Float[ArrayLike, " B"],
    *,
    unknowns: Sequence[str] = ("m1", "m2", "fv1", "fv2"),
    noise_std: float,
    measured_periods: int = 1,
    sample_step: float = 0.01,
    estimators: Sequence[str] = ("equation_error", "ml", NONLINEAR),
    joint_gains: Float[ArrayLike, "B 2"] | None = None,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    discard_periods: int | None = None,
    orbit_tolerance: float = 1e-6,
) -> RmsePrediction:
    """Predict bias, CRLB and RMSE of ``estimators`` for each candidate excitation.

    Candidate ``b`` is ``excitation`` with scale ``scales[b]`` and joint amplitudes multiplied by
    ``joint_gains[b]`` (default ``(1, 1)``). One compiled ``vmap`` over the candidates (memory:
    one simulated record of ``T/Δ`` samples and one period of tangents per candidate).
    ``discard_periods`` defaults to ``transient_periods`` of the linearisation (add more if the
    nonlinear transient is slower; infeasible candidates are flagged, not hidden).
    Raises ``ValueError`` for an unknown estimator name.
    """
    unknowns = validate_unknowns(unknowns)
    estimators = tuple(estimators)
    for name in estimators:
        estimator_class(name)  # raises with the available names
    scales = jnp.atleast_1d(jnp.asarray(scales, dtype=float))
    gains = jnp.ones((scales.shape[0], 2)) if joint_gains is None else jnp.asarray(joint_gains, dtype=float)
    if gains.shape != (scales.shape[0], 2):
        raise ValueError(f"joint_gains must have shape ({scales.shape[0]}, 2), got {gains.shape}.")
    if discard_periods is None:
        discard_periods = transient_periods(arm, excitation, q0)
    q0 = tuple(float(x) for x in np.asarray(q0, dtype=float).reshape(2))
    key = (unknowns, estimators, float(noise_std), int(measured_periods), float(sample_step), q0)
    key += (int(discard_periods), float(orbit_tolerance))
    bias, std, rmse, ok, orbit_error = _batched_prediction(*key)(arm, excitation, scales, gains)
    return RmsePrediction(bias, std, rmse, ok, orbit_error, estimators)
