"""One setting of the N-joint benchmark: its plan, the closed-loop simulation of its trials, and the
estimators run on each trial's log.

**Plan** (``make_plan``, once per setting): the nominal ``SerialArm`` from the URDF; the simulated
("true") arm, which is the nominal one plus ``true_viscous`` and ``true_coulomb`` friction; the estimators'
model, the base parameters of the arm (``jaxid.base_parameters``) with the Coulomb columns
dropped when ``model_coulomb = false`` (then the friction is a model error: present in the data,
absent from the model); the reference (``random_fourier_trajectory`` from ``trajectory_seed``, or a
designed one), the controller (tuned on the *nominal* arm: it knows no friction), the noise; and
two noise-free closed-loop runs: the benchmark trajectory itself (its exact states give the
Cramér–Rao bound, ``jaxid.estimate.crlb.base_parameter_crlb``) and a held-out validation trajectory
(``validation_seed``), on which every estimate predicts the torque.

**Trial** ``i``: its key ``trial_key(seed, setting, i)`` (``jaxid.study.sampling``) draws its
measurement noise; the closed loop is simulated (``simulate_closed_loop_batch``, a chunk of trials
in one compiled call; the noise enters the loop through the controller); the noisy log is filtered
(``filter_log`` at ``cutoff_hz``) and every estimator of the setting runs on it. A trial's rows
depend on the seed, the setting and its index only.

**Estimators** (``jaxid.config.benchmark.ESTIMATOR_DOC``): all run on the same filtered log and the same rows.
IDIM-LS is computed for every trial: the start of the others (of those that simulate, consistent LS). A failure (an exception, a
non-finite estimate, a solver that stops at its iteration limit, a diverged simulation) is a
status on the trial's rows, never a silent NaN.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..config.benchmark import Benchmark
from ..config.study import Setting
from ..estimate import IdimLS, make_estimator
from ..estimate.abstract import simulation_start
from ..estimate.crlb import base_parameter_crlb
from ..estimate.kalman.logs import KINDS
from ..estimate.logs import ConsistentMap, RegressionModel, filter_log
from ..excitation.fourier import FourierTrajectory, check_limits, random_fourier_trajectory
from ..fit.model import BaseColumns, StandardColumns, nonnegative_names
from ..measure.logs import MeasuredLog
from ..model import SerialArm, base_parameters
from ..simulation.closed_loop_batch import simulate_closed_loop_batch
from ..simulation.closed_loop_record import MeasurementNoise
from ..simulation.controllers import ComputedTorque, PDController
from ..study.sampling import setting_key, trial_key
from ..types import Status
from .batched import batched_fits, simulates
from .didim import didim_chunk

__all__ = [
    "BenchmarkPlan",
    "make_plan",
    "simulate_trials",
    "run_estimators",
    "validation_rmse",
    "setting_estimator",
]


@dataclass
class BenchmarkPlan:
    """Everything a setting's trials share (``make_plan``)."""

    setting: Setting
    seed: int
    nominal: SerialArm
    true_arm: SerialArm
    columns: tuple[int, ...]  # base columns of the estimators' model
    names: tuple[str, ...]
    labels: tuple[str, ...]
    truth: np.ndarray  # (p,) the true base parameters of the model's columns
    regressor: BaseColumns
    standard: StandardColumns
    base: object
    reference: FourierTrajectory
    controller: object
    noise: MeasurementNoise
    prior: np.ndarray  # (14 n,) the consistent fit's prior (standard parameters)
    crlb: np.ndarray  # (p, p)
    validation: tuple  # (q, qd, qdd, tau) of the noise-free validation run
    heldout_truth: float  # torque RMSE of the true parameters on the validation run (model error)
    info: dict  # trajectory figures written to extras.json
    width: int  # trials per simulated chunk

    @functools.cached_property
    def model(self) -> RegressionModel:
        """The estimators' model: the base columns, the sign rule of ``jaxid.fit.model``, the consistent
        map (built once per plan: its parametrisation's compiled programs are shared by the trials)."""
        columns = np.asarray(self.columns)

        def to_model(standard):
            return self.base.values(standard)[..., columns]

        nonnegative = nonnegative_names(self.names, self.labels)
        return RegressionModel(
            self.regressor,
            self.names,
            None,
            nonnegative,
            ConsistentMap(self.nominal, self.standard, to_model, self.prior),
        )

    @property
    def duration(self) -> float:
        return self.setting["period"] * self.setting["measured_periods"]


