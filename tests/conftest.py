"""Shared test set-up: float64 on, a persistent compilation cache, and session-scoped fixtures.

The persistent compilation cache lives in ``<repo>/.jax_cache`` (git-ignored; override with
``JAX_COMPILATION_CACHE_DIR``). It is set through the environment *before* jax is imported, so
the subprocesses that tests start (multi-device and multi-process studies, the README and GPU
check scripts) share it: a function compiled once in the suite is loaded, not recompiled, by
every later process, and by the next run of the suite.
"""

import os
from pathlib import Path

_CACHE = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".jax_cache"))
# Cache every compile that takes noticeable time (the default, 1 s, misses most of ours).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
)

import pytest  # noqa: E402

import jaxid  # noqa: E402


@pytest.fixture(scope="session")
def arm():
    return jaxid.point_mass()


@pytest.fixture(scope="session")
def arm_table1():
    return jaxid.table1()
