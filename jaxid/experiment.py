"""Run an experiment end to end: the study's trials, then its tables and figures.

This is the one place that joins the runners (``jaxid.study``, and ``jaxid.benchmark`` for
``[experiment] kind = "benchmark"``) to the report and the plots above them; ``jaxid run`` calls it.
"""

from __future__ import annotations

from pathlib import Path

from .benchmark import Benchmark, is_benchmark, parse_benchmark, run_benchmark
from .config.common import Experiment, read_toml
from .config.study import parse_experiment
from .report.tables import write_tables
from .study import run_study
from .study.hosts import is_writer
from .types import require_float64

__all__ = ["run_experiment", "load_config"]


def load_config(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file of either kind: a ``Benchmark`` when its
    ``[experiment]`` says ``kind = "benchmark"`` (``jaxid.benchmark.parse_benchmark``), else a study
    (``jaxid.config.parse_experiment``). ``ConfigError`` (one line) on any problem."""
    path = Path(path)
    raw = read_toml(path)
    parse = parse_benchmark if is_benchmark(raw) else parse_experiment
    return parse(raw, source=str(path), default_name=path.stem)


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
    if isinstance(exp, Benchmark):
        from .report.benchmark import make_benchmark_figures, write_benchmark_tables

        out = run_benchmark(exp, out, overwrite=overwrite, progress=progress)
        write_benchmark_tables(out)
        if figures:
            make_benchmark_figures(out)
        return out
    out = run_study(exp, out, overwrite=overwrite, progress=progress)
    if not is_writer():
        return out
    write_tables(out, exp)
    if figures:
        from .report.figures import make_figures  # matplotlib only when drawing

        make_figures(out)
    return out