def _reference(plan_arm: SerialArm, s: Setting, seed: int) -> FourierTrajectory:
    if s["excitation"] == "random":
        return random_fourier_trajectory(
            plan_arm, s["harmonics"], s["period"], key=jax.random.key(s["trajectory_seed"]), margin=s["margin"]
        )
    # A designed excitation (``jaxid.excitation.fourier_design``; the config checks it is available): its
    # criterion minimised from the random start of ``trajectory_seed``, for this setting's noise.
    from ..excitation.fourier_design import design_trajectory

    result = design_trajectory(
        plan_arm,
        harmonics=s["harmonics"],
        period=s["period"],
        noise_std=s["torque_std"],
        criterion=s["excitation"],
        seed=s["trajectory_seed"],
        margin=s["margin"],
        periods=s["measured_periods"],
    )
    return result.trajectory


def _controller(s: Setting, nominal: SerialArm, reference: FourierTrajectory):
    if s["controller"] == "pd":
        return PDController.tuned(nominal, reference, frequency=s["controller_frequency"])
    return ComputedTorque.tuned(nominal, frequency=s["controller_frequency"])


def simulate_trials(
    plan: BenchmarkPlan, trials: np.ndarray, *, reference=None, controller=None, noise=None
) -> dict[str, np.ndarray]:
    """The closed-loop logs of ``trials`` (their keys), as host arrays with a leading trial axis.

    Always simulates ``plan.width`` trials (padded with copies of the last one, dropped), so every
    call is the same compiled program and a trial's bits do not depend on its chunk's size.
    """
    count = len(trials)
    padded = np.concatenate([trials, np.full(plan.width - count, trials[-1])]).astype(np.int64)
    s = plan.setting
    keys = jax.vmap(lambda i: trial_key(plan.seed, s.name, i))(jnp.asarray(padded))
    record = simulate_closed_loop_batch(
        plan.true_arm,
        plan.reference if reference is None else reference,
        plan.controller if controller is None else controller,
        duration=plan.duration,
        keys=keys,
        sample_step=s["sample_step"],
        substeps=s["substeps"],
        noise=plan.noise if noise is None else noise,
    )
    fields = ("t", "q", "qd", "tau", "tau_command", "status")
    return {f: np.asarray(getattr(record, f))[:count] for f in fields}


@eqx.filter_jit
def _true_accelerations(arm, q, qd, tau):
    return jax.vmap(arm.forward_dynamics)(q, qd, tau)


def _noise_free(plan: BenchmarkPlan, reference, controller) -> tuple | None:
    """``(q, q', q'', τ)`` of a noise-free run (same compiled program as the trials: zero noise stds), or
    ``None`` when it diverges."""
    silent = MeasurementNoise(0.0, 0.0, 0.0)
    run = simulate_trials(plan, np.zeros(1, dtype=np.int64), reference=reference, controller=controller, noise=silent)
    if run["status"][0] != Status.SUCCESS:
        return None
    q, qd, tau = run["q"][0], run["qd"][0], run["tau_command"][0]
    qdd = np.asarray(_true_accelerations(plan.true_arm, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau)))
    return q, qd, qdd, tau


#: The nominal arm with its base parameters per URDF (path, content) and arm options, and the model's columns per
#: arm: one object for every setting of a run, so that each program taking the model as a static argument (hashed
#: by identity) compiles once for all the settings with the same columns, not once per setting.
_SHARED: dict = {}


def _shared(key, make):
    if key not in _SHARED:
        _SHARED[key] = make()
    return _SHARED[key]


