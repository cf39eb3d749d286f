"""The serial chain a robot description is read into (``UrdfChain``, from URDF or MJCF) and the
parallel-axis theorem that folds a body's inertia into a link's standard parameters."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["UrdfChain", "UrdfWarning"]


class UrdfWarning(UserWarning):
    """A URDF that is read as given but describes something no rigid body or no identification can have
    (an impossible inertia tensor, joints that move no mass)."""


@dataclasses.dataclass(frozen=True)
class UrdfChain:
    """The serial chain read from a URDF (or an MJCF file), in joint order (``n`` moving joints; numpy arrays).

    Attributes:
        name: the robot's name.
        joint_names, link_names: the moving joints and the link each one moves.
        joint_types: ``"revolute"`` (revolute or continuous) or ``"prismatic"``.
        axes: ``(n, 3)`` unit joint axes in the link frame.
        parent_rotations: ``(n, 3, 3)``, parent_translations: ``(n, 3)`` [m]: link ``i``'s frame at
            ``q_i = 0`` in the frame of the previous moving link (or of the root), fixed joints composed.
        inertial: ``(n, 10)`` standard parameters of each moving body (the link plus what is fixed to
            it) about its frame origin: ``[m, m cx, m cy, m cz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]``.
        damping, friction: ``(n,)`` viscous [N m s/rad] and Coulomb [N m] friction.
        position_limits: ``(n, 2)``; velocity_limits, effort_limits: ``(n,)`` (``inf`` when absent).
    """

    name: str
    joint_names: tuple[str, ...]
    link_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    axes: np.ndarray
    parent_rotations: np.ndarray
    parent_translations: np.ndarray
    inertial: np.ndarray
    damping: np.ndarray
    friction: np.ndarray
    position_limits: np.ndarray
    velocity_limits: np.ndarray
    effort_limits: np.ndarray

    @classmethod
    def from_joints(cls, name: str, joints: list[dict], bodies: list) -> UrdfChain:
        """The chain from one dict per moving joint (keys ``name``, ``link``, ``type``, ``axis``, ``rot``,
        ``pos``, ``damping``, ``friction``, ``limits``, ``velocity``, ``effort``) and the ``(10,)``
        standard parameters of each moving body: the one constructor both readers use."""

        def column(key):
            return np.array([e[key] for e in joints])

        return cls(
            name=name,
            joint_names=tuple(e["name"] for e in joints),
            link_names=tuple(e["link"] for e in joints),
            joint_types=tuple(e["type"] for e in joints),
            axes=column("axis"),
            parent_rotations=column("rot"),
            parent_translations=column("pos"),
            inertial=np.array(bodies),
            damping=column("damping"),
            friction=column("friction"),
            position_limits=column("limits"),
            velocity_limits=column("velocity"),
            effort_limits=column("effort"),
        )


def _standard(mass: float, com: np.ndarray, tensor_com: np.ndarray) -> np.ndarray:
    """``[m, m c, Ī]`` about the frame origin from mass, centre of mass and inertia about the centre of
    mass (parallel-axis theorem: ``Ī = I_c + m (|c|² 1 − c cᵀ)``)."""
    i = tensor_com + mass * (com @ com * np.eye(3) - np.outer(com, com))
    return np.array([mass, *(mass * com), i[0, 0], i[0, 1], i[0, 2], i[1, 1], i[1, 2], i[2, 2]])
