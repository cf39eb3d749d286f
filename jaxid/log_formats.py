"""Logs as robots write them: one table of samples from a CSV, parquet, ``.npz`` or ROS bag file.

``read_log_table`` reads a log in the format its robot wrote it and picks the columns the user named
(one per joint for the angles, torques and optional velocities, plus the time stamps); ``jaxid.logs``
checks the values and resamples them (``load_log``, the single entry point). Formats, by suffix:

- **CSV** (``.csv``, ``.csv.gz``, ``.csv.bz2``, ``.csv.xz``, ``.txt``) and **parquet** (``.parquet``,
  ``.pq``): columns by name (a list, or a prefix ``"pos_meas"`` → ``pos_meas1 … pos_measn``) or by
  0-based position (integers: ``time = 0``, ``angles = [1, 2, 3]``). *Header rule* (CSV): unless
  ``header`` is given, a file has a header line exactly when its first line holds a cell that is not a
  number (Python's ``float``); a file whose first line is all numbers is read as data from its first
  line, and its columns can only be given by index. Defaults: ``time``, ``pos_meas``, ``tau_meas``.
- **numpy archives** (``.npz``, read with ``allow_pickle=False``): the keys name arrays of one row per
  sample. ``time`` names a ``(N,)`` array; ``angles``/``torques``/``velocities`` name one ``(N, n)``
  array (its ``n`` columns, one per joint) or a list of ``n`` arrays of shape ``(N,)``. Defaults:
  ``times``, ``positions``, ``torques`` (the keys of FloBaRoID's logs, e.g. the shipped KUKA LWR4+).
- **ROS bags** (through ``rosbags``, pure Python): a ROS 1 bag (a ``.bag`` file) or a ROS 2 bag (a
  directory holding ``metadata.yaml`` and its ``.db3`` or ``.mcap`` files). The samples are the
  ``sensor_msgs/msg/JointState`` messages of ``topic`` (default: the bag's only JointState topic);
  ``angles``, ``torques`` and ``velocities`` name the message fields (``"position"``, ``"effort"``,
  ``"velocity"``; the velocities are read only when asked for), picked by joint name
  (``joint_names``; default: the first message's joints, in its order). ``time`` is ``"header"`` (the
  default: each message's header stamp, or the bag's receive time if every stamp is zero) or
  ``"receive"`` (the time the bag recorded the message).

Every error is one ``ValueError`` line naming the file, the key and what to change. Host code
(pandas, numpy, rosbags), run once per log before any JAX work.
"""

from __future__ import annotations

import lzma
import math
import re
import zipfile
import zlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .types import did_you_mean

__all__ = ["LogTable", "read_log_table", "read_table", "log_format", "check_torque_gain", "LOG_SUFFIXES"]

#: The suffixes of a log file (a ROS 2 bag is a directory: no suffix).
LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq", ".npz", ".bag")
_CSV = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".txt")
_PARQUET = (".parquet", ".pq")
#: Per format: the default time, angle and torque keys (``None`` given for a key).
_DEFAULTS = {
    "csv": ("time", "pos_meas", "tau_meas"),
    "parquet": ("time", "pos_meas", "tau_meas"),
    "npz": ("times", "positions", "torques"),
    "bag": ("header", "position", "effort"),
}
JOINT_STATE = "sensor_msgs/msg/JointState"
_BAG_FIELDS = {"angles": "position", "torques": "effort", "velocities": "velocity"}


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


def log_format(path: str | Path) -> str:
    """The format of a log from its name: ``"csv"``, ``"parquet"``, ``"npz"``, ``"bag"`` (a ROS 1
    ``.bag`` file or a ROS 2 bag directory holding ``metadata.yaml``); ``ValueError`` otherwise."""
    path = Path(path)
    name = path.name.lower()
    if path.is_dir() and (path / "metadata.yaml").is_file():
        return "bag"
    if name.endswith(_PARQUET):
        return "parquet"
    if name.endswith(_CSV):
        return "csv"
    if name.endswith(".npz"):
        return "npz"
    if name.endswith(".bag"):
        return "bag"
    if path.is_dir():
        raise ValueError(
            f"{path.name}: is a directory but not a ROS 2 bag (no metadata.yaml in it); give a log file or a bag."
        )
    raise ValueError(
        f"log file {str(path)!r}: unknown format; use .csv, .csv.gz, .parquet, .npz, a ROS 1 .bag or a ROS 2 bag directory."
    )


