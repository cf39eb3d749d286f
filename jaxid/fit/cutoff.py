"""The logs of a fit, which joints each run drives, the excitation frequency and the filter cut-off.

**Driven joints.** A joint is *driven* in a run when its torque moves it. Decided per run and
joint from the raw (resampled) log, by two tests that both must hold:

1. *it moves*: the joint's angle spans at least ``MOVES_RAD`` = 0.05 rad peak-to-peak (a joint
   held still, or one that dithers by a few encoder ticks, does not);
2. *its torque's main line is in the motion*: at the torque's periodogram peak ``f_τ`` (mean
   removed, Hann window, DC excluded) the magnitude-squared coherence between the joint's torque
   and its angle (Welch, quarter-length Hann segments, half overlap, linear detrend) is at least
   ``COHERENCE`` = 0.5. A torque line the arm responds to is coherent with the angle; drive noise
   or a controller tone the joint does not follow is not (unrelated signals score about 1/7
   with seven segments). When a quarter of the run holds fewer than two periods of ``f_τ`` the
   coherence cannot be estimated and test 1 decides alone.

**The excitation frequency** ``f_exc`` (``filter.excitation_hz = "auto"``) is the highest ``f_τ``
over the driven joints of the training runs. No driven joint in any training run is an error that
says to set ``filter.excitation_hz``. The per-run decisions are written to ``excitation.csv``.

**The automatic cut-off** (``cutoff_hz = "auto"``): the candidates are multiples of ``f_exc``
(``candidates = "auto"``: ``AUTO_MULTIPLES`` up to ``min(0.4 / Δ, 2 · validation.band_hz)``, or the
config's list); for each, IDIM-LS is fitted on one half of every training run and predicts the
other halves' torque by inverse dynamics in the fixed evaluation band (``jaxid.fit.selection``);
the lowest pooled RMSE wins. The score needs no free simulation, so it holds for an N-joint arm
that falls over in open loop, and no held-out run enters. Why a search and not "ten times the
excitation": a real arm's torque and angles carry lines the rigid model does not explain
(structure, drives), and the LS estimate attenuates as the cut-off lets more noise into ``q''``
(errors in variables), while too low a cut-off discards the motion's own harmonics (a multi-harmonic
trajectory's dominant torque line is often its lowest). Whatever the cut-off (chosen or given), the
runner refuses a fit that does not reproduce its own training torque
(``jaxid.fit.checks.check_training_error``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..config.fit import FitConfig
from ..config.fit_checks import config_error
from .model import FitModel

__all__ = ["load_logs", "filter_all", "choose_cutoff", "drive_table", "excitation_frequency", "MOVES_RAD", "COHERENCE"]

#: A joint "moves" in a run when its angle spans at least this much peak-to-peak [rad].
MOVES_RAD = 0.05
#: Minimum torque-angle coherence at the torque's main line for a joint to count as driven.
COHERENCE = 0.5


#: How ``filter.cutoff_hz = "auto"`` picks the cut-off (``jaxid.fit.cutoff``).
CUTOFF_RULE = (
    "the candidate (multiples of the excitation frequency) with the lowest left-out torque RMSE (halves of every training run) of "
    "IDIM-LS on the training runs (evaluation band, pooled over joints)"
)


def load_logs(config: FitConfig, names: list[str]):
    """``_load_logs`` on one grid: without ``log.sample_step`` each log resamples at its own median stamp
    step; when those differ (stamps of one campaign rarely agree to the microsecond) every log is read
    again at ``common_step`` of them, so that all share one grid."""
    logs = _load_logs(config, names)
    steps = [log.sample_step for log in logs.values()]
    if config.section("log")["sample_step"] is None and len({round(h, 12) for h in steps}) > 1:
        logs = _load_logs(config, names, common_step(steps))
    return logs


def common_step(steps) -> float:
    """One grid step [s] for logs whose median stamp steps are ``steps``: their median, snapped to
    ``1 / round(1 / median)`` (a whole logging rate in Hz) when that is within 1 %."""
    step = float(np.median(steps))
    rate = round(1.0 / step)
    return 1.0 / rate if rate >= 1 and abs(1.0 / rate - step) <= 0.01 * step else step


def _load_logs(config: FitConfig, names: list[str], sample_step: float | None = None):
    """The named logs from ``config.data`` (``[log]`` options); ``ConfigError`` for a missing one, and for
    ``log.angles``/``torques``/``velocities`` lists whose length is not the arm's number of joints (a
    prefix ``"pos_meas"`` names ``pos_meas1 … pos_measn``).

    A log ``name`` is the first of ``name.csv.gz``, ``name.csv``, ``name.parquet``, ``name.pq``,
    ``name.npz``, ``name.bag`` (ROS 1) and a directory ``name/`` holding a ROS 2 bag (``metadata.yaml``)
    that exists; the formats and keys are ``jaxid.measure.log_formats``'s. A bag's joints are picked by name:
    ``log.joints``, else a URDF/MJCF arm's joint names, else the messages' own order. The torque columns
    are multiplied by ``log.torque_gain``. With ``log.angle_unit = "deg"`` the angles (and velocities)
    are converted to radians here.
    """
    from ..measure.log_formats import log_format
    from ..measure.logs import load_log

    opts = config.section("log")
    joints = config.arm.dof
    for key in ("angles", "torques", "velocities"):
        spec = opts[key]
        if spec is None or isinstance(spec, str):
            continue
        if not (
            isinstance(spec, list)
            and len(spec) == joints
            and all(isinstance(c, str | int) and not isinstance(c, bool) for c in spec)
        ):
            raise config_error(
                f"log.{key} must be {joints} column names (one per joint of the arm) or a prefix string "
                f'(e.g. "{"pos_meas" if key == "angles" else "tau_meas" if key == "torques" else "vel_meas"}"), '
                f"or {joints} 0-based column indices, got {spec!r}."
            )
    suffixes = (".csv.gz", ".csv", ".parquet", ".pq", ".npz", ".bag")
    found = {}
    for name in names:
        candidates = [config.data / f"{name}{s}" for s in suffixes] + [config.data / name]
        path = next((c for c in candidates if c.is_file() or (c.is_dir() and (c / "metadata.yaml").is_file())), None)
        if path is None:
            raise config_error(
                f"log {name!r} not found in {config.data} (tried {', '.join(suffixes)} and a ROS 2 bag directory "
                f"{name}/); check split.train/test or pass --data DIR."
            )
        bag = log_format(path) == "bag"
        joint_names = opts["joints"]
        if bag and joint_names is None:
            joint_names = getattr(config.arm, "joint_names", None)  # a URDF/MJCF arm's moving joints
        if not bag and (opts["topic"] is not None or opts["joints"] is not None):
            which = "log.topic" if opts["topic"] is not None else "log.joints"
            raise config_error(f"{which} applies to ROS bags; log {path.name} is not one: leave {which} out.")
        window = opts["window"]
        log = load_log(
            path,
            angles=opts["angles"],
            torques=opts["torques"],
            velocities=opts["velocities"],
            time=opts["time"],
            window=None if window is None else tuple(window),
            sample_step=opts["sample_step"] if sample_step is None else sample_step,
            joints=joints,
            header=opts["header"],
            torque_gain=opts["torque_gain"],
            topic=opts["topic"] if bag else None,
            joint_names=list(joint_names) if bag and joint_names is not None else None,
        )
        if opts["angle_unit"] == "deg":
            import equinox as eqx

            scale = math.pi / 180.0
            log = eqx.tree_at(lambda g: g.q, log, log.q * scale)
            if log.qd is not None:
                log = eqx.tree_at(lambda g: g.qd, log, log.qd * scale)
        found[name] = log
    return found


def filter_all(logs, cutoff, flt):
    """Every log filtered at ``cutoff`` [Hz] with the ``[filter]`` options ``flt``."""
    from ..estimate.logs.data import filter_log

    return {
        n: filter_log(
            log, cutoff, method=flt["method"], order=flt["order"], trim_s=flt["trim_s"], velocities=flt["velocities"]
        )
        for n, log in logs.items()
    }


def _coherence_at(tau: np.ndarray, q: np.ndarray, step: float, freq: float) -> float:
    """Magnitude-squared torque-angle coherence at ``freq`` (module docstring), or NaN if unresolved."""
    from scipy import signal

    n = tau.shape[0]
    nperseg = n // 4
    if nperseg < 16 or freq * nperseg * step < 2.0:
        return math.nan
    f, coh = signal.coherence(tau, q, fs=1.0 / step, window="hann", nperseg=nperseg, detrend="linear")
    k = int(np.argmin(np.abs(f - freq)))
    return float(np.max(coh[max(k - 1, 0) : k + 2]))


def drive_table(logs) -> list[dict[str, Any]]:
    """Per run and joint: angle span, torque peak, coherence and the driven decision (module docstring)."""
    from ..measure.filters import dominant_frequency

    rows = []
    for run, log in logs.items():
        q, tau, h = np.asarray(log.q), np.asarray(log.tau), log.sample_step
        for j in range(q.shape[1]):
            span = float(np.ptp(q[:, j]))
            peak = dominant_frequency(tau[:, j], h) if np.ptp(tau[:, j]) > 0 else math.nan
            coherence = _coherence_at(tau[:, j], q[:, j], h, peak) if math.isfinite(peak) else 0.0
            moves = span >= MOVES_RAD
            follows = coherence >= COHERENCE if math.isfinite(coherence) else True
            rows.append(
                {
                    "run": run,
                    "joint": j + 1,
                    "angle_span_rad": span,
                    "torque_peak_hz": peak,
                    "coherence": coherence,
                    "moves": moves,
                    "driven": bool(moves and follows and math.isfinite(peak)),
                }
            )
    return rows


def excitation_frequency(train_logs) -> tuple[float, list[dict[str, Any]]]:
    """``f_exc`` [Hz]: the highest torque peak over the driven joints of the training runs, and the
    per-run table; ``ConfigError`` when no training run drives any joint."""
    rows = drive_table(train_logs)
    driven = [r for r in rows if r["driven"]]
    if not driven:
        spans = ", ".join(f"{r['run']} j{r['joint']}: {r['angle_span_rad']:.3g} rad" for r in rows)
        raise config_error(
            f"no training run drives a joint (a joint is driven when it moves ≥ {MOVES_RAD} rad and its torque's "
            f"main line is coherent with its angle; spans {spans}); set filter.excitation_hz [Hz] or train on "
            "runs that move the arm."
        )
    return max(r["torque_peak_hz"] for r in driven), rows


#: ``filter.candidates = "auto"``: these multiples of the excitation frequency, those below
#: ``min(0.4 / Δ, 2 · validation.band_hz)`` (the classical 5-10 × the motion's bandwidth lies inside;
#: the dominant torque line of a multi-harmonic trajectory is often its lowest harmonic, so the ladder
#: reaches far above it).
AUTO_MULTIPLES = (2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40)


def cutoff_candidates(flt, f_exc: float, sample_step: float, band_hz: float) -> list[tuple[float, float]]:
    """``[(multiple, cut-off [Hz])]`` to try (module docstring), below ``0.45 / Δ``."""
    if flt["candidates"] == "auto":
        top = min(0.4 / sample_step, 2.0 * band_hz)
        pairs = [(float(c), round(c * f_exc, 2)) for c in AUTO_MULTIPLES if c * f_exc <= top]
    else:
        pairs = [(float(c), round(float(c) * f_exc, 2)) for c in flt["candidates"]]
    return [(c, f) for c, f in pairs if 0 < f < 0.45 / sample_step]


def choose_cutoff(
    config: FitConfig, train_logs, model: FitModel
) -> tuple[float, float, list[dict[str, Any]], list[dict[str, Any]]]:
    """The cut-off [Hz] by the rule of the module docstring; returns ``(cutoff, f_exc, table, drive)``."""
    from ..estimate import IdimLS
    from .model import regression_model
    from .selection import cross_validate, training_folds

    flt = config.section("filter")
    band = float(config.section("validation")["band_hz"])
    h = next(iter(train_logs.values())).sample_step
    if flt["excitation_hz"] == "auto":
        f_exc, drive = excitation_frequency(train_logs)
    else:
        f_exc, drive = float(flt["excitation_hz"]), drive_table(train_logs)
    if flt["cutoff_hz"] != "auto":
        return float(flt["cutoff_hz"]), float(f_exc), [], drive
    folds = training_folds(train_logs)
    try:
        evaluated = [list(filter_all(dict(fold), band, flt).values()) for fold in folds]
    except ValueError as err:
        raise config_error(
            f"automatic cut-off: the halves of the training runs are too short for the evaluation filter ({err}); "
            "set filter.cutoff_hz [Hz] or train on longer runs."
        ) from None
    regression = regression_model(model)
    estimator = IdimLS(**config.estimator_options("idim_ls"))

    def fit(logs):
        return np.asarray(model.embed(estimator(logs, regression)).value)

    table = []
    pairs = cutoff_candidates(flt, f_exc, h, band)
    for c, cutoff in pairs:
        try:
            fitted = [list(filter_all(dict(fold), cutoff, flt).values()) for fold in folds]
        except ValueError:  # a fold too short for this filter
            continue
        cv = cross_validate(fitted, evaluated, fit, model, nominal=np.asarray(model.fixed_values))
        table.append(
            {
                "multiple": c,
                "cutoff_hz": cutoff,
                "cv_torque_rmse": cv["score"],
                "nominal_cv_torque_rmse": cv["nominal"],
                "folds": cv["folds"],
            }
        )
    if not table or not np.isfinite(min(r["cv_torque_rmse"] for r in table)):
        raise config_error(
            f"automatic cut-off: no candidate ({[f for _, f in pairs]} Hz, multiples of the excitation "
            f"{f_exc:.3g} Hz below 0.45/Δ = {0.45 / h:.4g} Hz) could be fitted on the training runs left out in "
            "turn; set filter.cutoff_hz or filter.excitation_hz, or train on more (or longer) runs."
        )
    best = min(table, key=lambda r: r["cv_torque_rmse"])
    for r in table:
        r["chosen"] = r is best
    return best["cutoff_hz"], float(f_exc), table, drive
