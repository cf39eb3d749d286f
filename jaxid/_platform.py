"""Work-arounds for bugs of particular jaxlib releases, applied once when jaxid is imported.

jaxlib 0.11.x, CPU: XLA runs an FFT (``xla::cpu::FftThunk``) on a thread of its intra-op pool and
hands that same pool to ducc0, which splits the transform over the pool and blocks until the
pieces are done. When as many FFTs run at once as the pool has threads (two on a 2-core machine:
e.g. the three inverse transforms of a derivative filter in a batched ``jit(vmap(...))``), every
thread waits for a free one and the program hangs with the CPU idle (upstream: openxla/xla#46347
and PyAutoLabs/PyAutoFit#1530). Measured here: ``tests/test_rls.py``'s batched ``idim_iv`` fixture
hangs under jaxlib 0.11.2 (Python 3.12) and completes under 0.10.2 and 0.12.0.1.
``--xla_cpu_multi_thread_eigen=false`` runs FFTs (and Eigen's dot and convolution kernels) on the
calling thread, which removes the hang; XLA's own parallel loops are unaffected.

``apply`` adds that flag to ``XLA_FLAGS`` for an affected jaxlib unless ``XLA_FLAGS`` already
sets ``xla_cpu_multi_thread_eigen`` (the user's choice wins). XLA reads ``XLA_FLAGS`` when the
first backend starts, so it takes effect when ``jaxid`` is imported before any JAX computation
(the usual order: ``import jax``, ``jax.config.update(...)``, ``import jaxid``); otherwise a
warning says how to set it. GPU backends do not read the flag.

Any jaxlib, CPU, Linux: every compiled program XLA keeps loaded holds its own memory mappings (about
9 for a small kernel, 90 for a 30-step loop body; measured on jaxlib 0.10.2), and JAX keeps every
program it compiled while its function lives. A long process that compiles thousands of distinct
programs (a test worker, a benchmark over many settings, a fit with every estimator) reaches the
kernel's limit on mappings (``vm.max_map_count``, 65530 by default): the next compile's ``mmap``
fails and the process dies in XLA with a segmentation fault or an abort, not with an error.
Measured: a test worker's core dump held 64082 mappings when it died compiling. ``release_if_crowded``
empties JAX's caches (``jax.clear_caches``: later calls recompile or load from the persistent cache)
when the process holds more than half the limit; the runners call it between stages.

jaxlib 0.10.x, CPU, the command line only: ``FAST_COMPILE_FLAG`` has XLA generate fused loops with its
elemental emitters instead of its newer fusion emitters: the same optimised program, another code
generator. Measured on 2 cores (jaxlib 0.10.2, empty compilation cache): a user's first ``jaxid fit`` of
the UR5 campaign (``scripts/bench_fit_cost.py``) 106 -> 96 s wall and 1.69 -> 1.32 GB peak resident memory,
statuses and iterations unchanged; the two-link study's batched simulation (``scripts/bench_simulate.py
--batches 1024``) 0.868 vs 0.878 s a run (the same within noise), compile 1.94 -> 1.71 s; the test suite's
XLA compile time -20 to -26 %. ``with_fast_compile`` adds it (``jaxid.cli`` calls it before JAX starts) only
on a jaxlib where it is verified, since XLA aborts the process on a flag it does not know, and not where
``XLA_FLAGS`` already sets ``xla_cpu_use_fusion_emitters`` or ``JAXID_FAST_COMPILE=0``. The Python API
leaves a user's process as it is.

Any jaxlib, CPU: a compiled program runs on the thread that calls it. Programs dispatched one after
another from one Python thread therefore run one after another, on one core, whatever the host has
(measured here, jaxlib 0.10.2: four independent 20-ms calls took 4.0× one call from one thread, also
with two XLA host devices, and 2.0× from two threads on 2 cores). ``thread_map`` calls a function on
independent items from one thread per usable core (``host_threads``); the log estimators use it for
their independent programs (chunks of segments, blocks of rows). The programs and their inputs are
the same, so the results are too.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import TypeVar

__all__ = [
    "FFT_DEADLOCK_FLAG",
    "FAST_COMPILE_FLAG",
    "with_fast_compile",
    "fft_deadlock_affected",
    "apply",
    "memory_maps",
    "register_cache",
    "release_if_crowded",
    "host_threads",
    "thread_map",
    "git_revision",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: caches of compiled executables outside JAX's own (ahead-of-time compiles), emptied with them
_CACHES: list = []

FFT_DEADLOCK_FLAG = "--xla_cpu_multi_thread_eigen=false"
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"
#: jaxlib releases (major.minor) on which ``FAST_COMPILE_FLAG`` is verified (module docstring).
FAST_COMPILE_VERIFIED = ("0.10",)


def _jaxlib_version() -> str | None:
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def with_fast_compile(flags: str, jaxlib_version: str | None = None) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with ``FAST_COMPILE_FLAG`` added where it is verified and wanted
    (module docstring); otherwise ``flags`` unchanged. ``jaxlib_version``: default the installed one."""
    version = _jaxlib_version() if jaxlib_version is None else jaxlib_version
    if (
        version is None
        or ".".join(version.split(".")[:2]) not in FAST_COMPILE_VERIFIED
        or FAST_COMPILE_FLAG.split("=")[0] in flags
        or os.environ.get("JAXID_FAST_COMPILE", "1") == "0"
    ):
        return flags
    return f"{flags} {FAST_COMPILE_FLAG}".strip()