def make_plan(exp: Benchmark, setting: Setting) -> BenchmarkPlan:
    """The plan of one setting (module docstring): arms, model, reference, controller, noise, the
    noise-free runs, the Cramér–Rao bound and the held-out truth. Compiles the closed loop once."""
    s = setting
    urdf = Path(exp.urdf_path)
    arm_key = (str(urdf.resolve()), hashlib.sha256(urdf.read_bytes()).hexdigest(), repr(exp.arm["options"]))
    nominal = _shared((arm_key, "arm"), exp.load_arm)
    base = _shared((arm_key, "base"), lambda: base_parameters(nominal))
    n = nominal.dof
    added = [jnp.broadcast_to(jnp.asarray(s[k], dtype=float), (n,)) for k in ("true_viscous", "true_coulomb")]
    true_arm = eqx.tree_at(
        lambda a: (a.viscous, a.coulomb), nominal, (nominal.viscous + added[0], nominal.coulomb + added[1])
    )
    names_all = tuple(base.names)
    fc = {f"fc{j + 1}" for j in range(n)}
    columns = tuple(i for i, name in enumerate(names_all) if s["model_coulomb"] or name not in fc)
    standard_names = tuple(nominal.standard_names)
    zero = () if s["model_coulomb"] else tuple(i for i, name in enumerate(standard_names) if name in fc)
    truth_all = np.asarray(base.values(true_arm.standard_parameters()))
    reference = _reference(nominal, s, exp.seed)
    controller = _controller(s, nominal, reference)
    key = jax.random.fold_in(setting_key(exp.seed, s.name), 3)
    phi = np.asarray(true_arm.standard_parameters())
    prior = phi * (1 + s["prior_error"] * np.asarray(jax.random.uniform(key, phi.shape, minval=-1.0, maxval=1.0)))
    plan = BenchmarkPlan(
        setting=s,
        seed=exp.seed,
        nominal=nominal,
        true_arm=true_arm,
        columns=columns,
        names=tuple(names_all[i] for i in columns),
        labels=tuple(base.labels[i] for i in columns),
        truth=truth_all[list(columns)],
        regressor=_shared((arm_key, "columns", columns), lambda: BaseColumns(nominal, base, columns)),
        standard=_shared((arm_key, "standard", zero), lambda: StandardColumns(nominal, zero)),
        base=base,
        reference=reference,
        controller=controller,
        noise=MeasurementNoise(s["angle_std"], s["velocity_std"], s["torque_std"]),
        prior=prior,
        crlb=np.full((len(columns), len(columns)), np.nan),
        validation=(),
        heldout_truth=float("nan"),
        info={},
        width=min(exp.chunk, s.trials),
    )
    ratios = check_limits(reference, nominal)
    plan.info = {
        "limit_ratios": {k: float(v) for k, v in ratios._asdict().items()},
        "parameters": len(columns),
        "labels": dict(zip(plan.names, plan.labels, strict=True)),
    }
    run = _noise_free(plan, reference, controller)
    if run is not None:
        q, qd, qdd, _ = run
        w = np.asarray(jax.jit(plan.regressor)(q, qd, qdd))
        plan.crlb = base_parameter_crlb(w, s["torque_std"])
        a = w.reshape(-1, w.shape[-1])
        a = a / np.where(np.linalg.norm(a, axis=0) > 0, np.linalg.norm(a, axis=0), 1.0)
        sv = np.linalg.svd(a, compute_uv=False)
        plan.info["condition"] = float(sv[0] / sv[-1])
    plan.info["trajectory_diverged"] = run is None
    validation_reference = random_fourier_trajectory(
        nominal, s["harmonics"], s["period"], key=jax.random.key(s["validation_seed"]), margin=s["margin"]
    )
    held = _noise_free(plan, validation_reference, _controller(s, nominal, validation_reference))
    if held is not None:
        plan.validation = tuple(jnp.asarray(x) for x in held)
        plan.heldout_truth = validation_rmse(plan, plan.truth)
        plan.info["validation_torque_rms"] = float(np.sqrt(np.mean(np.asarray(held[3]) ** 2)))
    return plan


def validation_rmse(plan: BenchmarkPlan, theta: np.ndarray) -> float:
    """RMS over samples and joints of the model's torque at ``theta`` minus the true torque on the
    held-out validation run [N m] (``nan`` without one or for a non-finite ``theta``)."""
    if not plan.validation or not np.all(np.isfinite(theta)):
        return float("nan")
    q, qd, qdd, tau = plan.validation
    predicted = np.asarray(plan.regressor.torque(jnp.asarray(theta, dtype=float), q, qd, qdd))
    return float(np.sqrt(np.mean((predicted - np.asarray(tau)) ** 2)))


def setting_estimator(plan: BenchmarkPlan, name: str):
    """The estimator ``name`` with the setting's ``estimator_options``; output error's ``covariance="inputs"`` and the
    Kalman filters' process noise get the setting's ``torque_std`` (the reading's noise, as a data sheet states it)
    unless they give one (or, for a filter, a ``velocity_process_std``) (docs/estimators.md, "Output error's
    covariance": why not the estimate from the log; "The EKF's process noise")."""
    options = plan.setting["estimator_options"].get(name) or {}
    estimator = make_estimator(name, options)
    inputs = getattr(estimator, "covariance", None) == "inputs"  # output error, plain or consistent
    if (inputs or name in KINDS and estimator.velocity_process_std is None) and estimator.torque_std is None:
        estimator = make_estimator(name, {**options, "torque_std": float(plan.setting["torque_std"])})
    return estimator