def check_torque_gain(gain, joints: int | None, who: str = "torque_gain") -> np.ndarray:
    """``gain`` [N m per unit of the torque column, e.g. N m/A] (a number or ``joints`` numbers, one per
    joint: torque = gain × column; negative flips the sign) as a ``(joints,)`` array (``joints=None``:
    any length, as given); ``ValueError`` naming ``who`` unless every gain is finite and non-zero."""
    values = list(gain) if isinstance(gain, list | tuple | np.ndarray) else [gain]
    numbers = all(isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) for v in values)
    if not numbers or not values or (joints is not None and len(values) not in (1, joints)):
        count = "n" if joints is None else str(joints)
        raise ValueError(
            f"{who} must be a number or a list of {count} numbers (one per joint, N m per unit of the torque "
            f"column, e.g. N m/A for a current), got {gain!r}."
        )
    if not all(math.isfinite(v) and v != 0 for v in values):
        raise ValueError(
            f"{who} = {gain!r}: every gain must be a finite non-zero number (a negative one flips the sign)."
        )
    array = np.asarray(values, dtype=float)
    return array if joints is None else np.broadcast_to(array, (joints,)).copy()


def read_log_table(
    path: str | Path,
    *,
    time: str | int | None = None,
    angles: str | Sequence[str | int] | None = None,
    torques: str | Sequence[str | int] | None = None,
    velocities: str | Sequence[str | int] | None = None,
    joints: int | None = None,
    header: bool | None = None,
    topic: str | None = None,
    joint_names: Sequence[str] | None = None,
) -> LogTable:
    """Read ``path`` and pick its columns (see the module docstring for the formats and defaults).

    ``joints`` is the number of joints ``n``; default the length of the first list among ``angles``,
    ``torques``, ``velocities``, else the columns of the ``.npz`` angle array or the bag's joints, else 2.
    ``header`` applies to CSV files (``None``: the header rule), ``topic`` and ``joint_names`` to bags.
    Raises ``ValueError`` (one line, naming the file) for an unreadable file, a missing column, array,
    topic or joint (lists what there is and suggests a close match), a wrong shape or number of columns,
    and an option that does not apply to the format.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"log file {str(path)!r} does not exist.")
    kind = log_format(path)
    if joints is not None and (isinstance(joints, bool) or not isinstance(joints, int) or joints < 1):
        raise ValueError(f"joints must be a positive integer (the number of joints), got {joints!r}.")
    if header is not None and not isinstance(header, bool):
        raise ValueError(f"header must be true, false or left out (the header rule), got {header!r}.")
    if header is not None and kind != "csv":
        raise ValueError(f"{path.name}: header applies to CSV files; this is a {kind} log, leave header out.")
    if kind != "bag" and (topic is not None or joint_names is not None):
        which = "topic" if topic is not None else "joints"
        raise ValueError(
            f"{path.name}: {which} applies to ROS bags (JointState messages); this is a {kind} log, leave it out."
        )
    default_time, default_angles, default_torques = _DEFAULTS[kind]
    time = default_time if time is None else time
    angles = default_angles if angles is None else angles
    torques = default_torques if torques is None else torques
    n = joints
    if n is None:
        n = next(
            (len(tuple(s)) for s in (angles, torques, velocities) if s is not None and not isinstance(s, str | int)),
            None,
        )
    if kind == "npz":
        return _read_npz(path, time, angles, torques, velocities, n)
    if kind == "bag":
        return _read_bag(path, time, angles, torques, velocities, n, topic, joint_names)
    frame, header = read_table(path, header=header, with_header=True)
    n = 2 if n is None else n
    pick = lambda spec, what: _pick_columns(frame, spec, what, n, path, header)  # noqa: E731
    time_label = pick([time], "time")[0] if isinstance(time, int | str) else _bad_time(time)
    return LogTable(
        frame,
        path,
        kind,
        time_label,
        pick(angles, "angle"),
        pick(torques, "torque"),
        None if velocities is None else pick(velocities, "velocity"),
        header,
    )


def _bad_time(time) -> None:
    raise ValueError(f"time must be one column: a name or a 0-based index, got {time!r}.")


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


# -- ROS bags -------------------------------------------------------------------------------------


def _read_bag(path: Path, time, angles, torques, velocities, n, topic, joint_names) -> LogTable:
    import pandas as pd

    for key, spec in (("angles", angles), ("torques", torques), ("velocities", velocities)):
        if spec is not None and spec != _BAG_FIELDS[key]:
            raise ValueError(
                f"{path.name}: {key} = {spec!r}, but a ROS bag's JointState message has the fields position, velocity "
                f'and effort: set {key} = "{_BAG_FIELDS[key]}" (or leave it out).'
            )
    if time not in ("header", "receive"):
        raise ValueError(f'{path.name}: time = {time!r}; for a ROS bag use "header" (the stamps) or "receive".')
    if topic is not None and not isinstance(topic, str):
        raise ValueError(f"{path.name}: topic must be a topic name such as '/joint_states', got {topic!r}.")
    if joint_names is not None:
        names = list(joint_names) if isinstance(joint_names, list | tuple) else None
        if not names or not all(isinstance(s, str) for s in names) or len(set(names)) != len(names):
            raise ValueError(
                f"{path.name}: joints (joint_names) must be a list of distinct joint names, got {joint_names!r}."
            )
        if n is not None and len(names) != n:
            raise ValueError(
                f"{path.name}: joints (joint_names) names {len(names)} joints; the arm has {n}, give {n} names."
            )
    topic, messages = _joint_states(path, topic)
    if not messages:
        raise ValueError(f"{path.name}: topic {topic} holds no messages; record the joint states again.")
    present = list(messages[0][2])
    if joint_names is None:
        if n is not None and len(present) != n:
            raise ValueError(
                f"{path.name}: the messages on {topic} carry {len(present)} joints {present}, the arm has {n}: give "
                f"the arm's joints as they are named there, in order, in [log] joints (load_log's joint_names)."
            )
        joint_names = present
    joint_names = list(joint_names)
    fields = [("position", "position"), ("effort", "effort")] + ([("velocity", "velocity")] if velocities else [])
    out = {name: np.empty((len(messages), len(joint_names))) for name, _ in fields}
    stamps, received = np.empty(len(messages)), np.empty(len(messages))
    index, last = None, None
    for k, (stamp, receive, names, values) in enumerate(messages):
        if names != last:
            where = {name: i for i, name in enumerate(names)}
            missing = [j for j in joint_names if j not in where]
            if missing:
                raise ValueError(
                    f"{path.name}: message {k} on {topic} has no joint {missing[0]!r}; its joints are {list(names)}."
                    f"{did_you_mean(missing[0], names)} Set [log] joints (load_log's joint_names) to the arm's joint names as the messages spell them."
                )
            index, last = [where[j] for j in joint_names], names
        for name, field in fields:
            row = values[field]
            if len(row) != len(names):
                raise ValueError(
                    f"{path.name}: message {k} on {topic} has {len(row)} {field} values for {len(names)} joints; "
                    f"a log needs the {field} of every joint (record it, or leave out {_key_of(field)})."
                )
            out[name][k] = row[index]
        stamps[k], received[k] = stamp, receive
    use = received if time == "receive" or not np.any(stamps) else stamps
    frame = {"time": use}
    labels = {}
    for name, _ in fields:
        labels[name] = tuple(f"{name}[{j}]" for j in joint_names)
        frame.update({label: out[name][:, i] for i, label in enumerate(labels[name])})
    return LogTable(
        pd.DataFrame(frame),
        path,
        "bag",
        "time",
        labels["position"],
        labels["effort"],
        labels.get("velocity"),
        topic=topic,
    )


def _key_of(field: str) -> str:
    return {v: k for k, v in _BAG_FIELDS.items()}[field]


def _joint_states(path: Path, topic: str | None):
    """``(topic, [(header stamp [s], receive time [s], names, {field: values}), …])`` of a bag's JointState topic."""
    try:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore
    except ImportError:  # pragma: no cover - a dependency of jaxid
        raise ValueError(f"{path.name}: reading a ROS bag needs the rosbags package: pip install rosbags.") from None
    messages = []
    try:
        with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
            types = {}
            for connection in reader.connections:
                types.setdefault(connection.topic, connection.msgtype)
            states = sorted(t for t, m in types.items() if m == JOINT_STATE)
            if topic is None:
                if len(states) != 1:
                    what = "no JointState topic" if not states else f"{len(states)} JointState topics {states}"
                    raise _Choice(f'{path.name}: the bag has {what}; its topics are {types}: set topic = "...".')
                topic = states[0]
            elif topic not in types:
                raise _Choice(
                    f"{path.name}: no topic {topic!r} in the bag; its JointState topics are {states}."
                    f"{did_you_mean(topic, list(types))}"
                )
            elif types[topic] != JOINT_STATE:
                raise _Choice(
                    f"{path.name}: topic {topic!r} carries {types[topic]}, not {JOINT_STATE}; its JointState topics are {states}."
                )
            chosen = [c for c in reader.connections if c.topic == topic]
            for connection, timestamp, raw in reader.messages(connections=chosen):
                msg = reader.deserialize(raw, connection.msgtype)
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec / 1e9
                receive = timestamp // 10**9 + (timestamp % 10**9) / 1e9
                values = {f: np.asarray(getattr(msg, f), dtype=float) for f in ("position", "velocity", "effort")}
                messages.append((stamp, receive, tuple(msg.name), values))
    except _Choice as error:
        raise ValueError(str(error)) from None
    except Exception as error:  # rosbags' reader errors (no common base class), a corrupt file or database
        raise ValueError(
            f"{path.name}: not a readable ROS bag ({type(error).__name__}: {_reason(error)}); copy the bag again."
        ) from None
    return topic, messages


class _Choice(Exception):
    """A topic that cannot be chosen (raised inside the reader's context, turned into a ValueError)."""
