"""Shared test set-up: float64 on, a persistent compilation cache, and session-scoped fixtures.

The persistent compilation cache lives outside the work tree, in ``$XDG_CACHE_HOME/jaxid/jax``
(default ``~/.cache/jaxid/jax``; override with ``JAX_COMPILATION_CACHE_DIR``), so that a fresh
clone on the same machine (CI runs in one) starts warm. It is set through the environment
*before* jax is imported, so the subprocesses that tests start (multi-device and multi-process
studies, the README and GPU check scripts) and both ``pytest -n 2`` workers share it: a function
compiled once is loaded, not recompiled, by every later process and by the next run. Entries are
keyed by the program, the jax/jaxlib version and the XLA flags, so a stale entry is never used;
the oldest are pruned when the directory passes ``JAXID_TEST_CACHE_MAX_BYTES`` (default 2 GiB).

Session fixtures here (offered to every test file; same shapes mean shared compiles):

- ``arm``, ``arm_table1``: ``jaxid.point_mass()`` and ``jaxid.table1()``;
- ``split_small``: ``table2("split", scale=0.25)``, the excitation most tests use;
- ``record_small``: its noise-free nonlinear steady-state record at Δ = 0.05 s (two periods
  discarded, one measured) on ``arm``, the study tests' sampling: a test that needs *a* record
  should take this one (or ``noisy_small``) rather than simulate its own at another size;
- ``noisy_small``: ``record_small`` plus uniform noise of level 0.01 (key 0).
"""

import os
from pathlib import Path

_DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxid" / "jax"
_CACHE = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_DEFAULT_CACHE))
# The workers cache every compile, the small kernels of eager (op-by-op) calls included: each takes
# 0.01-0.2 s to compile and the suite makes thousands of them, while loading one takes milliseconds.
# Measured warm (load 6, one process): test_urdf_random 28.7 s at a 0.05 s threshold -> 11.0 s at 0;
# test_crlb + test_serial 51.6 s -> 36.2 s. ``JAXID_TEST_MIN_COMPILE_TIME_SECS`` overrides it.
_WORKER_MIN_COMPILE_SECS = float(os.environ.get("JAXID_TEST_MIN_COMPILE_TIME_SECS", "0"))
# The tests' subprocesses (CLI runs, scripts: they inherit the environment) keep the command line's own
# threshold, 0.5 s (``jaxid.cli``): each write to a size-limited cache costs them a scan of the whole
# directory (below), and their small programs recompile in milliseconds.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
# A size limit makes JAX lock the cache (``filelock``) around every read and write. Without one it
# writes entries unlocked, and a worker (or a test's subprocess, which inherits these variables)
# that reads an entry another process is still writing crashes in deserialisation.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2 << 30))


def _prune(path: Path, max_bytes: int) -> None:
    """Delete the oldest cache entries until the directory holds at most ``max_bytes / 2``."""
    try:
        entries = [(e.stat().st_mtime, e.stat().st_size, e.path) for e in os.scandir(path) if e.is_file()]
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return
    for _, size, name in sorted(entries):
        if total <= max_bytes // 2:
            break
        try:
            os.remove(name)
            total -= size
        except OSError:
            pass


#: XLA's CPU flag that compiles fusions with its older (elemental) emitters instead of the fusion
#: emitters: the same HLO, another code generator. Measured on an empty compilation cache, 2 cores:
#: XLA compile time of ``test_design`` + ``test_ekf`` 89.5 -> 66.1 s (-26 %); the KUKA fit and a UR5's
#: consistent output error 115 -> 89 s cold, 59.5 -> 57.3 s warm (no slower at run time). The command
#: line adds the same flag (``jaxid._platform.FAST_COMPILE_FLAG``, tested equal) on the jaxlib releases it
#: is verified on; the suite probes for it on any (``JAXID_TEST_FAST_COMPILE=0`` turns it off).
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _with_fast_compile() -> None:
    """Add ``FAST_COMPILE_FLAG`` to ``XLA_FLAGS`` (so the workers and the tests' subprocesses inherit it)
    if this jaxlib knows it: XLA aborts a process on an unknown flag, so a child process tries it first."""
    import subprocess
    import sys

    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("JAXID_TEST_FAST_COMPILE", "1") == "0" or FAST_COMPILE_FLAG.split("=")[0] in flags:
        return
    trial = f"{flags} {FAST_COMPILE_FLAG}".strip()
    probe = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    result = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "XLA_FLAGS": trial, "JAX_PLATFORMS": "cpu"},
        capture_output=True, timeout=120,
    )  # fmt: skip
    if result.returncode == 0:
        os.environ["XLA_FLAGS"] = trial
        os.environ["JAXID_TEST_XLA_FLAGS"] = FAST_COMPILE_FLAG  # for the tests' subprocesses (tests/_env.py)


if "PYTEST_XDIST_WORKER" not in os.environ:  # once per run, not in each worker
    _prune(Path(_CACHE), int(os.environ.get("JAXID_TEST_CACHE_MAX_BYTES", 2 << 30)))  # JAX's own limit: see above
    _with_fast_compile()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", _WORKER_MIN_COMPILE_SECS)
jax.config.update("jax_compilation_cache_max_size", int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))


