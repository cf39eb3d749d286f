"""Measured logs of a real arm: read CSV / CSV.gz / parquet, check, resample onto a uniform grid.

A robot's log has jittering time stamps (the double pendulum's 500 Hz controller logs steps of
1.6 to 6 ms), several candidate columns for the same quantity (encoder angle vs the driver's
filtered angle; the torque the motor driver reports from its current vs the commanded torque),
and sometimes gaps, duplicated stamps or NaNs. ``load_log`` turns such a file into a
``MeasuredLog``: uniform time grid, SI units, the columns the user picked (one per joint, for any
number of joints ``n``), or a one-line ``ValueError`` that says what is wrong and what to change.

**Resampling.** The samples are linearly interpolated (``numpy.interp``, per column) onto the
uniform grid ``t_k = t_start + k·Δ``, ``k = 0 … ⌊(t_end − t_start)/Δ⌋``, where ``Δ`` is the
median of the stamp differences inside the window unless ``sample_step`` is given. Linear
interpolation never overshoots (encoder angles are quantised; a cubic spline would ring on the
steps) and its error, ``Δ²/8 · |q''|``, is ~1e-5 rad here, far below the encoder resolution of
the data shipped with jaxid; the zero-phase filter applied before differentiation
(``jaxid.filters``) removes what is left above its cut-off.
"""

from __future__ import annotations

import lzma
import re
import zlib
from collections.abc import Sequence
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .types import check_samples, did_you_mean

__all__ = ["MeasuredLog", "load_log", "read_table", "check_joint_samples", "ANGLE_COLUMNS", "TORQUE_COLUMNS"]

#: Default column names (the DFKI double-pendulum logs; see data/double-pendulum/README.md).
ANGLE_COLUMNS = ("pos_meas1", "pos_meas2")
TORQUE_COLUMNS = ("tau_meas1", "tau_meas2")

_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


def check_joint_samples(who: str, t, sample_step: float, **arrays) -> None:
    """Check a sampled signal of ``n`` joints: ``t`` of shape ``(N,)``, every array ``(N, n)``.

    ``n`` is the number of columns of ``tau`` (the torque: one column per joint; of ``q`` if there is
    no ``tau``). ``sample_step``, ``t``, finiteness and the uniform step are checked by
    ``jaxid.types.check_samples``; ``None`` arrays are skipped; shapes are checked also under ``jit``,
    values only when concrete. Raises ``ValueError`` naming ``who.<field>`` and what to change.
    """
    from .types import check_finite

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


def read_table(path: str | Path):
    """Read a CSV, gzipped CSV or parquet file into a pandas DataFrame (format from the suffix).

    Raises ``ValueError`` (one line, naming the file) for a missing file, an unknown suffix, an
    empty file, a file with a header but no rows, and a file that cannot be read: a truncated or
    corrupt gzip/bz2/xz or parquet file, or a CSV that is not comma-separated text.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ValueError(f"log file {str(path)!r} does not exist.")
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        kind = "parquet"
    elif name.endswith((".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".txt")):
        kind = "csv"
    else:
        raise ValueError(f"log file {str(path)!r}: unknown format; use .csv, .csv.gz or .parquet.")
    if path.is_dir():
        raise ValueError(f"{path.name}: is a directory, not a log file; give the file inside it.")
    if path.stat().st_size == 0:
        raise ValueError(f"{path.name}: the file is empty (0 bytes), it holds no samples; copy the log again.")
    try:
        frame = pd.read_parquet(path) if kind == "parquet" else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{path.name}: the file holds no header and no samples; give a log with a header line and one row per sample."
        ) from None
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as error:
        raise _unreadable(path, kind, error) from None
    if len(frame) == 0:
        raise ValueError(
            f"{path.name}: the file has a header ({len(frame.columns)} columns) but no rows, it holds no samples; "
            "give a log with one row per sample."
        )
    return frame


def _reason(error: BaseException) -> str:
    """A short one-line reason from a reader's exception."""
    text = " ".join(str(error).split()) or type(error).__name__
    text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", text)
    return text.rstrip(".") if len(text) <= 100 else text[:97] + "..."


