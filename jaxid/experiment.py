"""Run an experiment end to end: the study's trials, then its tables and figures.

This is the one place that joins the study runner (``jaxid.study``) to the report and the plots
above it; ``jaxid run`` calls it.
"""

from __future__ import annotations

from pathlib import Path

from .config import Experiment
from .report import write_tables
from .study import run_study
from .study.hosts import is_writer
from .types import require_float64

__all__ = ["run_experiment"]


def run_experiment(
    exp: Experiment,
    out: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    figures: bool = True,
) -> Path:
    """Run (or resume) an experiment into ``out``; return the run directory.

    Runs every setting's trials (``jaxid.study.run_study``: chunks on disk, resumable), then
    writes ``trials.parquet``, the summary tables and, with ``figures``, the figures
    (``jaxid report <dir>`` rebuilds the last two from the trials).

    The whole experiment is checked first (``jaxid.study.validate_experiment``, via ``run_study``):
    a bad setting raises ``ConfigError`` (a ``ValueError``) naming its key before ``out`` exists.
    Raises ``RunExists`` if ``out`` holds a finished run, or a run of a different config,
    unless ``overwrite``; ``ValueError`` unless JAX runs in float64 (``jax_enable_x64``).
    """
    require_float64("run_experiment")
    out = run_study(exp, out, overwrite=overwrite, progress=progress)
    if not is_writer():
        return out
    write_tables(out, exp)
    if figures:
        from .plots import make_figures  # matplotlib only when drawing

        make_figures(out)
    return out
