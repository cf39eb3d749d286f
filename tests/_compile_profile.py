"""Where the suite's time goes to JAX: a pytest plugin that ``conftest.py`` loads when
``JAXID_COMPILE_PROFILE`` names a folder.

    JAXID_COMPILE_PROFILE=.compile_profile python -m pytest -q -n 2 --dist loadfile   # the whole suite
    JAXID_COMPILE_PROFILE=.compile_profile JAX_COMPILATION_CACHE_DIR=$(mktemp -d) \
        python -m pytest -q tests/test_ekf.py                                         # on an empty cache

It listens to JAX's own duration events (``jax._src.monitoring``): XLA compiles
(``backend_compile_duration``, one per program JAX gets for a new signature: it times
``compile_or_get_cached`` as a whole, so a persistent-cache read, and a compile's cache write, are inside it;
a warm run's "programs compiled" are mostly loads), tracing
(``jaxpr_trace_duration``), lowering to MLIR (``jaxpr_to_mlir_module_duration``) and persistent-cache
reads (``cache_retrieval_time_sec``), each attributed to the running test and, for compiles, to the
program's name and the innermost ``jaxid`` source line that asked for it (so that op-by-op calls, which
compile one small program per operation and shape, show where they come from). Each process writes
``<dir>/<worker>.json`` (``dir``: ``$JAXID_COMPILE_PROFILE``); the main
process merges them and prints the files, tests and call sites with the most XLA compile time.

What it measured on an empty cache (2 cores, jaxlib 0.10.2, before the suite's fast-compile flag): 2 800
worker-seconds in tests, 1 990 of them XLA compiles (8 745 programs: 6 900 under 0.2 s each, 515 s in
all; 60 over 5 s, 487 s), 185 s tracing, 132 s lowering. Warm, the quick tier: 291 worker-seconds, of
which 89 s tracing, 77 s lowering, 42 s cache reads. Compiles in a subprocess that a test starts (a
CLI run) count in that test's wall time only.
"""

from __future__ import annotations

import collections
import json
import os
import time
import traceback
from pathlib import Path

from jax._src import monitoring

_EVENTS = {
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read",
}
_current = ["<collection>"]
_tests: dict = collections.defaultdict(lambda: collections.defaultdict(float))
_sites: dict = collections.defaultdict(lambda: [0.0, 0])
_started: dict = {}


def _site() -> str:
    """The innermost ``jaxid`` frame of the current stack (``module.py:line:function``), else the test's."""
    frames = traceback.extract_stack(limit=80)
    for marker in ("/jaxid/", "/tests/"):
        for frame in reversed(frames):
            if marker in frame.filename and "site-packages" not in frame.filename and frame.filename != __file__:
                return f"{frame.filename.split(marker, 1)[1]}:{frame.lineno}:{frame.name}"
    return "?"


def _listener(event: str, duration: float, **kwargs) -> None:
    kind = _EVENTS.get(event)
    if kind is None:
        return
    row = _tests[_current[0]]
    row[kind] += duration
    if kind == "compile":
        row["programs"] += 1
        site = _sites[(str(kwargs.get("fun_name", "?")), _site())]
        site[0] += duration
        site[1] += 1


monitoring.register_event_duration_secs_listener(_listener)


def _out() -> Path:
    return Path(os.environ.get("JAXID_COMPILE_PROFILE", ".compile_profile"))


def pytest_runtest_setup(item):
    _current[0] = item.nodeid
    _started[item.nodeid] = time.perf_counter()


def pytest_runtest_teardown(item, nextitem):
    _tests[item.nodeid]["wall"] += time.perf_counter() - _started.pop(item.nodeid, time.perf_counter())


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    out = _out()
    out.mkdir(parents=True, exist_ok=True)
    if worker == "main":
        for old in out.glob("gw*.json"):  # a worker's file from an earlier run is not merged into this one
            if old.stat().st_mtime < _run_start:
                old.unlink()
    data = {"tests": _tests, "sites": [[name, site, s, n] for (name, site), (s, n) in _sites.items()]}
    (out / f"{worker}.json").write_text(json.dumps(data))


_run_start = time.time()


def pytest_terminal_summary(terminalreporter):
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    tests: dict = {}
    sites: dict = collections.defaultdict(lambda: [0.0, 0])
    for path in sorted(_out().glob("*.json")):
        data = json.loads(path.read_text())
        tests.update(data["tests"])
        for name, site, s, n in data["sites"]:
            sites[(name, site)][0] += s
            sites[(name, site)][1] += n
    write = terminalreporter.write_line
    totals = collections.Counter()
    files: dict = collections.defaultdict(collections.Counter)
    for nodeid, row in tests.items():
        totals.update(row)
        files[nodeid.split("::")[0]].update(row)
    write("")
    write(f"JAX time (seconds, summed over processes; files in {_out()}):")
    write("  " + ", ".join(f"{k} {totals[k]:.1f}" for k in ("wall", "compile", "trace", "lower", "cache_read")))
    write(f"  programs compiled: {int(totals['programs'])}")
    write("  files by XLA compile time: wall compile programs trace lower")
    for name, row in sorted(files.items(), key=lambda x: -x[1]["compile"])[:15]:
        write(
            f"  {row['wall']:7.1f} {row['compile']:7.1f} {int(row['programs']):5d} {row['trace']:6.1f} "
            f"{row['lower']:6.1f}  {name}"
        )
    write("  call sites by XLA compile time: compile programs  program  site")
    for (name, site), (s, n) in sorted(sites.items(), key=lambda x: -x[1][0])[:20]:
        write(f"  {s:7.1f} {n:5d}  {name[:40]:40s} {site}")
