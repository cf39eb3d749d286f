"""The EKF/UKF on measured logs: augmented state ``(q, q', θ)`` (``2 n + p``), the model of the regressor.

The generic filters of ``jaxid.estimate.kalman.filters`` run with this transition: one RK4 step
(``jaxid.estimate.logs.stepping.model_step``) of ``Y(q, q', q'') θ = τ`` per sample under the low-passed
measured torque at the stages ``t, t + Δ/2, t + Δ``; ``θ`` constant (no random walk). The
emissions are the measured (resampled, unfiltered) angles.

Noise model (stated, not tuned on held-out data): measurement std ``measurement_std`` [rad]
(default: the angle noise about the filtered angle, at least 1e-3 rad — the model error of a real
arm dwarfs the encoder noise, and a filter told otherwise becomes overconfident); velocity
process noise ``velocity_process_std`` [rad/s per step] (default 0.01) or, where the torque reading's
noise is known (``torque_std`` [N m], a data sheet's figure), that noise carried through the model: the
filter's input is the measured torque, whose error adds ``h D⁻¹ e`` to the velocity each step, so the
velocities' process covariance is ``h² D⁻¹ diag(σ_τ²) D⁻ᵀ`` (``mass_floor.velocity_covariance``; ``D`` the start's mass
matrix, averaged over ``MASS_POINTS`` angles of the logs; with both, ``velocity_process_std²`` is added).
Measured on 30 trials of ``benchmark_panda`` (the setting's ``σ_τ`` = 0.2 N m; docs/estimators.md, "The
EKF's process noise"): the median over parameters of Monte Carlo std / reported std 0.45 → 0.87 on the
rich setting, 0.32 → 0.66 on the poor one, and RMSE/√CRLB 4.0 → 2.5 and 2.0 → 1.7. The logs are processed in
turn, the parameter mean and covariance of one log's end the prior of the next; the first prior
is the start estimate with std ``max(initial_relative_std · |θ|, 10 · its std)``.

Damped θ update (``mass_floor``, default 0.9): on poorly exciting data the unexcited directions of
θ keep a wide prior, and the first updates can carry θ where the model's mass matrix is not positive
definite; when the arm then moves through angles where it is singular, the accelerations and the
filter blow up (the Panda's ``consistency_poor`` trials: indefinite within 10 samples, non-finite
after 270-1700). So each θ update is shortened to the largest of 1, 1/2, …, 1/16, 0 that keeps
``D(q, θ) − floor · I`` positive definite at ``MASS_POINTS`` angles of the log (``mass_floor.py``; ``D`` is linear in θ:
exact, and cheap per step), ``floor`` = ``mass_floor`` × the start's smallest eigenvalue there; the
covariance is that of the gain used (``jaxid.estimate.kalman.filters``). A start that is not positive definite there
gets ``floor = 0``. Keeping the eigenvalue near the start's also keeps the model about as stiff as
the start that chose the RK4 substeps (``stable_substeps``). ``mass_floor = 0`` turns it off.

Speed: one log is one compiled program (``_filter_log``: the model static, hashed by identity; the data, start and
noise levels traced); ``kalman_filter_batch`` runs many trials' logs (one each) as one ``vmap`` of it. The EKF runs
``augmented_extended_kalman_filter``: ``θ`` constant and the angles the state's first entries, the covariance's predict
and update are products of ``2 n`` or ``n`` rows, not dense ``(2 n + p)²`` matrices (the same filter to 1e-12 on 20
Panda trials; 12.9 → 10.4 s: docs/performance.md, "The EKF's block-structured covariance"). The transition's Jacobian:
``jacfwd`` through the accelerations' custom JVP, one copy of the model per step; in ``kalman_filter_batch``, on a
``SerialArm``'s base columns, one sample of output error's forward sensitivities on the unrolled dynamics
(``sensitivities.model_step_jacobian``: Panda trials 0.77 → 0.51 s rich, 2.44 → 1.30 s poor). Its programs trace ~7 s
longer, which one fit's few logs do not repay (``scripts/check_six_joint_fit.py``'s EKF 21 → 36 s), so
``kalman_filter_fit`` keeps ``jacfwd`` (docs/performance.md, "The EKF's transition").

Standard deviations: the final filtered covariance of ``θ`` — exact only for a linear-Gaussian
model with the stated noise; it ignores linearisation error and the model error.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..._platform import thread_map
from ..logs.data import FilteredLog, Known, Regressor, angle_noise_std
from ..logs.idim import Identification, _row_bucket
from ..logs.sensitivities import model_step_jacobian
from ..logs.stepping import model_step, stable_substeps, stage_torques
from .filters import augmented_extended_kalman_filter, unscented_kalman_filter
from .mass_floor import _mass_limit, _mass_points, velocity_covariance

__all__ = ["KINDS", "kalman_filter_batch", "kalman_filter_fit"]

#: The Kalman filters on logs (``kind``): each runs its logs one sample after another, a scan on one core.
KINDS = ("ekf", "ukf")


def kalman_filter_fit(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    start: Identification,
    kind: str = "ekf",
    measurement_std: float | None = None,
    velocity_process_std: float | None = None,
    initial_relative_std: float = 0.3,
    known: Known | None = None,
    mass_floor: float = 0.9,
    torque_std: float | Sequence[float] | None = None,
) -> Identification:
    """Run the EKF (``kind="ekf"``) or UKF (``"ukf"``) over the logs in turn (module docstring).

    ``known``: torque of fixed parameters (default none). ``mass_floor``: the damped θ update keeps
    the model's mass matrix, at ``MASS_POINTS`` angles of the logs, above this fraction of the start's
    smallest eigenvalue there (0: no limit; module docstring). ``torque_std`` [N m] (one, or one per joint):
    the torque reading's noise, carried to the velocities' process noise (module docstring); then
    ``velocity_process_std`` (default 0.01 rad/s without it, 0 with it) is added on top. Raises ``ValueError``
    if the filter diverges, or for a ``torque_std`` that is not positive or a start whose mass matrix is not
    positive definite anywhere on the logs (with a ``torque_std``).
    """
    noise = (measurement_std, velocity_process_std, torque_std)
    prep = _prepare(logs, start, kind, noise, initial_relative_std, mass_floor, regressor, known)
    theta, cov = prep["theta"], prep["cov"]
    m = 2 * logs[0].joints
    resid = []
    for d in logs:
        y, stages = _log_arrays(d)
        # Padded (the last sample repeated) to a few lengths per octave, the padding masked: logs of any
        # length share a compiled program (one per length was 10-30 s each for a six-joint arm).
        size = _row_bucket(y.shape[0])
        valid = np.arange(size) < y.shape[0]
        mean, full_cov, filtered_q = _filter_log(
            jnp.asarray(theta),
            jnp.asarray(cov),
            jnp.asarray(np.concatenate([y, np.repeat(y[-1:], size - y.shape[0], axis=0)])),
            jnp.asarray(np.concatenate([stages, np.repeat(stages[-1:], size - stages.shape[0], axis=0)])),
            d.q[d.usable.start],
            d.qd[d.usable.start],
            jnp.asarray(prep["r_std"]),
            jnp.asarray(prep["velocity_cov"]),
            jnp.asarray(prep["mass_basis"]),
            jnp.asarray(prep["mass_constant"]),
            jnp.asarray(prep["floor"]),
            jnp.asarray(valid),
            regressor=regressor,
            known=known,
            kind=kind,
            sample_step=prep["sample_step"],
            substeps=prep["substeps"],
        )
        mean, full_cov = np.asarray(mean), np.asarray(full_cov)
        error = _divergence(mean, full_cov, d, kind, initial_relative_std, prep)
        if error is not None:
            raise error
        theta, cov = mean[m:], full_cov[m:, m:]
        resid.append(np.asarray(filtered_q)[: y.shape[0]] - y)
    return _identification(kind, tuple(names), theta, cov, np.concatenate(resid), len(logs), prep)


def kalman_filter_batch(
    logs: Sequence[FilteredLog],
    regressor: Regressor,
    names: Sequence[str],
    *,
    starts: Sequence[Identification],
    kind: str = "ekf",
    measurement_std: float | None = None,
    velocity_process_std: float | None = None,
    initial_relative_std: float = 0.3,
    known: Known | None = None,
    mass_floor: float = 0.9,
    torque_std: float | Sequence[float] | None = None,
    width: int | None = None,
) -> list[Identification | ValueError]:
    """``kalman_filter_fit`` on many trials at once: ``logs[i]`` (one log per trial) from ``starts[i]``.

    Returns, per trial, its ``Identification`` or, where its filter diverged, the ``ValueError`` that
    ``kalman_filter_fit([logs[i]], ..., start=starts[i])`` raises (returned, not raised: a status).
    Each trial's host-side set-up (noise level, RK4 substeps, prior, mass floor) is its own; the
    trials that share a substep count and log shape run as one ``vmap`` of the filter, padded to a power
    of two with copies of their last trial (so few sizes compile), so a trial's result does not depend
    on the others in the call beyond round-off (``tests/test_ekf.py``). The substep count is traced
    (``stepping.integrate_sample``): trials at every count share one program. ``width``: run every
    group in blocks of this many trials instead, the last padded: one program whatever the groups'
    sizes, and a trial's bits independent of the others in the call (the benchmark's chunks). The
    blocks are spread over the host's cores.
    """
    if len(logs) != len(starts):
        raise ValueError(f"kalman_filter_batch: {len(logs)} logs but {len(starts)} starts; give one start per log.")
    names = tuple(names)
    preps = [
        _prepare(
            [d],
            st,
            kind,
            (measurement_std, velocity_process_std, torque_std),
            initial_relative_std,
            mass_floor,
            regressor,
            known,
        )
        for d, st in zip(logs, starts, strict=True)
    ]
    arrays = [_log_arrays(d) for d in logs]
    groups: dict[tuple, list[int]] = {}
    for i, prep in enumerate(preps):
        key = (prep["substeps"], prep["sample_step"], arrays[i][0].shape, arrays[i][1].shape)
        groups.setdefault(key, []).append(i)
    out: list = [None] * len(logs)
    m = 2 * logs[0].joints
    blocks = []
    for (substeps, h, _, _), members in groups.items():
        size = width if width is not None else 1 << (len(members) - 1).bit_length()
        blocks += [(substeps, h, members[i : i + size], size) for i in range(0, len(members), size)]

    def run(block):
        substeps, h, members, size = block
        padded = members + [members[-1]] * (size - len(members))

        def stack(get):
            return jnp.asarray(np.stack([np.asarray(get(i)) for i in padded]))

        results = _filter_logs(
            stack(lambda i: preps[i]["theta"]),
            stack(lambda i: preps[i]["cov"]),
            stack(lambda i: arrays[i][0]),
            stack(lambda i: arrays[i][1]),
            stack(lambda i: logs[i].q[logs[i].usable.start]),
            stack(lambda i: logs[i].qd[logs[i].usable.start]),
            stack(lambda i: preps[i]["r_std"]),
            stack(lambda i: preps[i]["velocity_cov"]),
            stack(lambda i: preps[i]["mass_basis"]),
            stack(lambda i: preps[i]["mass_constant"]),
            stack(lambda i: preps[i]["floor"]),
            jnp.full(size, substeps, jnp.int32),
            regressor=regressor,
            known=known,
            kind=kind,
            sample_step=h,
        )
        return members, [np.asarray(r) for r in results]

    # The blocks are independent compiled calls: one thread per core (``thread_map``), in order.
    for members, (mean, full_cov, filtered_q) in thread_map(run, blocks):
        for k, i in enumerate(members):
            error = _divergence(mean[k], full_cov[k], logs[i], kind, initial_relative_std, preps[i])
            if error is not None:
                out[i] = error
                continue
            resid = filtered_q[k] - arrays[i][0]
            theta, cov = mean[k, m:], full_cov[k, m:, m:]
            out[i] = _identification(kind, names, theta, cov, resid, 1, preps[i])
    return out


def _prepare(logs, start, kind, noise, initial_relative_std, mass_floor, regressor, known) -> dict:
    """Host-side set-up of one run of the filter: checks, noise levels (``noise``: ``(measurement_std,
    velocity_process_std, torque_std)``), prior, substeps, mass floor."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'ekf' or 'ukf', got {kind!r}.")
    measurement_std, velocity_process_std, torque_std = noise
    n = logs[0].joints
    h = logs[0].sample_step
    if any(abs(d.sample_step - h) > 1e-12 * h for d in logs):
        raise ValueError(f"{kind} needs logs on one time grid; load them with the same sample_step.")
    if measurement_std is None:
        r_std = np.maximum(angle_noise_std(logs), 1e-3)
    else:
        r_std = np.full(n, float(measurement_std))
    theta = np.asarray(start.value)
    # RK4 substeps per sample for a stiff model (stepping.stable_substeps on the start), fixed for every log.
    substeps, _ = stable_substeps(regressor, theta, logs, known)
    cov = np.diag(np.maximum(initial_relative_std * np.abs(theta), 10 * start.std) ** 2)
    basis, constant, smallest = _mass_points(regressor, known, theta, logs, theta.shape[0])
    floor = mass_floor * max(smallest, 0.0) if mass_floor > 0 else -np.inf
    masses = np.einsum("kpij,p->kij", basis, theta) + constant
    return dict(
        theta=theta,
        cov=cov,
        r_std=r_std,
        velocity_cov=velocity_covariance(masses, h, velocity_process_std, torque_std, kind),
        substeps=substeps,
        sample_step=h,
        mass_basis=basis,
        mass_constant=constant,
        floor=np.float64(floor),
    )


