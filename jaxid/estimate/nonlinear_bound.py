"""The Cramér–Rao bound of the nonlinear model: Fisher information of the periodic steady state.

The yardstick of ``nonlinear_output_error`` (``jaxid.estimate.nonlinear``, which re-exports
these): forward-mode sensitivities through one period, reduced to the periodic orbit.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..excitation.multisine import Multisine
from ..model import PARAMETER_NAMES, TwoLinkArm, holding_torque, validate_unknowns
from ..simulation.open_loop import steps_per_period
from ..simulation.steady_state import period_sensitivities, periodic_steady_state, torque_table
from ..types import compiled_when_concrete

__all__ = ["nonlinear_fisher", "nonlinear_crlb"]


def nonlinear_fisher(
    arm: TwoLinkArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    noise_std: float | Float[Array, ""],
    *,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    sample_step: float = 0.01,
    measured_periods: int = 1,
    substeps: int = 1,
    fit_offset: bool = True,
) -> Float[Array, "p p"]:
    """Fisher information of ``unknowns`` from ``measured_periods`` periods of angle samples.

    ``F = P Jᵀ J / σ²`` with ``J = d q(nΔ) / d θ`` the ``(2N, p)`` Jacobian of the nonlinear
    periodic steady state (forward-mode autodiff through one period, reduced to the periodic
    orbit), for independent Gaussian noise of standard deviation ``noise_std`` [rad] on every
    sample. With ``fit_offset`` each joint's mean is a nuisance (as in ``nonlinear_output_error``).
    Traceable in ``arm``, the excitation's amplitudes/phases/scale and ``noise_std``.
    """
    unknowns = validate_unknowns(unknowns, PARAMETER_NAMES)
    if not (isinstance(measured_periods, int) and measured_periods >= 1):
        raise ValueError(f"measured_periods must be a positive integer, got {measured_periods!r}.")
    n_per = steps_per_period(excitation.period, sample_step)
    orbit = periodic_steady_state(arm, excitation, q0=q0, sample_step=sample_step, substeps=substeps)
    torque = torque_table(
        excitation, holding_torque(arm, jnp.asarray(q0, dtype=float)), sample_step=sample_step, substeps=substeps
    )
    sens = period_sensitivities(
        arm,
        unknowns,
        arm.parameter_vector(unknowns),
        jax.lax.stop_gradient(orbit.initial_state),
        torque,
        samples_per_period=n_per,
        substeps=substeps,
    )
    jac = sens.jacobian
    if fit_offset:
        jac = jac - jnp.mean(jac, axis=0)
    jac = jac.reshape(-1, len(unknowns))
    return measured_periods * (jac.T @ jac) / jnp.asarray(noise_std, dtype=float) ** 2


@compiled_when_concrete  # one program on concrete inputs, not op by op
def nonlinear_crlb(
    arm: TwoLinkArm,
    excitation: Multisine,
    unknowns: Sequence[str],
    noise_std: float | Float[Array, ""],
    *,
    q0: Float[ArrayLike, "2"] = (0.0, 0.0),
    sample_step: float = 0.01,
    measured_periods: int = 1,
    substeps: int = 1,
    fit_offset: bool = True,
) -> Float[Array, "p p"]:
    """Cramér–Rao bound ``F⁻¹`` (``(p, p)`` covariance) for the nonlinear model; see ``nonlinear_fisher``.

    The square roots of its diagonal are the smallest standard deviations an unbiased estimator
    of ``unknowns`` can reach from this experiment with Gaussian angle noise ``noise_std`` [rad].
    """
    from .crlb import cramer_rao_bound  # crlb imports the estimators package

    return cramer_rao_bound(
        nonlinear_fisher(
            arm,
            excitation,
            unknowns,
            noise_std,
            q0=q0,
            sample_step=sample_step,
            measured_periods=measured_periods,
            substeps=substeps,
            fit_offset=fit_offset,
        )
    )
