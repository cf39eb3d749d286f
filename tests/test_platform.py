"""jaxid._platform: the jaxlib 0.11 CPU FFT deadlock work-around (a flag added to XLA_FLAGS at import), the
command line's fast-compile flag, and the release of compiled programs near the memory-map limit."""

from importlib import metadata

import jax
import jax.numpy as jnp
import pytest

from jaxid import _platform
from jaxid._platform import FFT_DEADLOCK_FLAG, apply, fft_deadlock_affected


def test_affected_releases():
    assert fft_deadlock_affected("0.11.0") and fft_deadlock_affected("0.11.2")
    for version in ("0.4.35", "0.10.2", "0.12.0", "0.12.0.1", "1.11.0", "0.110.0"):
        assert not fft_deadlock_affected(version), version


def test_apply_adds_the_flag_only_where_needed(monkeypatch):
    monkeypatch.setattr(_platform, "_backends_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    assert not apply("0.12.0.1")
    assert _platform.os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    assert apply("0.11.2")
    assert _platform.os.environ["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=4 {FFT_DEADLOCK_FLAG}"
    assert not apply("0.11.2")  # already there: not added twice
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")  # the user's choice wins
    assert not apply("0.11.2")
    assert _platform.os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=true"
    monkeypatch.delenv("XLA_FLAGS")
    assert apply("0.11.2") and _platform.os.environ["XLA_FLAGS"] == FFT_DEADLOCK_FLAG


def test_fast_compile_flag_only_where_verified_and_wanted(monkeypatch):
    from jaxid._platform import FAST_COMPILE_FLAG, with_fast_compile

    monkeypatch.delenv("JAXID_FAST_COMPILE", raising=False)
    device = "--xla_force_host_platform_device_count=2"
    assert with_fast_compile("", "0.10.2") == FAST_COMPILE_FLAG
    assert with_fast_compile(device, "0.10.0") == f"{device} {FAST_COMPILE_FLAG}"
    for version in ("0.11.2", "0.9.0", "0.100.1", "1.10.0"):  # not verified: XLA would abort on an unknown flag
        assert with_fast_compile(device, version) == device, version
    mine = "--xla_cpu_use_fusion_emitters=true"  # the user's choice wins
    assert with_fast_compile(mine, "0.10.2") == mine
    monkeypatch.setenv("JAXID_FAST_COMPILE", "0")
    assert with_fast_compile(device, "0.10.2") == device


def test_the_suite_compiles_as_the_command_line():
    import conftest

    assert conftest.FAST_COMPILE_FLAG == _platform.FAST_COMPILE_FLAG


def test_apply_warns_when_jax_already_started(monkeypatch):
    monkeypatch.setattr(_platform, "_backends_started", lambda: True)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.warns(RuntimeWarning, match="XLA_FLAGS=--xla_cpu_multi_thread_eigen=false"):
        assert not apply("0.11.2")
    assert "XLA_FLAGS" not in _platform.os.environ


def test_this_process_has_the_flag_iff_its_jaxlib_needs_it():
    """The suite imports jaxid before any computation (conftest), as users do: the flag is in
    this process's XLA_FLAGS exactly when the installed jaxlib is affected (or the user set it)."""
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_cpu_multi_thread_eigen=true" not in flags:
        assert (FFT_DEADLOCK_FLAG in flags) == fft_deadlock_affected(metadata.version("jaxlib"))


@pytest.mark.skipif(_platform.memory_maps() is None, reason="/proc/self/maps is Linux's")
def test_release_if_crowded_frees_compiled_programs_and_registered_caches():
    """Under the threshold nothing happens; over it (fraction 0) JAX's caches and the registered ones
    are emptied and the compiled programs' memory mappings are given back."""
    held, limit = _platform.memory_maps()
    assert 0 < held < limit
    assert not _platform.release_if_crowded(fraction=1.0)
    functions = [jax.jit(lambda x, i=i: jnp.sin(x) * i + jnp.cos(x * i)) for i in range(40)]
    for f in functions:
        f(jnp.ones(3)).block_until_ready()
    cache = {"executable": object()}
    _platform.register_cache(cache)
    try:
        compiled = _platform.memory_maps()[0]
        assert _platform.release_if_crowded(fraction=0.0)
        assert cache == {}
        assert _platform.memory_maps()[0] < compiled - 40  # at least one mapping per program back
    finally:
        _platform._CACHES.remove(cache)