def _log_arrays(d: FilteredLog) -> tuple[np.ndarray, np.ndarray]:
    """The filter's emissions (measured angles) and RK4 stage torques on the log's usable samples."""
    sl = d.usable
    y = np.asarray(d.q_raw)[sl]
    stages = np.asarray(stage_torques(d.tau))[sl.start : sl.stop]
    if stages.shape[0] < y.shape[0]:
        stages = np.concatenate([stages, stages[-1:]], axis=0)
    return y, stages


def _divergence(mean, full_cov, d, kind, initial_relative_std, prep) -> ValueError | None:
    if np.all(np.isfinite(mean)) and np.all(np.isfinite(full_cov)):
        return None
    return ValueError(
        f"{kind}: the filter diverged on {d.name} (its state or covariance left the finite range); start it "
        f"closer (estimators.{kind}.initial_relative_std, now {initial_relative_std:g}, smaller), trust the "
        f"model less (estimators.{kind}.velocity_process_std, now {_velocity_stds(prep)} rad/s, larger), or "
        'start from a physically consistent estimate (estimators.use with "idim_ls_consistent").'
    )


def _velocity_stds(prep) -> str:
    """The velocity process noise's per-joint std, for messages."""
    return ", ".join(f"{v:.3g}" for v in np.sqrt(np.diag(prep["velocity_cov"])))