def fft_deadlock_affected(jaxlib_version: str) -> bool:
    """Whether this jaxlib release has the CPU FFT thread-pool deadlock (0.11.x, measured on 0.11.2)."""
    return jaxlib_version.split(".")[:2] == ["0", "11"]


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a jax without the helper: assume not started
        return False


def apply(jaxlib_version: str | None = None) -> bool:
    """Add ``FFT_DEADLOCK_FLAG`` to ``XLA_FLAGS`` if this jaxlib needs it; ``True`` if it was added."""
    if jaxlib_version is None:
        jaxlib_version = _jaxlib_version()
        if jaxlib_version is None:
            return False
    flags = os.environ.get("XLA_FLAGS", "")
    if not fft_deadlock_affected(jaxlib_version) or "--xla_cpu_multi_thread_eigen" in flags:
        return False
    if _backends_started():
        warnings.warn(
            f"jaxlib {jaxlib_version} can hang in CPU programs that run several FFTs at once, and JAX "
            f"started before jaxid was imported; set XLA_FLAGS={FFT_DEADLOCK_FLAG} before starting Python.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FFT_DEADLOCK_FLAG}".strip()
    return True


def memory_maps() -> tuple[int, int] | None:
    """``(mappings this process holds, the kernel's limit vm.max_map_count)``; ``None`` off Linux."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            held = sum(1 for _ in f)
    except (OSError, ValueError):
        return None
    return held, limit


def register_cache(cache) -> None:
    """Have ``release_if_crowded`` also empty ``cache`` (anything with ``clear()``: a dict of compiled
    executables kept for reuse)."""
    _CACHES.append(cache)


def release_if_crowded(fraction: float = 0.5) -> bool:
    """``jax.clear_caches()`` (and the registered caches) if this process holds more than ``fraction``
    of its memory-map limit.

    Returns whether it cleared. Cheap (reads ``/proc/self/maps``: about 10 ms at 50 000 mappings).
    """
    maps = memory_maps()
    if maps is None or maps[0] <= fraction * maps[1]:
        return False
    import gc

    import jax

    for cache in _CACHES:
        cache.clear()
    jax.clear_caches()
    gc.collect()
    return True


def host_threads() -> int:
    """The CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def thread_map(fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """``[fn(x) for x in items]``, the calls spread over ``host_threads()`` threads (module docstring: a
    compiled program runs on its caller's thread). In order; an exception in one call is raised here.
    For calls that spend their time in compiled programs (which release the GIL), each on its own data."""
    items = list(items)
    workers = min(host_threads(), len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def git_revision() -> str | None:
    """The checkout's ``git rev-parse HEAD`` (what a manifest records), or ``None`` outside a git checkout."""
    import subprocess
    from pathlib import Path

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5
        )
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - a manifest without a revision is fine
        return None
