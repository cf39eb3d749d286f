"""Simulated logs of an N-joint arm, shaped like a real robot's: the test bench of ``jaxid fit``.

``simulated_logs`` writes what a user of a real arm has: several closed-loop runs of different
lengths, each a CSV with a ``time`` column, ``pos_meas1 … pos_measn`` [rad], ``vel_meas1 … vel_measn``
[rad/s] and ``tau_meas1 … tau_measn`` [N m]; time stamps jittered around the logging rate; angle,
velocity and torque noise; viscous and Coulomb friction, rotor inertia and torque offsets in the
true arm; a nominal URDF whose inertial parameters are off by a stated amount; and the true URDF.

**What is simulated.** The true arm (the URDF's links, plus ``viscous``, ``coulomb``, ``armature``,
``offset``) tracks a random Fourier reference (``jaxid.excitation.fourier.random_fourier_trajectory``: ``harmonics``
harmonics of ``1/period`` Hz, within ``margin`` of the joint limits, one seed per run) with a PD
controller tuned on the *nominal* arm, its feed-forward the nominal inverse dynamics
(``jaxid.simulation.closed_loop.PDController.tuned``, 10 Hz); control and simulation at ``1/control_rate``
(zero-order hold), noise through the measured signals (so it enters the loop, as on a robot).

**Logging.** The logger writes one row about every ``1 / log_rate`` s: row ``k`` is the simulation
sample nearest to ``k / log_rate + u_k``, ``u_k`` uniform within ``± jitter`` of the logging step;
the stamps are the exact times of those samples (irregular, strictly increasing).

**The nominal arm** has every link's mass and inertia tensor (about the centre of mass) scaled by
its own factor ``1 + nominal_error · u``, ``u`` uniform in ``[−1, 1]``, and no friction, armature or
offset: what a user's URDF from CAD typically is.

Host-side (numpy, files); the closed loop is one compiled program per run length.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["simulated_logs", "write_urdf_variant"]


def write_urdf_variant(
    source: str | Path,
    target: str | Path,
    *,
    inertial_scale: Sequence[float] | None = None,
    viscous: Sequence[float] | None = None,
    coulomb: Sequence[float] | None = None,
) -> Path:
    """Copy a URDF, scaling the ``<mass>`` and ``<inertia>`` of each link that has an ``<inertial>`` (in
    file order) by ``inertial_scale`` and writing ``<dynamics damping friction>`` on the moving joints
    (in file order) from ``viscous`` / ``coulomb``. The centres of mass are kept."""
    tree = ET.parse(source)
    root = tree.getroot()
    if inertial_scale is not None:
        links = [link for link in root.iter("link") if link.find("inertial") is not None]
        scales = list(inertial_scale) + [1.0] * max(0, len(links) - len(inertial_scale))
        for link, s in zip(links, scales, strict=False):
            inertial = link.find("inertial")
            mass = inertial.find("mass")
            if mass is not None:
                mass.set("value", repr(float(mass.get("value")) * float(s)))
            inertia = inertial.find("inertia")
            if inertia is not None:
                for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
                    if inertia.get(key) is not None:
                        inertia.set(key, repr(float(inertia.get(key)) * float(s)))
    if viscous is not None or coulomb is not None:
        from ..model.urdf import _MOVING  # the joint types that move

        moving = [j for j in root.iter("joint") if j.get("type") in _MOVING]
        for i, joint in enumerate(moving):
            dyn = joint.find("dynamics")
            if dyn is None:
                dyn = ET.SubElement(joint, "dynamics")
            dyn.set("damping", repr(float(viscous[i]) if viscous is not None else 0.0))
            dyn.set("friction", repr(float(coulomb[i]) if coulomb is not None else 0.0))
    target = Path(target)
    tree.write(target)
    return target


def simulated_logs(
    urdf: str | Path,
    out: str | Path,
    *,
    durations: Sequence[float] = (30.0, 40.0, 25.0),
    names: Sequence[str] | None = None,
    period: float = 10.0,
    harmonics: int = 5,
    margin: float = 0.6,
    viscous: float | Sequence[float] = 0.5,
    coulomb: float | Sequence[float] = 1.0,
    armature: float | Sequence[float] = 0.1,
    offset: float | Sequence[float] = 0.2,
    nominal_error: float = 0.2,
    angle_std: float = 1e-4,
    velocity_std: float = 2e-3,
    torque_std: float = 0.2,
    log_rate: float = 100.0,
    jitter: float = 0.25,
    control_rate: float = 1000.0,
    controller_hz: float = 10.0,
    seed: int = 0,
    fixed_joints: Sequence[str] = (),
) -> dict:
    """Write simulated closed-loop logs of the arm ``urdf`` into ``out`` (module docstring).

    Args:
        urdf: the arm's URDF (its inertial parameters are the truth).
        out: folder for ``<name>.csv`` per run, ``true.urdf`` and ``nominal.urdf``.
        durations: one run per entry [s] (different lengths, as a campaign has).
        names: the runs' file stems (default ``run_01 …``).
        period, harmonics, margin: each run's Fourier reference (``random_fourier_trajectory``).
        viscous, coulomb [N m s/rad, N m], armature [kg m²], offset [N m]: the true joints (scalar or per joint of
            the arm; ``viscous`` and ``coulomb`` also one per moving joint of the URDF, locked ones included).
        nominal_error: relative error of the nominal URDF's link masses and inertias.
        angle_std [rad], velocity_std [rad/s], torque_std [N m]: measurement noise (Gaussian).
        log_rate [Hz], jitter (fraction of a logging step), control_rate [Hz], controller_hz [Hz].
        seed: everything random (references, noise, stamps, the nominal's errors) derives from it.
        fixed_joints: joints locked at 0 (``load_arm``'s option; give the fit's ``[arm]`` the same).

    Returns ``{"runs": [names], "true": Path, "nominal": Path, "armature": [...], "offset": [...],
    "status": [per-run closed-loop status]}``. Raises ``ValueError`` for a run that diverges.
    """
    import jax

    from ..excitation.fourier import random_fourier_trajectory
    from ..model.urdf import _MOVING, load_arm
    from ..simulation.closed_loop import simulate_closed_loop
    from ..simulation.closed_loop_record import MeasurementNoise
    from ..simulation.controllers import PDController
    from ..types import Status

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    arm_joints = load_arm(urdf, fixed_joints=tuple(fixed_joints)).joint_names
    n = len(arm_joints)
    # The URDF's moving joints in file order, locked ones included (``write_urdf_variant`` writes their <dynamics>
    # too); read from the file, not ``load_arm``, which needs ``fixed_joints`` to read a branching URDF.
    moving = [j.get("name") for j in ET.parse(urdf).getroot().iter("joint") if j.get("type") in _MOVING]

    def per_joint(v, count):
        return [float(x) for x in np.broadcast_to(np.asarray(v, dtype=float), (count,))]

    def friction(v, label):
        """A scalar for every moving joint, one value per moving joint of the file, or one per joint of the arm
        (``fixed_joints`` left out; the locked joints then get 0)."""
        v = np.asarray(v, dtype=float)
        if v.ndim == 0 or v.shape == (len(moving),):
            return per_joint(v, len(moving))
        if v.shape == (n,):
            return [float(v[arm_joints.index(name)]) if name in arm_joints else 0.0 for name in moving]
        raise ValueError(
            f"simulated_logs: {label} has {v.size} values; give one, one per joint of the arm ({n}: "
            f"{', '.join(arm_joints)}) or one per moving joint of the URDF ({len(moving)})."
        )

    viscous, coulomb = friction(viscous, "viscous"), friction(coulomb, "coulomb")
    armature, offset = per_joint(armature, n), per_joint(offset, n)
    rng = np.random.default_rng(seed)
    true_path = write_urdf_variant(urdf, out / "true.urdf", viscous=viscous, coulomb=coulomb)
    links = sum(1 for link in ET.parse(urdf).getroot().iter("link") if link.find("inertial") is not None)
    scale = 1.0 + nominal_error * rng.uniform(-1.0, 1.0, links)
    nominal_path = write_urdf_variant(urdf, out / "nominal.urdf", inertial_scale=[float(s) for s in scale])
    true_arm = load_arm(true_path, armature=armature, offset=offset, fixed_joints=tuple(fixed_joints))
    nominal = load_arm(nominal_path, fixed_joints=tuple(fixed_joints))
    names = list(names) if names is not None else [f"run_{i + 1:02d}" for i in range(len(durations))]
    if len(names) != len(durations):
        raise ValueError(f"names ({len(names)}) and durations ({len(durations)}) must have one entry per run.")
    h = 1.0 / control_rate
    noise = MeasurementNoise(angle_std, velocity_std, torque_std)
    statuses = []
    for i, (name, duration) in enumerate(zip(names, durations, strict=True)):
        key = jax.random.fold_in(jax.random.key(seed), i)
        ref = random_fourier_trajectory(nominal, harmonics, period, key=jax.random.fold_in(key, 0), margin=margin)
        controller = PDController.tuned(nominal, ref, frequency=controller_hz)
        samples = int(round(duration / h))
        rec = simulate_closed_loop(
            true_arm,
            ref,
            controller,
            duration=samples * h,
            sample_step=h,
            key=jax.random.fold_in(key, 1),
            noise=noise,
        )
        status = int(rec.status)
        statuses.append(status)
        if status != Status.SUCCESS:
            raise ValueError(f"simulated run {name} diverged (status {status}); lower margin or the noise.")
        step = 1.0 / log_rate
        rows = int(np.floor((samples - 1) * h / step))
        wanted = np.arange(rows) * step + rng.uniform(-jitter, jitter, rows) * step
        index = np.unique(np.clip(np.rint(wanted / h).astype(int), 0, samples - 1))
        t = np.asarray(rec.t)[index]
        columns = {"time": t}
        for label, values in (("pos_meas", rec.q), ("vel_meas", rec.qd), ("tau_meas", rec.tau)):
            values = np.asarray(values)[index]
            for j in range(n):
                columns[f"{label}{j + 1}"] = values[:, j]
        import pandas as pd

        pd.DataFrame(columns).to_csv(out / f"{name}.csv", index=False, float_format="%.9g")
    return {
        "runs": names,
        "true": true_path,
        "nominal": nominal_path,
        "armature": armature,
        "offset": offset,
        "status": statuses,
    }