def _identification(kind, names, theta, cov, resid, n_logs, prep) -> Identification:
    d_ = np.sqrt(np.diag(cov))
    ev = np.linalg.eigvalsh(cov / np.outer(d_, d_))
    return Identification(
        kind,
        names,
        theta,
        cov,
        len(names),
        float(np.sqrt(ev.max() / max(ev.min(), 1e-300))),
        np.sqrt(np.mean(resid**2, axis=0)),
        int(resid.shape[0]),
        n_logs,
        f"measurement std {prep['r_std'].round(6).tolist()} rad, velocity process std [{_velocity_stds(prep)}] rad/s/step; "
        "condition: of the posterior correlation of θ; residual: filtered − measured angle",
    )


def _filter_body(
    theta,
    cov,
    emissions,
    stages,
    q0,
    qd0,
    r_std,
    velocity_cov,
    mass_basis,
    mass_constant,
    mass_floor,
    valid=None,
    *,
    regressor,
    known,
    kind,
    sample_step,
    substeps=1,
    unrolled=False,
):
    """One log through the filter: the final mean and covariance of ``(q, q', θ)`` and the filtered
    angles. Compiled once per model (``regressor``, ``known``: static, hashed by identity), filter,
    step and log length; the data, the start and the noise levels are traced, so the logs of a
    benchmark's trials share one program. ``valid`` ``(T,)``: the samples that are data (the rest
    padding, which leaves the filter as it was: ``kalman_filter_fit`` pads every log to a few lengths). ``unrolled``:
    the EKF's transition Jacobian by ``model_step_jacobian`` (module docstring, "Speed")."""
    n = q0.shape[0]
    m = 2 * n
    p = theta.shape[0]

    def step(y, th, u):
        return model_step(regressor, th, y, u, sample_step, known, substeps)

    m0 = jnp.concatenate([q0, qd0, theta])
    p0 = jnp.zeros((m + p, m + p)).at[m:, m:].set(cov)
    p0 = p0.at[jnp.arange(n), jnp.arange(n)].set(r_std**2).at[jnp.arange(n, m), jnp.arange(n, m)].set(0.1**2)
    qx = jnp.zeros((m, m)).at[n:, n:].set(velocity_cov)
    r = jnp.diag(r_std**2)
    limit = _mass_limit(mass_basis, mass_constant, mass_floor, n)
    options = dict(update_limit=limit, valid=valid)
    if kind == "ekf" and unrolled:  # u: the stage torques and the step's index, unbatched (the unrolled path's barrier)
        inputs = (stages, jnp.arange(stages.shape[0]))

        def jacobian(y, th, u):
            return model_step_jacobian(regressor, th, y, u[0], sample_step, known, substeps, u[1] >= 0)

        result = augmented_extended_kalman_filter(
            lambda y, th, u: step(y, th, u[0]), qx, r, m0, p0, emissions, inputs, step_jacobian=jacobian, **options
        )
    elif kind == "ekf":  # θ constant, the angles measured: the block-structured EKF (same filter, cheaper)
        result = augmented_extended_kalman_filter(step, qx, r, m0, p0, emissions, stages, **options)
    else:

        def f(x, u):
            return jnp.concatenate([step(x[:m], x[m:], u), x[m:]])

        q = jnp.zeros((m + p, m + p)).at[:m, :m].set(qx)
        result = unscented_kalman_filter(f, lambda x: x[:n], q, r, m0, p0, emissions, stages, **options)
    return result.final_mean, result.final_covariance, result.filtered_means[:, :n]


#: ``_filter_body`` compiled with its substep count static (``kalman_filter_fit``: one log).
_filter_log = jax.jit(_filter_body, static_argnames=("regressor", "known", "kind", "sample_step", "substeps"))


@functools.partial(jax.jit, static_argnames=("regressor", "known", "kind", "sample_step"))
def _filter_logs(*arrays, regressor, known, kind, sample_step):
    """``_filter_body`` over a leading trial axis of every argument (one ``vmap``, one program): ``arrays`` its
    first eleven (``theta`` … ``mass_floor``) and each trial's RK4 substep count, traced (``(B,)``): one program for
    every count."""

    def one(*args):
        *data, count = args
        return _filter_body(
            *data, regressor=regressor, known=known, kind=kind, sample_step=sample_step, substeps=count, unrolled=True
        )

    return jax.vmap(one)(*arrays)
