"""Logs as robots write them: one table of samples from a CSV, parquet, ``.npz`` or ROS bag file.

``read_log_table`` reads a log in the format its robot wrote it and picks the columns the user named
(one per joint for the angles, torques and optional velocities, plus the time stamps); ``jaxid.measure.logs``
checks the values and resamples them (``load_log``, the single entry point). The readers live in
``jaxid.measure.table_logs`` (CSV, parquet, ``.npz``) and ``jaxid.measure.rosbag_logs`` (ROS bags). Formats, by suffix:

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

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .rosbag_logs import _read_bag
from .table_logs import _CSV, _PARQUET, LogTable, _pick_columns, _read_npz, read_table

__all__ = ["read_log_table", "log_format", "check_torque_gain", "LOG_SUFFIXES"]

#: The suffixes of a log file (a ROS 2 bag is a directory: no suffix).
LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq", ".npz", ".bag")
#: Per format: the default time, angle and torque keys (``None`` given for a key).
_DEFAULTS = {
    "csv": ("time", "pos_meas", "tau_meas"),
    "parquet": ("time", "pos_meas", "tau_meas"),
    "npz": ("times", "positions", "torques"),
    "bag": ("header", "position", "effort"),
}


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
