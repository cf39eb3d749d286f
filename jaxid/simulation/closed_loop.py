"""Closed-loop simulation of N-joint arms: a periodic reference, a joint controller, a robot's log.

A seven-joint arm under gravity falls under an open-loop torque, so identification experiments on
real arms track an exciting periodic reference with a joint controller (DESIGN §8). The pieces:

- **Reference**: ``jaxid.excitation.fourier.FourierTrajectory`` (Swevers et al. 1997), drawn inside the
  joint limits (``JointLimits``) by ``random_fourier_trajectory``.
- **Controllers** (``jaxid.simulation.controllers``): ``PDController``, ``ComputedTorque``, ``OpenLoop`` and
  their default gains (``tuned``, 10 Hz).
- **Record and measurement noise** (``jaxid.simulation.closed_loop_record``): ``ClosedLoopRecord``, what a
  robot logs (time, measured angles and velocities, commanded and measured torque, the reference)
  and a status; ``MeasurementNoise``, the Gaussian sensor noise in it.
- **Simulation**: ``simulate_closed_loop`` (this module; one trial, pure, ``jit``/``vmap``-able) and
  ``simulate_closed_loop_batch`` (``jaxid.simulation.closed_loop_batch``: a batch of arms and noise keys,
  chunked and sharded over the local devices), both running the one-trial kernel of
  ``jaxid.simulation.closed_loop_kernel`` (fixed-step RK4 on the true arm; the unrolled fast path for a
  ``SerialArm``; the divergence status).

Control timing (``control=``):

- ``"hold"`` (default; what a real robot's 1 kHz joint controller does): at each sample time
  ``t_k = k Δ`` the controller reads the *measured* angles and velocities (the logged values, noise
  included) and its torque is held constant over ``[t_k, t_k + Δ)`` (zero-order hold), integrated
  with ``substeps`` RK4 steps. The measurement noise therefore enters the motion: closed-loop data
  correlate the noise with the regressor (why IDIM-LS is biased in closed loop, DESIGN §8).
- ``"stage"``: the controller is evaluated at every RK4 stage from the *true* state (a
  continuous-time control law; measurement noise stays outside the loop). With a computed-torque
  controller whose model is the true arm the error dynamics are then exactly linear.

In both modes the logged commanded torque at ``t_k`` is the torque applied to the arm at ``t_k``
(``"hold"``: over the whole interval), so ``tau_command = ID_true(q, q', q''(t_k⁺))`` holds at every
sample.

Status: ``Status.SUCCESS`` ("ok") or ``Status.DIVERGED`` ("diverged") when the state becomes
non-finite or an angle leaves ``10 ×`` its position range about the range's middle; the signals of
a diverged trial may hold NaN, never silently.

Static versus traced: every number that may vary across a sweep is an array leaf (coefficients,
offsets, gains, model parameters, noise levels, limits, keys; saturation too: without it the effort
limit is infinite, the same program); the period, the number of harmonics, the sample step,
substeps, duration and control mode are static (a new value recompiles).

The controllers, ``MeasurementNoise`` and ``simulate_closed_loop_batch`` are re-exported here for
user code that imports them from this module's old path (``jaxid.closed_loop``); jaxid's own modules
import each from its home.
"""

from __future__ import annotations

from jaxtyping import ArrayLike, Float, PRNGKeyArray

from ..excitation.fourier import FourierTrajectory, JointLimits
from ..model.interface import AbstractArm
from ..model.serial import SerialArm
from ..types import compiled_when_concrete
from .closed_loop_batch import simulate_closed_loop_batch
from .closed_loop_kernel import Control, _check_options, _closed_loop, _initial
from .closed_loop_record import ClosedLoopRecord, MeasurementNoise
from .controllers import AbstractController, ComputedTorque, PDController

__all__ = [
    "simulate_closed_loop",
    # re-exported from their modules
    "ComputedTorque",
    "MeasurementNoise",
    "PDController",
    "simulate_closed_loop_batch",
]

_compiled_closed_loop = compiled_when_concrete(_closed_loop)


def simulate_closed_loop(
    arm: AbstractArm,
    reference: FourierTrajectory,
    controller: AbstractController,
    *,
    duration: float,
    sample_step: float = 1e-3,
    substeps: int = 1,
    key: PRNGKeyArray | None = None,
    noise: MeasurementNoise | None = None,
    control: Control = "hold",
    saturate: bool = False,
    initial_state: Float[ArrayLike, "2 n"] | None = None,
    limits: JointLimits | None = None,
) -> ClosedLoopRecord:
    """Simulate one closed-loop run of the true ``arm`` tracking ``reference`` with ``controller``.

    Args:
        arm: the true arm (unbatched; ``vmap`` this function or use ``simulate_closed_loop_batch``).
        reference: the ``FourierTrajectory`` to track.
        controller: ``PDController``, ``ComputedTorque``, ``OpenLoop`` or another ``AbstractController``.
        duration: logged time ``N Δ`` [s] (static; a whole number of samples).
        sample_step: ``Δ`` [s] (static): the log's and, with ``control="hold"``, the controller's period.
        substeps: RK4 steps per sample (static), ``h = Δ / substeps``.
        key: PRNG key of this trial's measurement noise (``measurement_noise``); ``None``: no noise.
        noise: ``MeasurementNoise`` (needs ``key``); ``None``: no noise.
        control: ``"hold"`` (default; zero-order hold at the sample rate on the measured signals) or
            ``"stage"`` (evaluated at every RK4 stage on the true state); see the module docstring.
        saturate: clip the command at ``± limits.effort`` (the URDF effort limits) and count the
            clipped samples (``record.saturated``); not a static option (one program with or without).
        initial_state: ``(2, n)`` ``(q, q')`` at ``t = 0``; default the reference's (``reference.initial_state()``).
        limits: ``JointLimits`` for saturation and the divergence test; default ``joint_limits(arm)``.

    Returns a ``ClosedLoopRecord``. Pure and ``jit``/``vmap``-able (the trial's result depends only on
    its own ``arm``, ``key`` and ``initial_state``); on concrete inputs it runs as one compiled program
    per set of static options and shapes. Raises ``ValueError`` before compiling for inconsistent
    options (joint counts, a duration that is not whole samples, noise without a key, float32).
    """
    samples, limits = _check_options(
        arm, reference, controller, noise, key, limits, substeps, control, saturate, duration, sample_step
    )
    if isinstance(arm, SerialArm) and arm.inertial.ndim != 2:
        raise ValueError(
            f"simulate_closed_loop takes one arm (inertial (n, 10)), got inertial {arm.inertial.shape}; "
            "use simulate_closed_loop_batch or jax.vmap for a batch."
        )
    y0 = _initial(reference, initial_state, arm.dof)
    if key is not None and noise is None:
        noise = MeasurementNoise()
    return _compiled_closed_loop(
        arm,
        reference,
        controller,
        noise,
        limits,
        key,
        y0,
        samples=samples,
        sample_step=float(sample_step),
        substeps=int(substeps),
        control=control,
    )
