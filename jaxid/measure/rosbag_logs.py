"""Logs in ROS bags (through ``rosbags``, pure Python), read into a ``LogTable``.

A ROS 1 bag (a ``.bag`` file) or a ROS 2 bag (a directory holding ``metadata.yaml`` and its ``.db3``
or ``.mcap`` files). The samples are the ``sensor_msgs/msg/JointState`` messages of ``topic``
(default: the bag's only JointState topic); ``angles``, ``torques`` and ``velocities`` name the
message fields (``"position"``, ``"effort"``, ``"velocity"``; the velocities are read only when asked
for), picked by joint name (``joint_names``; default: the first message's joints, in its order).
``time`` is ``"header"`` (the default: each message's header stamp, or the bag's receive time if every
stamp is zero) or ``"receive"`` (the time the bag recorded the message).
``jaxid.measure.log_formats.read_log_table`` calls ``_read_bag`` for a log in the ``"bag"`` format.

Every error is one ``ValueError`` line naming the bag, the key and what to change. Host code
(pandas, numpy, rosbags), run once per log before any JAX work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..types import did_you_mean
from .table_logs import LogTable, _reason

__all__ = ["JOINT_STATE"]

JOINT_STATE = "sensor_msgs/msg/JointState"
_BAG_FIELDS = {"angles": "position", "torques": "effort", "velocities": "velocity"}


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
