"""What a closed-loop run logs (``ClosedLoopRecord``) and the sensor noise in it (``MeasurementNoise``).

Measurement (``MeasurementNoise``, Gaussian, per joint): measured angle ``= q + e_q``, velocity
``= q' + e_v``, torque ``= tau_command + e_tau`` (a sensor error, not a disturbance). A trial's noise
is drawn from its own key only (``measurement_noise``), never from its position in a batch.
``jaxid.simulation.closed_loop.simulate_closed_loop`` adds exactly these draws to the true signals; the noise
levels are array leaves (a sweep over them does not recompile).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ..types import any_traced

__all__ = ["MeasurementNoise", "measurement_noise", "ClosedLoopRecord"]


class MeasurementNoise(eqx.Module):
    """Gaussian measurement noise standard deviations (scalars or ``(n,)`` per joint; array leaves).

    Attributes:
        angle_std: angle encoder noise [rad or m].
        velocity_std: reported velocity noise [rad/s or m/s].
        torque_std: torque reading noise [N m or N].
    """

    angle_std: Float[Array, "*#n"]
    velocity_std: Float[Array, "*#n"]
    torque_std: Float[Array, "*#n"]

    def __init__(self, angle_std: ArrayLike = 0.0, velocity_std: ArrayLike = 0.0, torque_std: ArrayLike = 0.0):
        self.angle_std = jnp.asarray(angle_std, dtype=float)
        self.velocity_std = jnp.asarray(velocity_std, dtype=float)
        self.torque_std = jnp.asarray(torque_std, dtype=float)
        for name in ("angle_std", "velocity_std", "torque_std"):
            value = getattr(self, name)
            if value.ndim > 1:
                raise ValueError(f"MeasurementNoise.{name} must be a scalar or (n,), got shape {value.shape}.")
            if not any_traced(value) and not bool(jnp.all(value >= 0)):
                raise ValueError(f"MeasurementNoise.{name} must be non-negative, got {value}.")


def measurement_noise(
    noise: MeasurementNoise, key: PRNGKeyArray, samples: int, dof: int
) -> tuple[Float[Array, "samples dof"], Float[Array, "samples dof"], Float[Array, "samples dof"]]:
    """The noise a trial adds to its angles, velocities and torque: three ``(samples, dof)`` arrays,
    ``std · N(0, 1)`` from ``jax.random.split(key, 3)`` (in that order). ``simulate_closed_loop``
    draws exactly these, so ``record.tau − measurement_noise(...)[2] == record.tau_command``."""
    keys = jax.random.split(key, 3)
    stds = (noise.angle_std, noise.velocity_std, noise.torque_std)
    return tuple(std * jax.random.normal(k, (samples, dof)) for std, k in zip(stds, keys, strict=True))


class ClosedLoopRecord(eqx.Module):
    """What the robot logs over a closed-loop run of ``N`` samples (``t_k = k Δ``, ``k = 0 … N − 1``).

    Attributes:
        t: ``(N,)`` sample times [s].
        q: ``(N, n)`` measured angles [rad] (true + ``angle_std`` noise).
        qd: ``(N, n)`` measured velocities [rad/s] (true + ``velocity_std`` noise).
        tau_command: ``(N, n)`` commanded torque [N m]: the controller's output after saturation, the
            torque the arm receives at ``t_k`` (``"hold"``: over ``[t_k, t_k + Δ)``).
        tau: ``(N, n)`` measured torque [N m] (``tau_command`` + ``torque_std`` noise).
        q_reference, qd_reference, qdd_reference: ``(N, n)`` the reference at ``t_k``.
        saturated: ``(n,)`` number of samples whose command was clipped at the effort limit, per joint.
        status: ``Status.SUCCESS`` or ``Status.DIVERGED`` (``int32``).
        sample_step: static ``Δ`` [s].

    Under ``vmap`` (or from ``simulate_closed_loop_batch``) every array gains a leading batch axis.
    """

    t: Float[Array, "*batch N"]
    q: Float[Array, "*batch N n"]
    qd: Float[Array, "*batch N n"]
    tau_command: Float[Array, "*batch N n"]
    tau: Float[Array, "*batch N n"]
    q_reference: Float[Array, "*batch N n"]
    qd_reference: Float[Array, "*batch N n"]
    qdd_reference: Float[Array, "*batch N n"]
    saturated: Int[Array, "*batch n"]
    status: Int[Array, "*batch"]
    sample_step: float = eqx.field(static=True)