def _filtered(plan: BenchmarkPlan, run: dict, index: int):
    s = plan.setting
    t, q, tau = (jnp.asarray(run[k][index]) for k in ("t", "q", "tau"))
    log = MeasuredLog(t, q, tau, None, f"{s.name}/trial", s["sample_step"], (), int(run["t"].shape[1]))
    return filter_log(log, s["cutoff_hz"], trim_s=s["trim_s"])


def run_estimators(plan: BenchmarkPlan, run: dict, index: int, trial: int) -> list[dict]:
    """Rows ``{estimator, parameter, truth, estimate, std, status, seconds, cpu_seconds, heldout_rmse}`` of
    one trial (``index`` into the simulated ``run``): wall and process CPU seconds (all threads) of each
    estimator; IDIM-LS's time is its own, the others' exclude it and their start's (``batched._start``'s rule)."""
    s = plan.setting
    limits = s["estimator_trials"]
    names = [e for e in s["estimators"] if trial < limits.get(e, s.trials)]
    out = {}
    if run["status"][index] != Status.SUCCESS:
        out = {e: (None, None, "sim_diverged", 0.0, 0.0) for e in names}
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            logs = [_filtered(plan, run, index)]
            ls = IdimLS()(logs, plan.model)
            ls_status = "ok"
        except (ValueError, np.linalg.LinAlgError) as err:
            ls, ls_status = None, _failure(err)
        ls_seconds, ls_cpu = time.perf_counter() - t0, time.process_time() - c0
        # ``batched._start``'s rule: the estimators that simulate start from the consistent LS where it converged.
        start_of = functools.cache(lambda sim: simulation_start(logs, plan.model, ls) if sim else ls)
        for e in names:
            if e == "idim_ls":
                out[e] = (
                    (ls.value, ls.covariance, "ok", ls_seconds, ls_cpu)
                    if ls is not None
                    else (None, None, ls_status, 0.0, 0.0)
                )
                continue
            if ls is None:
                out[e] = (None, None, "start_" + ls_status, 0.0, 0.0)
                continue
            if e == "didim":  # the chunk's batched route on this trial alone (from the batched consistent LS)
                one = {f: v[index : index + 1] for f, v in run.items()}
                out[e] = didim_chunk(plan, one, batched_fits(plan, one, ("idim_ls", "idim_ls_consistent")), [0])[0]
                continue
            start = start_of(simulates(e))
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                est = setting_estimator(plan, e)(logs, plan.model, start=start)
                value, cov, label = est.value, est.covariance, est.status
            except (ValueError, np.linalg.LinAlgError, FloatingPointError) as err:
                value, cov, label = None, None, _failure(err)
            out[e] = (value, cov, label, time.perf_counter() - t0, time.process_time() - c0)
    return estimate_rows(plan, trial, names, out)


def estimate_rows(plan: BenchmarkPlan, trial: int, names, out: dict) -> list[dict]:
    """The rows of one trial from ``out[estimator] = (value, covariance, status, seconds, cpu_seconds)``
    (``value`` ``None`` for a failure): one row per parameter, a non-finite estimate or std is status
    ``nonfinite``, the held-out RMSE for the ``ok`` ones."""
    s = plan.setting
    rows = []
    for e in names:
        value, cov, status, seconds, cpu = out[e]
        p = len(plan.names)
        if value is None:
            value, std = np.full(p, np.nan), np.full(p, np.nan)
        else:
            value = np.asarray(value, dtype=float)
            std = np.sqrt(np.clip(np.diagonal(np.asarray(cov, dtype=float)), 0, None))
            if status == "ok" and not (np.all(np.isfinite(value)) and np.all(np.isfinite(std))):
                status = "nonfinite"
        heldout = validation_rmse(plan, value) if status == "ok" else float("nan")
        for j, name in enumerate(plan.names):
            rows.append(
                {
                    "setting": s.name,
                    "trial": trial,
                    "estimator": e,
                    "parameter": name,
                    "truth": float(plan.truth[j]),
                    "estimate": float(value[j]),
                    "std": float(std[j]),
                    "status": status,
                    "seconds": seconds,
                    "cpu_seconds": cpu,
                    "heldout_rmse": heldout,
                }
            )
    return rows


def _failure(err: Exception) -> str:
    text = str(err)
    if "rank" in text:
        return "rank_deficient"
    if "diverged" in text:
        return "diverged"
    if "singular" in text:
        return "singular"
    return "failed"