def _unreadable(path: Path, kind: str, error: BaseException) -> ValueError:
    if isinstance(error, PermissionError):
        return ValueError(f"{path.name}: cannot be read (permission denied); check the file's permissions.")
    compression = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}.get(path.suffix.lower())
    if compression is not None and isinstance(error, (OSError, EOFError, zlib.error, lzma.LZMAError)):
        # gzip.BadGzipFile (an OSError), EOFError (cut short), zlib.error (bad block), bz2's OSError, lzma's error.
        return ValueError(
            f"{path.name}: not a readable {compression} file (truncated or corrupt: {_reason(error)}); "
            "copy the log again."
        )
    if kind == "parquet":
        return ValueError(
            f"{path.name}: not a readable parquet file (truncated or corrupt: {_reason(error)}); "
            "copy the log again or export it again."
        )
    # UnicodeDecodeError (binary content), pandas' ParserError (ragged rows; also what a corrupt block in
    # the middle of a gzip file usually gives, since pandas parses the garbage before the checksum at the end).
    damaged = f"the {compression} file may be corrupt or " if compression else ""
    return ValueError(
        f"{path.name}: not a readable CSV file ({_reason(error)}); {damaged}a log must be comma-separated text "
        "with one header line and one row per sample: copy the log again or export it again."
    )


def _joint_count(joints: int | None, *specs) -> int:
    """``joints`` if given, else the length of the first list of column names, else 2."""
    if joints is not None:
        if isinstance(joints, bool) or not isinstance(joints, int) or joints < 1:
            raise ValueError(f"joints must be a positive integer (the number of joints), got {joints!r}.")
        return joints
    for spec in specs:
        if spec is not None and not isinstance(spec, str):
            return len(tuple(spec))
    return 2


def _columns(spec: str | Sequence[str], what: str, n: int = 2) -> tuple[str, ...]:
    if isinstance(spec, str):
        # A prefix: "tau_con" -> ("tau_con1", "tau_con2", …, "tau_con<n>").
        return tuple(f"{spec}{j}" for j in range(1, n + 1))
    spec = tuple(spec)
    if len(spec) != n or not all(isinstance(s, str) for s in spec):
        count, joints = ("two", "(joint 1, joint 2)") if n == 2 else (str(n), f"(joint 1 … joint {n})")
        raise ValueError(f"{what} must be {count} column names {joints} or a prefix string, got {spec!r}.")
    return spec


def _require_column(frame, name: str, what: str, path: Path) -> None:
    if name in frame.columns:
        return
    existing = [str(c) for c in frame.columns]
    raise ValueError(f"{path.name}: no {what} column {name!r}; the file has {existing}.{did_you_mean(name, existing)}")


def _row(index: int, path: Path) -> str:
    """How messages name a row: its position among the data rows, counted from 0 (pandas' index),
    and for a CSV also its line in the (decompressed) text, the header being line 1."""
    if path.name.lower().endswith((".parquet", ".pq")):
        return f"row {index} (data rows counted from 0)"
    return f"row {index} (data rows counted from 0; line {index + 2} of the CSV)"


def _numbers(frame, name: str, path: Path, rows: slice = slice(None), what: str = "column") -> np.ndarray:
    """Column ``name``'s rows ``rows`` as float64; names the first cell that is not a number."""
    column = frame[name].iloc[rows]
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
        f"{_row(first, path)}; fix or drop that row{window}."
    )


def _finite(values: np.ndarray, name: str, path: Path, offset: int = 0) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + offset
        raise ValueError(
            f"{path.name}: column {name!r} has {int(bad.sum())} NaN/inf value(s), the first at {_row(row, path)}; "
            "clean the log or choose a window without them."
        )


