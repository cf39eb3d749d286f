"""No LAPACK custom call inside the batched (``jit(vmap(...))``) estimators and simulators.

jaxlib's CPU LAPACK kernels split a batched call over XLA's intra-op thread pool and block until
the pieces finish; two such calls running concurrently in one compiled program can wait on each
other forever (the deadlock described in ``jaxid.linalg``). Small linear algebra therefore goes
through ``jaxid.linalg``. This test lowers every registered estimator and ``simulate_batch``'s
runner (both simulators) under ``jit(vmap(...))`` on tiny inputs — lowering only, nothing is
compiled or run — and fails on any LAPACK custom call outside ``ALLOWED``.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate.base import ESTIMATORS, get_estimator
from jaxid.simulation.batch import DEFAULT_OPTIONS, _runner
from jaxid.types import Record

#: Estimator name -> LAPACK kernels it may still call, with the reason. Keep this short.
ALLOWED: dict[str, set[str]] = {}

_CALL = re.compile(r"custom_call\s*@\"?([A-Za-z0-9_.]+)")


def _lapack_calls(text: str) -> set[str]:
    """Names of the LAPACK custom-call targets in lowered StableHLO text (e.g. ``lapack_dgetrf_ffi``)."""
    return {name for name in _CALL.findall(text) if "lapack" in name.lower()}


_DT = 0.0025
_EX = jaxid.table2("split", scale=0.1, fundamental=2 * math.pi)  # T = 1 s, N = 400 samples


def _records(batch: int = 2, periods: int = 2) -> Record:
    n = periods * round(_EX.period / _DT)
    t = jnp.arange(n) * _DT
    rng = np.random.default_rng(0)
    q = jnp.asarray(1e-3 * rng.standard_normal((batch, n, 2)))
    tau = jnp.broadcast_to(_EX.torque(t), (batch, n, 2))
    return Record(
        jnp.broadcast_to(t, (batch, n)),
        tau,
        q,
        jnp.zeros(batch, jnp.int32),
        jnp.zeros(batch),
        _DT,
        _EX.period,
        periods,
    )


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_batched_estimator_has_no_lapack_call(name):
    est = get_estimator(name)
    unknowns = ("m1", "m2") if name == "paper" else ("m1", "m2", "fv1", "fv2")
    arm = jaxid.point_mass()

    def one(record):
        return est(record, _EX, arm, unknowns=unknowns).value

    text = jax.jit(jax.vmap(one)).lower(_records()).as_text()
    found = _lapack_calls(text) - ALLOWED.get(name, set())
    assert not found, f"{name}: LAPACK custom calls {sorted(found)} under jit(vmap); use jaxid.linalg"


@pytest.mark.parametrize("model", ["nonlinear", "linear"])
def test_batched_simulator_has_no_lapack_call(model):
    batch = 2
    arms = jax.vmap(lambda m: jaxid.point_mass(masses=m))(jnp.array([[5.0, 1.5], [5.5, 1.4]]))
    options = {**DEFAULT_OPTIONS, "model": model, "sample_step": _DT, "n_per": round(_EX.period / _DT)}
    run = _runner(tuple(sorted(options.items())), 1, batch)
    text = run.lower(
        arms, jnp.ones(batch), jnp.zeros((batch, 4)), jnp.ones(batch, jnp.int32), _EX, jnp.zeros(2)
    ).as_text()
    found = _lapack_calls(text)
    assert not found, f"simulate_batch ({model}): LAPACK custom calls {sorted(found)}"


def test_the_detector_sees_a_lapack_call():
    text = jax.jit(jax.vmap(jnp.linalg.inv)).lower(jnp.ones((2, 3, 3))).as_text()
    assert _lapack_calls(text)
