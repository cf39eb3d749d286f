"""Logs in table files: CSV, parquet and numpy archives read into a ``LogTable``.

``LogTable`` is one table of a log's samples and the columns picked for it, whatever the format
(``jaxid.measure.rosbag_logs`` makes one from a ROS bag); ``jaxid.measure.log_formats.read_log_table`` picks the
reader by format. This module reads the table formats:

- **CSV** (``.csv``, ``.csv.gz``, ``.csv.bz2``, ``.csv.xz``, ``.txt``) and **parquet** (``.parquet``,
  ``.pq``) with ``read_table``; columns by name (a list, or a prefix ``"pos_meas"`` → ``pos_meas1 …
  pos_measn``) or by 0-based position (integers: ``time = 0``, ``angles = [1, 2, 3]``). *Header rule*
  (CSV): unless ``header`` is given, a file has a header line exactly when its first line holds a cell
  that is not a number (Python's ``float``); a file whose first line is all numbers is read as data
  from its first line, and its columns can only be given by index.
- **numpy archives** (``.npz``, read with ``allow_pickle=False``): the keys name arrays of one row per
  sample. ``time`` names a ``(N,)`` array; ``angles``/``torques``/``velocities`` name one ``(N, n)``
  array (its ``n`` columns, one per joint) or a list of ``n`` arrays of shape ``(N,)``.

Every error is one ``ValueError`` line naming the file, the key and what to change. Host code
(pandas, numpy), run once per log before any JAX work.
"""

from __future__ import annotations

import lzma
import re
import zipfile
import zlib
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..types import did_you_mean

__all__ = ["LogTable", "read_table"]

_CSV = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".txt")
_PARQUET = (".parquet", ".pq")


@dataclass(frozen=True)
class LogTable:
    """A log's samples, one row per sample, and the columns picked for it (host data).

    Attributes:
        frame: a pandas DataFrame, one row per sample in the file's order (values not yet checked).
        path: the file (or ROS 2 bag directory).
        kind: ``"csv"``, ``"parquet"``, ``"npz"`` or ``"bag"``.
        time: the label of the time column in ``frame``.
        angles, torques: the labels of the ``n`` angle and torque columns (``n`` joints).
        velocities: the labels of the ``n`` velocity columns, or ``None``.
        header: whether a CSV had a header line (messages count its lines accordingly).
        topic: the bag topic read (``""`` for other formats).
    """

    frame: Any
    path: Path
    kind: str
    time: Hashable
    angles: tuple
    torques: tuple
    velocities: tuple | None
    header: bool = True
    topic: str = ""

    @property
    def joints(self) -> int:
        return len(self.angles)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns used, as ``MeasuredLog.columns`` names them (``"column 3"`` for a CSV without header)."""
        labels = self.angles + self.torques + (self.velocities or ())
        return tuple(label if isinstance(label, str) else f"column {label}" for label in labels)

    def row(self, index: int) -> str:
        """How messages name sample ``index`` (counted from 0), with its line in a CSV file."""
        if self.kind == "csv":
            line = index + (2 if self.header else 1)
            header = "" if self.header else ", no header line"
            return f"row {index} (data rows counted from 0; line {line} of the CSV{header})"
        if self.kind == "bag":
            return f"message {index} on {self.topic} (counted from 0)"
        if self.kind == "npz":
            return f"row {index} of the arrays (counted from 0)"
        return f"row {index} (data rows counted from 0)"


# -- CSV and parquet ------------------------------------------------------------------------------


def read_table(path: str | Path, *, header: bool | None = None, with_header: bool = False):
    """Read a CSV, gzipped CSV or parquet file into a pandas DataFrame (format from the suffix).

    ``header`` (CSV): whether the first line names the columns; ``None`` applies the header rule of the
    module docstring (a file without one gets the labels ``0 … K-1``). Returns the frame, or
    ``(frame, header)`` with ``with_header``. Raises ``ValueError`` (one line, naming the file) for a
    missing file, an unknown suffix, an empty file, a file with a header but no rows, and a file that
    cannot be read: a truncated or corrupt gzip/bz2/xz or parquet file, or a CSV that is not
    comma-separated text.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ValueError(f"log file {str(path)!r} does not exist.")
    name = path.name.lower()
    if name.endswith(_PARQUET):
        kind = "parquet"
    elif name.endswith(_CSV):
        kind = "csv"
    else:
        raise ValueError(f"log file {str(path)!r}: unknown format; use .csv, .csv.gz or .parquet.")
    if path.is_dir():
        raise ValueError(f"{path.name}: is a directory, not a log file; give the file inside it.")
    if path.stat().st_size == 0:
        raise ValueError(f"{path.name}: the file is empty (0 bytes), it holds no samples; copy the log again.")
    try:
        if kind == "parquet":
            frame, header = pd.read_parquet(path), True
        else:
            if header is None:
                first = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
                header = not all(_is_number(cell) for cell in first.iloc[0])
            frame = pd.read_csv(path, header=0 if header else None)
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
    return (frame, header) if with_header else frame


def _is_number(cell) -> bool:
    try:
        float(cell)
    except (TypeError, ValueError):
        return False
    return True


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


def _index_example(n: int) -> str:
    return f"time = 0, angles = {list(range(1, n + 1))}, torques = {list(range(n + 1, 2 * n + 1))}"


