"""Command-line interface (thin: it calls the library API).

jaxid run CONFIG [--out DIR] [--trials N] [--full] [--settings A,B] [--overwrite] [--devices N]
jaxid report RUN_DIR
jaxid list
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from . import _platform

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"


def _experiments_dir() -> Path:
    env = os.environ.get("JAXID_EXPERIMENTS")
    return Path(env) if env else EXPERIMENTS_DIR


def _resolve_config(name: str) -> Path:
    path = Path(name)
    if path.exists():
        return path
    candidate = _experiments_dir() / f"{name}.toml"
    if candidate.exists():
        return candidate
    return path


def _setup_jax(
    devices: int | None, coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> None:
    # Must run before jax is imported: split the CPU into host devices so the trial axis can
    # be sharded over all cores (one XLA CPU device uses one core).
    if devices is None:
        devices = os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if devices > 1 and "xla_force_host_platform_device_count" not in flags:
        flags = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    # Faster, smaller compiles where verified (jaxid._platform: a first fit 106 -> 96 s, 1.69 -> 1.32 GB).
    flags = _platform.with_fast_compile(flags)
    if flags:
        os.environ["XLA_FLAGS"] = flags
    if devices > 1:
        # One core per XLA device already: a multi-threaded OpenBLAS under it (numpy's and jax's
        # LAPACK calls) only oversubscribes. Measured on the shared 2-core machine: the benchmark's
        # batched IDIM-LS of a Panda trial (two 1400 x 69 SVDs and lstsq) 1.7 s CPU -> 12 ms with one thread.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import jax

    jax.config.update("jax_enable_x64", True)
    _persistent_cache(jax)
    if coordinator:
        # Multi-process (multi-host) run: every process runs the same command with its own id;
        # the trial axis is sharded over the devices of all processes, process 0 writes files.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)


#: The compiled-program cache of the command line, shared by every jaxid command and run (and with the test
#: suite's): ``$XDG_CACHE_HOME/jaxid/jax`` (default ``~/.cache/jaxid/jax``). JAX's own variables win
#: (``JAX_COMPILATION_CACHE_DIR`` …); ``JAXID_COMPILATION_CACHE=off`` turns it off.
CACHE_SUBDIR = ("jaxid", "jax")


def _persistent_cache(jax) -> None:
    """Keep compiled programs on disk between runs: a second ``jaxid fit`` of a six-joint arm loads its
    ~100 programs (85 s of compiling on the UR5 campaign of ``scripts/bench_fit_cost.py``) instead of
    compiling them. Entries are keyed by the program, the jax/jaxlib versions and the XLA flags (a
    stale one is never used); programs that compile in under 0.5 s are not kept; 2 GiB at most (JAX
    then locks the cache, so concurrent runs share it safely)."""
    if os.environ.get("JAXID_COMPILATION_CACHE", "").lower() in ("off", "0", "false", "no"):
        return
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return  # the user's (or the test suite's) own cache and settings
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    jax.config.update("jax_compilation_cache_dir", str(base.joinpath(*CACHE_SUBDIR)))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_compilation_cache_max_size", 2 << 30)


def _check_run_args(args) -> str | None:
    """The one-line error of a bad ``jaxid run`` flag combination, or ``None`` (before jax starts)."""
    if args.trials is not None and args.trials < 1:
        return f"--trials must be a positive integer, got {args.trials}."
    if args.trials is not None and args.full:
        return "--trials and --full both set the trial count; give one of them."
    if args.devices is not None and args.devices < 1:
        return f"--devices must be a positive integer, got {args.devices}."
    multi = (args.coordinator, args.num_processes, args.process_id)
    if any(x is not None for x in multi) and any(x is None for x in multi):
        return (
            "--coordinator, --num-processes and --process-id go together (a multi-process run); give all three or none."
        )
    if args.num_processes is not None and args.num_processes < 1:
        return f"--num-processes must be a positive integer, got {args.num_processes}."
    if args.process_id is not None and not 0 <= args.process_id < args.num_processes:
        return f"--process-id must be in 0 .. {args.num_processes - 1} (--num-processes {args.num_processes}), got {args.process_id}."
    return None


def cmd_run(args) -> int:
    error = _check_run_args(args)
    if error:
        print(f"jaxid run: error: {error}", file=sys.stderr)
        return 2
    _setup_jax(args.devices, args.coordinator, args.num_processes, args.process_id)
    from .config.common import ConfigError
    from .experiment import load_config, run_experiment
    from .study import RunExists

    try:
        exp = load_config(_resolve_config(args.config))
        names = [s for s in args.settings.split(",") if s] if args.settings else None
        trials = args.trials
        if args.full and hasattr(exp, "select_full"):  # a benchmark: its settings marked full
            exp = exp.select_full(names)
        else:
            if args.full:
                if exp.full_trials is None:
                    raise ConfigError(f"{exp.name} has no experiment.full_trials; give --trials N instead of --full.")
                trials = exp.full_trials
            exp = exp.select(names, trials)
        run_name = args.run or ("full" if args.full else "default")
        out = Path(args.out) if args.out else Path("results") / exp.name / run_name
        run_dir = run_experiment(exp, out, overwrite=args.overwrite, progress=not args.quiet)
    except (ConfigError, RunExists, ValueError) as err:
        print(f"jaxid run: error: {err}", file=sys.stderr)
        return 2
    import jax
    import pandas as pd

    from .report.tables import markdown_table

    if jax.process_index() != 0:
        return 0
    if (run_dir / "estimators.md").exists():  # a benchmark: the per-estimator table (summary.csv has every parameter)
        print((run_dir / "estimators.md").read_text())
        print(f"Results in {run_dir}/ (estimators.csv, summary.csv, trials.parquet, figures/)")
        return 0
    summary = pd.read_parquet(run_dir / "summary.parquet")
    print(markdown_table(summary))
    print(f"Results in {run_dir}/ (summary.csv, trials.parquet, figures/)")
    return 0


def cmd_report(args) -> int:
    from .config.common import ConfigError
    from .report.benchmark import is_benchmark_run, make_benchmark_figures, write_benchmark_tables
    from .report.figures import make_figures
    from .report.tables import markdown_table, write_tables
    from .study import check_run_dir

    try:
        run_dir = check_run_dir(args.run_dir)
        if is_benchmark_run(run_dir):
            table = write_benchmark_tables(run_dir)
            paths = make_benchmark_figures(run_dir)
            print(markdown_table(table, [c for c in table.columns if c != "statuses"]))
            print(f"Rebuilt tables and {len(paths)} figure(s) in {run_dir}/")
            return 0
        summary = write_tables(run_dir)
        paths = make_figures(run_dir)
    except (ConfigError, FileNotFoundError) as err:
        print(f"jaxid report: error: {err}", file=sys.stderr)
        return 2
    print(markdown_table(summary))
    print(f"Rebuilt tables and {len(paths)} figure(s) in {run_dir}/")
    return 0


def cmd_list(args) -> int:
    import tomllib

    directory = _experiments_dir()
    files = sorted(directory.glob("*.toml"))
    if not files:
        print(f"No experiments in {directory}.")
        return 0
    for f in files:
        raw = tomllib.loads(f.read_text())
        exp = raw.get("experiment", {})
        settings = ", ".join(raw.get("settings", {}))
        print(
            f"{f.stem:<14} {exp.get('description', '')}\n{'':<14} settings: {settings}\n{'':<14} run: jaxid run {f}\n"
        )
    return 0


_PROGRESS = threading.Lock()


def _progress_line(line: str) -> None:
    """A ``jaxid fit`` progress line on stderr (``run_fit``'s ``progress``), at once and whole (the estimators that
    run side by side say theirs from their own threads)."""
    with _PROGRESS:
        sys.stderr.write(f"jaxid fit: {line}\n")
        sys.stderr.flush()


def cmd_fit(args) -> int:
    _setup_jax(1)
    import warnings

    from .config.common import ConfigError
    from .fit import FitExists, load_fit_config, run_fit

    try:
        config = load_fit_config(args.config, data=args.data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = run_fit(
                config,
                args.out,
                overwrite=args.overwrite,
                figures=not args.no_figures,
                progress=None if args.quiet else _progress_line,
            )
    except (ConfigError, FitExists, ValueError) as err:
        print(f"jaxid fit: error: {err}", file=sys.stderr)
        return 2
    for w in caught:  # one line each on stderr
        text = str(w.message).removeprefix("jaxid fit: ")
        print(f"jaxid fit: warning: {text}", file=sys.stderr)
    import pandas as pd

    from .fit import markdown_summary

    summary = pd.read_csv(out / "summary.csv")
    manifest = json.loads((out / "manifest.json").read_text())
    print(
        f"Per-joint RMSE, {summary['role'].iloc[0]} runs (mean over runs; torque in the "
        f"{manifest['evaluation_band_hz']:g} Hz evaluation band, fit cut-off {manifest['cutoff_hz']:g} Hz):"
    )
    print(markdown_summary(summary))
    notes = manifest["warnings"]
    if notes:
        print(f"{len(notes)} warning(s) (warnings.csv; also on stderr): a result is not to be trusted where named.")
    print(
        f"Results in {out}/ (parameters.csv, validation.csv, summary.csv, warnings.csv, identified/, figures/, "
        "manifest.json)"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxid",
        description="Identify robot-arm dynamics from periodic multisine experiments; Monte Carlo studies.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run (or resume) an experiment from a TOML config",
        description="Run an experiment; a killed run resumes from its finished chunks when the same command is given again.",
    )
    run.add_argument(
        "config", help="path to an experiment TOML file, or the name of a shipped experiment (see `jaxid list`)"
    )
    run.add_argument("--out", help="run directory (default results/<experiment>/<run>)")
    run.add_argument("--run", help="run name under results/<experiment>/ (default 'default', or 'full' with --full)")
    run.add_argument("--trials", type=int, help="trials per setting (overrides the config)")
    run.add_argument("--full", action="store_true", help="use the experiment's full_trials (the full reproduction)")
    run.add_argument("--settings", help="comma-separated subset of settings to run")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    run.add_argument(
        "--devices", type=int, help="number of XLA host devices to split the CPU into (default: CPU count)"
    )
    run.add_argument("--coordinator", help="HOST:PORT of process 0 for a multi-process run (jax.distributed)")
    run.add_argument("--num-processes", type=int, help="number of processes in a multi-process run")
    run.add_argument("--process-id", type=int, help="this process's id (0 writes the results)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="rebuild summary tables and figures from a run's tables")
    rep.add_argument("run_dir")
    rep.set_defaults(func=cmd_report)
    fit = sub.add_parser(
        "fit",
        help="identify a real arm from its logs (a fit TOML: runs, model, split, filter, estimators)",
        description="Fit base parameters on the training logs, validate on the held-out logs beside the reference "
        "model; writes results/<fit>/.",
    )
    fit.add_argument("config", help="path to a fit TOML file (e.g. experiments/fits/double_pendulum.toml)")
    fit.add_argument("--data", help="directory holding the logs (overrides fit.data)")
    fit.add_argument("--out", help="results directory (default results/<fit name>)")
    fit.add_argument("--overwrite", action="store_true", help="replace an existing results directory")
    fit.add_argument("--no-figures", action="store_true", help="tables and manifest only")
    fit.add_argument("--quiet", action="store_true", help="no progress lines on stderr (warnings and errors still)")
    fit.set_defaults(func=cmd_fit)
    lst = sub.add_parser("list", help="list the shipped experiments")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
