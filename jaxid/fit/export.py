"""What a fit identified, as files a controller or a simulator can load.

``identified/<estimator>.yaml`` (the lab's format) and ``identified/<estimator>.toml`` (jaxid's
``[arm]`` format), both read back by ``jaxid.load_parameters``; ``identified/base_parameters.toml``
holds every estimator's base parameters with their standard deviations (the same numbers as
``parameters.csv``).

Motion identifies only the base parameters (``I1 + l1² m2``, ``m1 r1 + l1 m2``, ``I2``, ``m2 r2``, …),
not the masses. To write a full parameter set the masses ``m1, m2`` (the standard parameters that
are not base columns) are taken from the ``[arm]`` description and the rest solved from the base
values: ``φ_kept = β − K_dep φ_dep``. Any choice of the masses gives exactly the same torques and
motion (the same base parameters); the file says so in its header. An estimate that no physical
arm with those masses realises (e.g. ``m1 r1 + l1 m2 < l1 m2``, a negative first moment) is not
written as a parameter file; the runner warns and names it.

Only a ``TwoLinkArm`` has parameter files. A ``SerialArm`` (``[arm] urdf`` or ``mjcf``) gets
``identified/<estimator>.urdf`` and ``identified/<estimator>.xml`` (MJCF) instead: the physically
consistent standard parameters closest to the ``[arm]``'s with the estimate's base parameters, or the
estimate's consistent projection where no consistent arm has them (the runner warns, kind
``exported_projection``); the rule and the files are ``jaxid.fit.writeback``'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["arm_from_base", "export_parameters", "export_note"]


def arm_from_base(model, beta):
    """The arm with the known geometry and masses of ``model.arm`` whose base parameters are ``beta``.

    Raises ``ValueError`` (from ``with_standard_parameters``) when no such arm exists.
    """
    from ..model import standard_parameters

    k = np.asarray(model.base.matrix)
    kept = list(model.base.independent)
    dep = [j for j in range(k.shape[1]) if j not in kept]
    phi = np.asarray(standard_parameters(model.arm), dtype=float).copy()
    phi[kept] = np.asarray(beta, dtype=float) - k[:, dep] @ phi[dep]
    return model.arm.with_standard_parameters(phi)


def _has_parameter_files(model) -> bool:
    from ..model import TwoLinkArm

    return isinstance(model.arm, TwoLinkArm)


def _has_robot_files(model) -> bool:
    from ..model import SerialArm

    return isinstance(model.arm, SerialArm)


def export_note(model) -> str | None:
    """Why only ``base_parameters.toml`` is written for ``model``'s arm, or ``None`` (a two-link arm's
    parameter files, a ``SerialArm``'s URDF and MJCF)."""
    if _has_parameter_files(model) or _has_robot_files(model):
        return None
    return (
        f"{type(model.arm).__name__}: only identified/base_parameters.toml is written; jaxid has no writer of "
        "a URDF (or another parameter file) for this arm, so no <estimator>.yaml/.toml."
    )


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _robot_source(config) -> tuple[Path | None, tuple[str, ...]]:
    """The URDF an ``[arm] urdf`` table read (``None`` for an MJCF arm or no config) and its ``fixed_joints``."""
    table = {} if config is None else config.raw.get("arm", {})
    if "urdf" not in table:
        return None, ()
    base_dir = config.path.parent if config.path is not None else Path.cwd()
    return base_dir / table["urdf"], tuple(table.get("fixed_joints", ()))


def export_parameters(
    out: Path, fit_name: str, estimates: dict, model, *, config=None, notes: list | None = None
) -> tuple[list[Path], dict[str, str]]:
    """Write the files of the module docstring; return ``(paths, {estimator: why not exported})``.

    ``config``: the ``FitConfig`` (a ``SerialArm``'s URDF is written from its ``[arm] urdf`` file, meshes
    and all; without it, from the arm). ``notes``: a list that gets one row ``{"kind": "exported_projection",
    "model": estimator, "message": ...}`` per estimate written through its consistent projection (the
    runner's warnings).
    """
    from ..model.description import save_parameters

    folder = Path(out) / "identified"
    folder.mkdir(parents=True, exist_ok=True)
    paths, skipped = [], {}
    if _has_robot_files(model):
        from .writeback import export_arm_files

        source, fixed_joints = _robot_source(config)
        written, projected, failed = export_arm_files(
            folder, fit_name, estimates, model, source=source, fixed_joints=fixed_joints
        )
        paths += written
        skipped.update(failed)
        for name, message in projected.items():
            if notes is not None:
                notes.append({"kind": "exported_projection", "model": name, "message": f"{name}: {message}"})
    files = estimates if _has_parameter_files(model) else {}
    if files:
        masses = ", ".join(
            f"{n} = {float(v):.6g} kg" for n, v in zip(("m1", "m2"), np.asarray(model.arm.masses), strict=True)
        )
    for name, est in files.items():
        try:
            arm = arm_from_base(model, est.value)
        except ValueError as err:
            skipped[name] = str(err)
            continue
        notes = (
            f"identified by `jaxid fit` ({fit_name}, estimator {name}). Motion identifies the base parameters only: "
            f"the masses ({masses}) are the [arm] description's, any choice gives the same dynamics."
        )
        for suffix in (".yaml", ".toml"):
            try:
                paths.append(save_parameters(folder / f"{name}{suffix}", arm, notes=notes))
            except ValueError as err:  # e.g. a format with no place for torque offsets
                skipped[f"{name}{suffix}"] = str(err)
    lines = [
        f"# Base parameters identified by `jaxid fit` ({fit_name}): value and formal standard deviation (a lower",
        "# bound: it ignores errors in variables and model error). `fixed` ones were not estimated.",
    ]
    note = export_note(model)
    if note is not None:
        lines.append(f"# {note}")
    lines.append("")
    for name, est in estimates.items():
        for i, (pname, label) in enumerate(zip(model.names, model.labels, strict=True)):
            lines.append(f"[{name}.{pname}]")
            lines.append(f"label = {_toml_string(label)}")
            lines.append(f"value = {float(est.value[i])!r}")
            lines.append(f"std = {float(est.std[i])!r}")
            lines.append(f"fixed = {'false' if i in model.free else 'true'}")
            lines.append("")
    base = folder / "base_parameters.toml"
    base.write_text("\n".join(lines))
    paths.append(base)
    return paths, skipped


#: The tables ``jaxid fit`` writes at the top of its folder (some only for some configs).
FIT_TABLES = (
    "parameters.csv",
    "validation.csv",
    "consistency.csv",
    "lines.csv",
    "excitation.csv",
    "cutoff.csv",
    "default_estimator.csv",
    "summary.csv",
    "warnings.csv",
)


def clear_previous_fit(out: Path) -> list[str]:
    """Remove what an earlier fit wrote in ``out`` before an overwrite writes the new one: the tables
    (``FIT_TABLES``) and the parameter files and figures its ``manifest.json`` lists (the manifest itself
    is rewritten), so that the folder holds this fit's results only (an estimator that is no longer
    exported leaves no stale file). Any other file is kept. Returns the removed paths, relative."""
    import json

    out = Path(out)
    try:
        old = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        old = {}
    listed = [*FIT_TABLES, *old.get("exported", []), *old.get("figures", [])]
    removed = []
    root = out.resolve()
    for name in listed:
        path = out / str(name)
        if path.is_file() and root in path.resolve().parents:
            path.unlink()
            removed.append(str(name))
    return removed
