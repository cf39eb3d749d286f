"""The command line's persistent compilation cache (``jaxid.cli._persistent_cache``): where it goes, and
that the user's own JAX settings and ``JAXID_COMPILATION_CACHE=off`` win."""

import types

import pytest

from jaxid import cli


def _config(monkeypatch, **env):
    for key in ("JAX_COMPILATION_CACHE_DIR", "JAXID_COMPILATION_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    updates = {}
    fake = types.SimpleNamespace(config=types.SimpleNamespace(update=updates.__setitem__))
    cli._persistent_cache(fake)
    return updates


def test_cache_under_the_users_cache_directory(monkeypatch, tmp_path):
    updates = _config(monkeypatch, XDG_CACHE_HOME=str(tmp_path))
    assert updates == {
        "jax_compilation_cache_dir": str(tmp_path / "jaxid" / "jax"),
        "jax_persistent_cache_min_compile_time_secs": 0.5,
        "jax_compilation_cache_max_size": 2 << 30,
    }


@pytest.mark.parametrize("env", [{"JAXID_COMPILATION_CACHE": "off"}, {"JAX_COMPILATION_CACHE_DIR": "/elsewhere"}])
def test_the_users_choice_wins(monkeypatch, env):
    assert _config(monkeypatch, **env) == {}