def _no_eviction_scan_per_write() -> None:
    """Skip the eviction scan JAX's size-limited cache makes on every write, in this process.

    ``jax._src.lru_cache.LRUCache.put`` calls ``_evict_if_needed``, which lists the whole cache directory
    and reads every entry's access-time file, under the lock both workers share: O(entries) a write, so a
    cold run that writes thousands of programs is quadratic. Measured: 0.15 s a scan at the 6 000 entries a
    cold run leaves; the README's main command (a subprocess, 94 writes) 19.0 s on an empty cache and 27.9 s
    beside 12 000 other entries. The suite bounds the directory once per run instead (``_prune``, before
    the workers start), so the scan is replaced by nothing; the lock, the reason for the size limit, stays.
    Where a jax release has no such method, nothing changes (slower, not wrong)."""
    from jax._src import lru_cache

    if callable(getattr(lru_cache.LRUCache, "_evict_if_needed", None)):
        lru_cache.LRUCache._evict_if_needed = lambda self, *, additional_size=0: None


_no_eviction_scan_per_write()

import pytest  # noqa: E402
from _typecheck import install as _skip_unannotated  # noqa: E402

_skip_unannotated()  # before jaxid is imported: its unannotated functions are not wrapped (tests/_typecheck.py)

import jaxid  # noqa: E402

#: Test files in decreasing cold-cache cost (the worker-seconds of each file in a whole cold run,
#: ``JAXID_COMPILE_PROFILE``, 2026-12-05: 82 s for the first, 26 s for the last; the other files take less):
#: run first, so that the two ``-n 2 --dist loadfile`` workers take the long files at the start and the
#: short ones fill in at the end (longest-first scheduling). A scheduling hint only: every file runs, in
#: any order.
HEAVY_FIRST = (
    "test_study_cli.py",
    "test_fit_real_arm.py",
    "test_identification_speed.py",
    "test_kuka.py",
    "test_unrolled.py",
    "test_readme.py",
    "test_nonlinear_fast.py",
    "test_estimators.py",
    "test_rls.py",
    "test_study.py",
    "test_estimator_options.py",
    "test_closed_loop.py",
    "test_output_error_streaming.py",
    "test_benchmark_batched.py",
    "test_fit_rules.py",
    "test_regressor_speed.py",
    "test_fit_serial.py",
    "test_design.py",
    "test_gpu_check.py",
    "test_output_error_consistent.py",
    "test_nonlinear.py",
    "test_benchmark.py",
    "test_simulation.py",
    "test_serial.py",
    "test_trajectory_design.py",
)


def pytest_configure(config):
    if os.environ.get("JAXID_COMPILE_PROFILE"):  # where the JAX time goes (tests/_compile_profile.py)
        config.pluginmanager.import_plugin("_compile_profile")
    # xdist would otherwise hand out files by test count (``--loadscope-reorder``), not by cost.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_runtest_teardown(item, nextitem):
    # A worker runs hundreds of files in one process and JAX keeps every program it compiled: without
    # this its memory mappings reach vm.max_map_count and XLA dies compiling (jaxid._platform).
    # Only between files (the threshold, half the limit, leaves room for one file): a clear in the
    # middle of a file threw away the programs its module fixtures had compiled (recompiled, or
    # reloaded, by the next test) and made ``eqx.debug.assert_max_traces`` fixtures fail
    # (test_closed_loop's ``two_link_vmapped`` retraced after a clear).
    if nextitem is None or nextitem.path != item.path:
        jaxid._platform.release_if_crowded()


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept


@pytest.fixture(scope="session")
def arm():
    return jaxid.point_mass()


@pytest.fixture(scope="session")
def arm_table1():
    return jaxid.table1()


@pytest.fixture(scope="session")
def split_small():
    return jaxid.table2("split", scale=0.25)


@pytest.fixture(scope="session")
def record_small(arm, split_small):
    return jaxid.simulate(arm, split_small, sample_step=0.05, discard_periods=2)


@pytest.fixture(scope="session")
def noisy_small(record_small):
    return jaxid.add_noise(record_small, key=jax.random.PRNGKey(0), kind="uniform", level=0.01)


@pytest.fixture(scope="session")
def lab_log(tmp_path_factory):
    """``tests/_simulated_log.py``'s log of the lab model, simulated and written once per worker
    (it was simulated again by every file that reads it): ``(csv, parquet, arm, frame)``. Read only."""
    from _simulated_log import write_logs

    return write_logs(tmp_path_factory.mktemp("lab_log"))


@pytest.fixture(scope="session")
def lab_fit(lab_log):
    """``lab_log`` read back, filtered at 20 Hz (~10x its highest line, 2.3 Hz) and fitted by
    IDIM-LS, shared by the log-estimator files: ``(arm, base, regressor, logs, ls)``. One regressor
    function for all of them, so their compiled programs are shared too."""
    from jaxid.estimate.logs import filter_log, idim_ls

    _, parquet, arm, _ = lab_log
    base = jaxid.base_parameters(arm)

    def regressor(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)

    logs = [filter_log(jaxid.load_log(parquet), 20.0)]
    return arm, base, regressor, logs, idim_ls(logs, regressor, base.names)
