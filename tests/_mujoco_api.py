"""The MuJoCo calls the model tests make, in one place, and the signatures they rely on.

MuJoCo is a test dependency (``pyproject.toml``: ``mujoco>=3.2,<5``): it is imported plainly, so
a missing MuJoCo fails the suite instead of skipping the comparisons. Only calls whose Python
signature is the same over the whole pinned range are used: ``mj_fullM`` is not (3.x takes
``(m, dst, M)`` with ``M = d.qM``, 4.x takes ``(m, d, dst)``), so the dense inertia matrix is
built from ``mj_mulM(m, d, res, vec)`` (unchanged since 2.x) applied to the unit vectors.
"""

import mujoco
import numpy as np

__all__ = ["mujoco", "dense_inertia", "SIGNATURES"]

#: Leading parameters of each MuJoCo function the tests call (from the binding's docstring).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "mj_forward": ("m", "d"),
    "mj_step": ("m", "d"),
    "mj_mulM": ("m", "d", "res", "vec"),
}


def dense_inertia(model, data) -> np.ndarray:
    """The ``(nv, nv)`` joint-space inertia matrix of the state in ``data`` (after ``mj_forward``)."""
    nv = model.nv
    full = np.zeros((nv, nv))
    column = np.zeros(nv)
    for i in range(nv):
        unit = np.zeros(nv)
        unit[i] = 1.0
        mujoco.mj_mulM(model, data, column, unit)
        full[:, i] = column
    return full
