"""Shared test set-up: float64 on, and session-scoped fixtures that share compiled work."""

import jax

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

import jaxid  # noqa: E402


@pytest.fixture(scope="session")
def arm():
    return jaxid.point_mass()


@pytest.fixture(scope="session")
def arm_table1():
    return jaxid.table1()
