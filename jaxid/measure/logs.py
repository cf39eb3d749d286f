"""Measured logs of a real arm: read (CSV, parquet, npz, ROS bags), check, resample onto a uniform grid.

A robot's log has jittering time stamps (the double pendulum's 500 Hz controller logs steps of
1.6 to 6 ms), several candidate columns for the same quantity (encoder angle vs the driver's
filtered angle; the torque the motor driver reports from its current vs the commanded torque),
and sometimes gaps, duplicated stamps or NaNs. ``load_log`` turns such a file into a
``MeasuredLog``: uniform time grid, SI units, the columns the user picked (one per joint, for any
number of joints ``n``), or a one-line ``ValueError`` that says what is wrong and what to change.
The formats and how columns are named in each (by name or index, arrays, JointState fields) are
``jaxid.measure.log_formats``'s; this module checks the values and resamples them.

**Resampling.** The samples are linearly interpolated (``numpy.interp``, per column) onto the
uniform grid ``t_k = t_start + k·Δ``, ``k = 0 … ⌊(t_end − t_start)/Δ⌋``, where ``Δ`` is the
median of the stamp differences inside the window unless ``sample_step`` is given. Linear
interpolation never overshoots (encoder angles are quantised; a cubic spline would ring on the
steps) and its error, ``Δ²/8 · |q''|``, is ~1e-5 rad here, far below the encoder resolution of
the data shipped with jaxid; the zero-phase filter applied before differentiation
(``jaxid.measure.filters``) removes what is left above its cut-off.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..types import check_samples
from .log_formats import LOG_SUFFIXES, check_torque_gain, read_log_table
from .table_logs import LogTable, read_table

__all__ = ["MeasuredLog", "load_log", "read_table", "check_joint_samples", "ANGLE_COLUMNS", "TORQUE_COLUMNS"]

#: Default column names (the DFKI double-pendulum logs; see data/double-pendulum/README.md).
ANGLE_COLUMNS = ("pos_meas1", "pos_meas2")
TORQUE_COLUMNS = ("tau_meas1", "tau_meas2")

_SUFFIXES = LOG_SUFFIXES


def check_joint_samples(who: str, t, sample_step: float, **arrays) -> None:
    """Check a sampled signal of ``n`` joints: ``t`` of shape ``(N,)``, every array ``(N, n)``.

    ``n`` is the number of columns of ``tau`` (the torque: one column per joint; of ``q`` if there is
    no ``tau``). ``sample_step``, ``t``, finiteness and the uniform step are checked by
    ``jaxid.types.check_samples``; ``None`` arrays are skipped; shapes are checked also under ``jit``,
    values only when concrete. Raises ``ValueError`` naming ``who.<field>`` and what to change.
    """
    from ..types import check_finite

    check_samples(who, t, sample_step)
    count = np.shape(t)[0]
    reference = arrays.get("tau") if arrays.get("tau") is not None else arrays.get("q")
    ref_shape = np.shape(reference)
    n = ref_shape[1] if len(ref_shape) == 2 and ref_shape[1] >= 1 else None
    for name, value in arrays.items():
        if value is None:
            continue
        if n is None or np.shape(value) != (count, n):
            joints = "n" if n is None else n
            raise ValueError(
                f"{who}.{name} must have shape (N, {joints}) = ({count}, {joints}) (one row per time stamp, one "
                f"column per joint), got {np.shape(value)}."
            )
    check_finite(who, **arrays)


class MeasuredLog(eqx.Module):
    """A measured log on a uniform time grid (SI units).

    Attributes:
        t: ``(N,)`` uniform sample times [s], ``t[k] = t[0] + k · sample_step`` (the window's start
            in the file's own time axis; nothing is shifted).
        q: ``(N, n)`` joint angles [rad] (or [m] for a prismatic joint), one column per joint, in the
            arm's convention (the two-link arm: downward vertical, ``q2`` relative to link 1).
        tau: ``(N, n)`` joint torques [N m] (measured or commanded, as chosen at load time); its
            columns set the number of joints ``n``.
        qd: ``(N, n)`` joint velocities [rad/s] read from the log, or ``None`` (not requested).
        source: the file it came from (static).
        sample_step: ``Δ`` [s] (static).
        columns: the file columns used, ``(angle1 … anglen, torque1 … torquen[, vel1 … veln])`` (static).
        raw_samples: the number of rows of the file inside the window (static).
    """

    t: Float[Array, " N"]
    q: Float[Array, "N n"]
    tau: Float[Array, "N n"]
    qd: Float[Array, "N n"] | None
    source: str = eqx.field(static=True)
    sample_step: float = eqx.field(static=True)
    columns: tuple[str, ...] = eqx.field(static=True)
    raw_samples: int = eqx.field(static=True)

    def __check_init__(self) -> None:
        # Shapes always; for concrete values also finiteness and t[k+1] - t[k] = sample_step.
        check_joint_samples("MeasuredLog", self.t, self.sample_step, q=self.q, tau=self.tau, qd=self.qd)

    @property
    def joints(self) -> int:
        """The number of joints ``n`` (columns of ``q`` and ``tau``)."""
        return int(self.tau.shape[1])

    @property
    def samples(self) -> int:
        return int(self.t.shape[0])

    @property
    def duration(self) -> float:
        return float(self.t[-1] - self.t[0])

    @property
    def name(self) -> str:
        """The file name without its suffixes (``trajectory_03`` for ``trajectory_03.csv.gz``)."""
        name = Path(self.source).name
        for suffix in sorted(_SUFFIXES, key=len, reverse=True):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def window(self, start: float, stop: float) -> MeasuredLog:
        """The samples with ``start <= t <= stop`` (same grid, no resampling)."""
        t = np.asarray(self.t)
        keep = (t >= start - 1e-12) & (t <= stop + 1e-12)
        if keep.sum() < 2:
            raise ValueError(
                f"window ({start}, {stop}) s holds fewer than 2 samples of {self.name} "
                f"(t from {t[0]:.4g} to {t[-1]:.4g} s)."
            )
        idx = np.flatnonzero(keep)
        sl = slice(int(idx[0]), int(idx[-1]) + 1)
        return MeasuredLog(
            self.t[sl],
            self.q[sl],
            self.tau[sl],
            None if self.qd is None else self.qd[sl],
            self.source,
            self.sample_step,
            self.columns,
            self.raw_samples,
        )


def _numbers(table: LogTable, name, rows: slice = slice(None), what: str = "column") -> np.ndarray:
    """Column ``name``'s rows ``rows`` as float64; names the first cell that is not a number."""
    path = table.path
    column = table.frame[name].iloc[rows]
    try:
        return np.asarray(column, dtype=float)
    except (TypeError, ValueError):
        pass
    bad = []
    for index, value in enumerate(column.tolist()):
        try:
            float(value)
        except (TypeError, ValueError):
            bad.append(index)
    if not bad:  # every cell converts alone (not seen in practice)
        raise ValueError(f"{path.name}: {what} {name!r} cannot be read as numbers; check its values.")
    first = bad[0] + (rows.start or 0)
    value = str(column.iloc[bad[0]])
    value = value if len(value) <= 40 else value[:37] + "..."
    window = "" if what == "time column" else ", or choose a window without it"  # every time stamp is used
    raise ValueError(
        f"{path.name}: {what} {name!r} has {len(bad)} non-numeric value(s), the first {value!r} at "
        f"{table.row(first)}; fix or drop that row{window}."
    )


def _finite(values: np.ndarray, name, table: LogTable, offset: int = 0) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + offset
        raise ValueError(
            f"{table.path.name}: column {name!r} has {int(bad.sum())} NaN/inf value(s), the first at {table.row(row)}; "
            "clean the log or choose a window without them."
        )


def load_log(
    path: str | Path,
    *,
    angles: str | Sequence[str | int] | None = None,
    torques: str | Sequence[str | int] | None = None,
    velocities: str | Sequence[str | int] | None = None,
    time: str | int | None = None,
    window: tuple[float | None, float | None] | None = None,
    sample_step: float | None = None,
    joints: int | None = None,
    header: bool | None = None,
    torque_gain: float | Sequence[float] = 1.0,
    topic: str | None = None,
    joint_names: Sequence[str] | None = None,
) -> MeasuredLog:
    """Read a measured log and resample it onto a uniform time grid.

    Args:
        path: a log as the robot wrote it, one row (message) per sample: ``.csv``, ``.csv.gz``,
            ``.parquet``, a numpy ``.npz`` archive, a ROS 1 ``.bag`` or a ROS 2 bag directory (the
            formats, their keys and defaults: ``jaxid.measure.log_formats``).
        angles: the ``n`` joint-angle columns [rad]: names, 0-based indices, or a prefix
            (``"pos_meas"`` → ``pos_meas1 … pos_measn``, the default for a CSV or parquet file); in an
            ``.npz`` archive an ``(N, n)`` array's name (default ``"positions"``) or ``n`` names of
            ``(N,)`` arrays; in a bag the JointState field ``"position"``.
        torques: the ``n`` torque columns, as ``angles`` (default ``"tau_meas"``, ``"torques"`` in an
            archive, ``"effort"`` in a bag): the measured or the commanded torque [N m] (the user's
            choice), or a motor current [A] scaled by ``torque_gain``.
        velocities: optional ``n`` velocity columns [rad/s], as ``angles`` (``"velocity"`` in a bag),
            carried as ``qd``; ``None`` (default): not read.
        time: the time-stamp column [s] (name or index; default ``"time"``, ``"times"`` in an archive,
            ``"header"`` stamps or ``"receive"`` times in a bag); must be strictly increasing.
        window: ``(start, stop)`` [s] in the file's time axis (``None`` for either end: the
            file's first/last stamp). Must lie inside the data.
        sample_step: the uniform step ``Δ`` [s]; default the median stamp difference in the window.
        joints: the number of joints ``n``; default the length of the first list among ``angles``,
            ``torques``, ``velocities``, else the columns of an archive's angle array or a bag's
            joints, else 2 (the two-link default columns). A list of another length is an error.
        header: CSV only: whether the first line names the columns; default the header rule (a
            first line of numbers only is data: give the columns by index).
        torque_gain: [N m per unit of the torque column, e.g. N m/A] a number or ``n`` numbers, one
            per joint, multiplying the torque columns; negative flips a joint's sign. Default 1.
        topic: bag only: the ``sensor_msgs/msg/JointState`` topic; default the bag's only one.
        joint_names: bag only: the ``n`` joints to pick from each message, by name, in the arm's
            order; default the first message's joints in its order.

    Returns:
        A ``MeasuredLog`` (float64 if JAX's x64 mode is on, as the CLI and tests set it).

    Raises:
        ValueError: (one line each, naming the file) missing file, column, array, topic or joint
        (lists what there is, suggests a close match), unknown format, a CSV without header line
        whose columns are given by name (says to give indices), an empty file or one with no rows, a
        truncated or corrupt gzip/parquet/npz/bag file, an array of the wrong shape, time not
        strictly increasing, a non-numeric or NaN/inf cell in a used column (these three name the
        row: counted from 0 among the data rows, and the line of a CSV; a bag's message), a window
        outside the data or with fewer than 3 samples, a non-positive step, a list of columns whose
        length is not the number of joints, a torque gain that is not finite and non-zero.
        ``TypeError`` for an unknown keyword (Python's own message).

    The resampling method (linear interpolation at the median step) is described in the
    module docstring. This is a host function (pandas/numpy); the result is a pytree.
    """
    path = Path(path)
    check_torque_gain(torque_gain, None)  # before reading the file; its length once the joints are known
    table = read_log_table(
        path,
        time=time,
        angles=angles,
        torques=torques,
        velocities=velocities,
        joints=joints,
        header=header,
        topic=topic,
        joint_names=joint_names,
    )
    gain = check_torque_gain(torque_gain, table.joints)
    time = table.time
    stamps = _numbers(table, time, what="time column")
    _finite(stamps, time, table)
    if stamps.size < 3:
        raise ValueError(f"{path.name}: only {stamps.size} rows; a log needs at least 3 samples.")
    steps = np.diff(stamps)
    if np.any(steps <= 0):
        row = int(np.flatnonzero(steps <= 0)[0]) + 1
        kind = "repeats" if steps[row - 1] == 0 else "goes backwards"
        raise ValueError(
            f"{path.name}: time column {time!r} {kind} at {table.row(row)}: "
            f"t = {stamps[row]:.6g} s after {stamps[row - 1]:.6g} s; time stamps must be strictly "
            "increasing: sort the log and drop duplicated rows."
        )

    first, last = float(stamps[0]), float(stamps[-1])
    start, stop = (None, None) if window is None else tuple(window)
    start = first if start is None else float(start)
    stop = last if stop is None else float(stop)
    tol = 1e-9 * max(1.0, abs(last))
    if not start < stop:
        raise ValueError(f"{path.name}: window ({start}, {stop}) s is empty; give start < stop.")
    if start < first - tol or stop > last + tol:
        raise ValueError(
            f"{path.name}: window ({start}, {stop}) s lies outside the data, which spans "
            f"{first:.6g} to {last:.6g} s; choose a window inside it."
        )
    start, stop = max(start, first), min(stop, last)
    inside = (stamps >= start) & (stamps <= stop)
    if inside.sum() < 3:
        raise ValueError(f"{path.name}: window ({start}, {stop}) s holds {int(inside.sum())} samples; widen it.")
    # The stamps just outside the window take part in the interpolation at its ends.
    lo = max(int(np.flatnonzero(inside)[0]) - 1, 0)
    hi = min(int(np.flatnonzero(inside)[-1]) + 2, stamps.size)
    if sample_step is None:
        step = float(np.median(np.diff(stamps[inside])))
    else:
        step = float(sample_step)
        if not np.isfinite(step) or step <= 0:
            raise ValueError(f"sample_step must be a positive number of seconds, got {sample_step!r}.")
    count = int(np.floor((stop - start) / step * (1 + 1e-12))) + 1
    if count < 3:
        raise ValueError(f"{path.name}: window ({start}, {stop}) s holds fewer than 3 steps of {step} s.")
    grid = start + step * np.arange(count)

    def resample(names):
        out = []
        for name in names:
            values = _numbers(table, name, slice(lo, hi))
            _finite(values, name, table, offset=lo)
            out.append(np.interp(grid, stamps[lo:hi], values))
        return np.stack(out, -1)

    q = resample(table.angles)
    tau = resample(table.torques) * gain
    qd = None if table.velocities is None else jnp.asarray(resample(table.velocities))
    return MeasuredLog(
        jnp.asarray(grid), jnp.asarray(q), jnp.asarray(tau), qd, str(path), step, table.columns, int(inside.sum())
    )
