"""Files of a run directory: atomic writes, the manifest's provenance, and the checks that
protect a finished run.

Layout of ``results/<experiment>/<run>/``: ``config.json`` (the resolved config, seed included),
``manifest.json`` (versions, devices, git revision, compile and run seconds, ``complete``),
``chunks/<setting>/<index>.parquet`` (per-trial rows, one file per finished chunk) and
``chunks/<setting>/extras.json`` (per-setting bounds and coefficient table), then the tables and
figures written from them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd

from .._platform import git_revision
from ..config.common import ConfigError, Experiment
from .hosts import is_writer

__all__ = ["RunExists", "check_run_dir", "write_parquet", "write_text", "prepare_run_dir", "new_manifest"]


class RunExists(RuntimeError):
    """The run directory holds a finished run (or one of another config); pass ``overwrite=True``."""


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` to ``path`` atomically (process 0 only)."""
    if not is_writer():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def write_text(text: str, path: Path) -> None:
    """Write ``text`` to ``path`` atomically (process 0 only)."""
    if not is_writer():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def config_digest(exp: Experiment) -> str:
    """A short hash of the resolved config (a resumed run must match it)."""
    return hashlib.sha256(json.dumps(exp.resolved(), sort_keys=True, default=str).encode()).hexdigest()[:16]


def prepare_run_dir(out: Path, digest: str, overwrite: bool) -> None:
    """Refuse to touch a finished run or a run of another config unless ``overwrite`` (then clear it)."""
    if not (is_writer() and out.exists() and any(out.iterdir())):
        return
    manifest_path = out / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if overwrite:
        shutil.rmtree(out)
    elif old.get("complete"):
        raise RunExists(f"{out} holds a finished run; pass --overwrite to replace it or --out for a new directory.")
    elif old.get("config_digest") not in (None, digest):
        raise RunExists(
            f"{out} holds an unfinished run of a different configuration; pass --overwrite or choose another --out."
        )


def new_manifest(exp: Experiment, digest: str, manifest_path: Path) -> dict:
    """The manifest of a starting run; a resumed run keeps the per-setting records already there."""
    manifest = {
        "experiment": exp.name,
        "config_source": exp.source,
        "config_digest": digest,
        "seed": exp.seed,
        "complete": False,
        "versions": _versions(),
        "devices": [str(d) for d in jax.devices()],
        "device_count": len(jax.devices()),
        "platform": platform.platform(),
        "git_revision": git_revision(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {},
    }
    if is_writer() and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        manifest["settings"] = old.get("settings", {})
        manifest["resumed"] = True
    return manifest


def check_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a ``Path``; ``ConfigError`` if it is not a directory ``jaxid run`` wrote."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise ConfigError(
            f"{run_dir} is not a jaxid run directory (no config.json); give the directory `jaxid run` wrote."
        )
    return run_dir


def _versions() -> dict:
    import diffrax
    import equinox
    import optimistix

    return {
        # The package's version without importing the package's top (imports go downwards only).
        "jaxid": getattr(sys.modules.get("jaxid"), "__version__", None),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "equinox": equinox.__version__,
        "diffrax": diffrax.__version__,
        "optimistix": optimistix.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
    }