def load_log(
    path: str | Path,
    *,
    angles: str | Sequence[str] = ANGLE_COLUMNS,
    torques: str | Sequence[str] = TORQUE_COLUMNS,
    velocities: str | Sequence[str] | None = None,
    time: str = "time",
    window: tuple[float | None, float | None] | None = None,
    sample_step: float | None = None,
    joints: int | None = None,
) -> MeasuredLog:
    """Read a measured log and resample it onto a uniform time grid.

    Args:
        path: ``.csv``, ``.csv.gz`` or ``.parquet`` file with one row per sample.
        angles: the ``n`` joint-angle columns [rad], or a prefix (``"pos_meas"`` → ``pos_meas1 …
            pos_measn``).
        torques: the ``n`` torque columns [N m] (measured ``"tau_meas"``, the default, or commanded
            ``"tau_con"``: the user's choice), or a prefix.
        velocities: optional ``n`` velocity columns [rad/s] (or a prefix), carried as ``qd``.
        time: the time-stamp column [s]; must be strictly increasing.
        window: ``(start, stop)`` [s] in the file's time axis (``None`` for either end: the
            file's first/last stamp). Must lie inside the data.
        sample_step: the uniform step ``Δ`` [s]; default the median stamp difference in the window.
        joints: the number of joints ``n``; default the length of the first list of names among
            ``angles``, ``torques``, ``velocities``, else 2 (the two-link default columns). A list of
            another length is an error.

    Returns:
        A ``MeasuredLog`` (float64 if JAX's x64 mode is on, as the CLI and tests set it).

    Raises:
        ValueError: (one line each, naming the file) missing file or column (lists the columns,
        suggests a close match), unknown format, an empty file or one with no rows, a truncated or
        corrupt gzip/parquet file, time not strictly increasing, a non-numeric or NaN/inf cell in
        a used column (these three name the row: counted from 0 among the data rows, and the line
        of a CSV), a window outside the data or with fewer than 3 samples, a non-positive step, a
        list of column names whose length is not the number of joints.
        ``TypeError`` for an unknown keyword (Python's own message).

    The resampling method (linear interpolation at the median step) is described in the
    module docstring. This is a host function (pandas/numpy); the result is a pytree.
    """
    path = Path(path)
    frame = read_table(path)
    n = _joint_count(joints, angles, torques, velocities)
    angle_cols = _columns(angles, "angles", n)
    torque_cols = _columns(torques, "torques", n)
    vel_cols = None if velocities is None else _columns(velocities, "velocities", n)
    _require_column(frame, time, "time", path)
    for name in angle_cols:
        _require_column(frame, name, "angle", path)
    for name in torque_cols:
        _require_column(frame, name, "torque", path)
    for name in vel_cols or ():
        _require_column(frame, name, "velocity", path)

    stamps = _numbers(frame, time, path, what="time column")
    _finite(stamps, time, path)
    if stamps.size < 3:
        raise ValueError(f"{path.name}: only {stamps.size} rows; a log needs at least 3 samples.")
    steps = np.diff(stamps)
    if np.any(steps <= 0):
        row = int(np.flatnonzero(steps <= 0)[0]) + 1
        kind = "repeats" if steps[row - 1] == 0 else "goes backwards"
        raise ValueError(
            f"{path.name}: time column {time!r} {kind} at {_row(row, path)}: "
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
            values = _numbers(frame, name, path, slice(lo, hi))
            _finite(values, name, path, offset=lo)
            out.append(np.interp(grid, stamps[lo:hi], values))
        return np.stack(out, -1)

    q = resample(angle_cols)
    tau = resample(torque_cols)
    qd = None if vel_cols is None else jnp.asarray(resample(vel_cols))
    columns = angle_cols + torque_cols + (vel_cols or ())
    return MeasuredLog(
        jnp.asarray(grid), jnp.asarray(q), jnp.asarray(tau), qd, str(path), step, columns, int(inside.sum())
    )
