"""Test arms shared by several test files (no fixtures: plain constructors)."""

import numpy as np

from jaxid.model.serial import SerialArm


def tilted_prismatic() -> SerialArm:
    """A revolute–prismatic–revolute arm with random tilted frames, armature, viscous and Coulomb friction,
    offsets and a tilted gravity (``default_rng(4)``)."""
    rng = np.random.default_rng(4)
    rotations = np.stack([np.linalg.qr(rng.normal(size=(3, 3)))[0] for _ in range(3)])
    rotations *= np.sign(np.linalg.det(rotations))[:, None, None]
    inertial = np.concatenate([rng.uniform(0.5, 2.0, (3, 1)), rng.normal(0, 0.1, (3, 3)), np.zeros((3, 6))], axis=1)
    inertial[:, [4, 7, 9]] = rng.uniform(0.1, 0.3, (3, 3))
    return SerialArm(
        ("revolute", "prismatic", "revolute"),
        rng.normal(size=(3, 3)),
        rotations,
        rng.normal(0, 0.3, (3, 3)),
        inertial,
        viscous=0.3,
        coulomb=0.2,
        armature=0.05,
        offset=0.1,
        gravity=(0.3, -0.2, -9.8),
    )