def _pick_columns(frame, spec, what: str, n: int, path: Path, header: bool) -> tuple:
    """The frame labels of ``spec``: a prefix, or ``n`` names or 0-based indices (``what``: the quantity)."""
    key = {"angle": "angles", "torque": "torques", "velocity": "velocities"}.get(what, what)
    if isinstance(spec, str) and what != "time":
        spec = [f"{spec}{j}" for j in range(1, n + 1)]  # a prefix: "tau_con" -> tau_con1 … tau_con<n>
    spec = list(spec) if isinstance(spec, list | tuple) else spec
    kinds_ok = isinstance(spec, list) and all(isinstance(s, str | int) and not isinstance(s, bool) for s in spec)
    if not kinds_ok or (what != "time" and len(spec) != n):
        count, joints = ("two", "(joint 1, joint 2)") if n == 2 else (str(n), f"(joint 1 … joint {n})")
        raise ValueError(
            f"{key} must be {count} column names {joints} or a prefix string, or {count} 0-based column indices, "
            f"got {spec!r}."
        )
    columns = list(frame.columns)
    labels = []
    for s in spec:
        if isinstance(s, int):
            if not 0 <= s < len(columns):
                raise ValueError(
                    f"{path.name}: {what} column index {s} is out of range; the file has {len(columns)} columns "
                    f"(indices 0 … {len(columns) - 1})."
                )
            labels.append(columns[s])
            continue
        if not header:
            first = ", ".join(repr(str(v)) for v in frame.iloc[0, :3].tolist())
            raise ValueError(
                f"{path.name}: no header line (its first line is all numbers: {first}, …), so no {what} column is "
                f"named {s!r}; give the columns by 0-based index, e.g. {_index_example(n)} (the file has "
                f"{len(columns)} columns), or set header = true."
            )
        if s not in frame.columns:
            existing = [str(c) for c in frame.columns]
            hint = did_you_mean(s, existing)
            if all(_is_number(re.sub(r"\.\d+$", "", c)) for c in existing):  # pandas writes a repeated name "x.1"
                hint += (
                    " The first line looks like data, not a header: set header = false and give the columns by "
                    f"0-based index, e.g. {_index_example(n)}."
                )
            shown = existing if len(existing) <= 20 else existing[:20] + [f"… {len(existing)} in all"]
            raise ValueError(f"{path.name}: no {what} column {s!r}; the file has {shown}.{hint}")
        labels.append(s)
    return tuple(labels)


# -- numpy archives -------------------------------------------------------------------------------


def _read_npz(path: Path, time, angles, torques, velocities, n: int | None) -> LogTable:
    import pandas as pd

    try:
        with np.load(path, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):
                raise ValueError("a single .npy array, not an archive of named arrays")
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as error:
        raise ValueError(
            f"{path.name}: not a readable .npz archive of named arrays ({_reason(error)}); copy the log again or "
            "save it with numpy.savez(file, times=..., positions=..., torques=...)."
        ) from None
    keys = sorted(arrays)
    for key in ("time", "angles", "torques", "velocities"):
        spec = {"time": time, "angles": angles, "torques": torques, "velocities": velocities}[key]
        if spec is None:
            continue
        names = [spec] if isinstance(spec, str) else list(spec) if isinstance(spec, list | tuple) else [spec]
        if not names or not all(isinstance(s, str) for s in names) or (key == "time" and not isinstance(spec, str)):
            form = "the name of one (N,) array" if key == "time" else "an array name or a list of names"
            raise ValueError(f"{path.name}: {key} must be {form} in the archive {keys}, got {spec!r}.")
        for s in names:
            if s not in arrays:
                raise ValueError(f"{path.name}: no array {s!r} ({key}); the archive has {keys}.{did_you_mean(s, keys)}")
    stamps = arrays[time]
    if stamps.ndim == 2 and stamps.shape[1] == 1:
        stamps = stamps[:, 0]
    if stamps.ndim != 1:
        raise ValueError(f"{path.name}: the time array {time!r} must have shape (N,), got {stamps.shape}.")
    rows = stamps.shape[0]
    if n is None:
        first = arrays[angles] if isinstance(angles, str) else None
        n = first.shape[1] if first is not None and first.ndim == 2 else 1 if first is not None else None
    columns = {time: stamps}

    def pick(spec, key):
        if isinstance(spec, str):
            array = arrays[spec]
            array = array[:, None] if array.ndim == 1 else array
            if array.ndim != 2 or array.shape[0] != rows or array.shape[1] != n:
                raise ValueError(
                    f"{path.name}: {key} array {spec!r} has shape {arrays[spec].shape}; it must be ({rows}, {n}): one "
                    f"row per time stamp of {time!r}, one column per joint of the arm ({n}). Give the right array, "
                    f"or a list of {n} arrays of shape ({rows},)."
                )
            labels = [spec] if arrays[spec].ndim == 1 else [f"{spec}[:, {j}]" for j in range(n)]
            for j, label in enumerate(labels):
                columns[label] = array[:, j]
            return tuple(labels)
        if len(spec) != n:
            raise ValueError(f"{path.name}: {key} names {len(spec)} arrays; the arm has {n} joints, give {n}.")
        for s in spec:
            array = arrays[s]
            if array.shape != (rows,):
                raise ValueError(
                    f"{path.name}: {key} array {s!r} has shape {array.shape}; each array of a list must be ({rows},), "
                    f"one value per time stamp of {time!r}."
                )
            columns[s] = array
        return tuple(spec)

    picked = (
        pick(angles, "angles"),
        pick(torques, "torques"),
        None if velocities is None else pick(velocities, "velocities"),
    )
    return LogTable(pd.DataFrame(columns), path, "npz", time, *picked)
