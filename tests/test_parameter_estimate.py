"""One protocol for an estimate from records (``Estimate``) and from logs (``Identification``): a
table takes either, and the same numbers give the same rows."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jaxid import Estimate, Identification, parameter_table
from jaxid.types import ParameterEstimate, Status

NAMES = ("m1", "fv1")
VALUE = np.array([1.5, 0.2])
COV = np.array([[0.04, 0.001], [0.001, 0.0009]])


def _record_estimate(status=Status.CONVERGED):
    return Estimate(jnp.asarray(VALUE), jnp.asarray(COV), jnp.asarray(int(status)), NAMES)


def _log_estimate(status="ok"):
    return Identification("idim_ls", NAMES, VALUE, COV, 2, 3.0, np.ones(2), 100, status=status)


def test_both_kinds_satisfy_the_protocol_with_the_same_std_and_label():
    rec, log = _record_estimate(), _log_estimate()
    assert isinstance(rec, ParameterEstimate) and isinstance(log, ParameterEstimate)
    np.testing.assert_allclose(np.asarray(rec.std), [0.2, 0.03], rtol=1e-15)
    np.testing.assert_allclose(log.std, [0.2, 0.03], rtol=1e-15)
    assert rec.label == log.label == "ok"
    assert _record_estimate(Status.MAX_ITERATIONS).label == "max_iterations"


def test_the_table_is_the_same_for_records_and_logs():
    truth = {"m1": 1.0, "fv1": 0.2}
    a = parameter_table({"x": _record_estimate()}, truth)
    b = parameter_table({"x": _log_estimate()}, truth)
    pd.testing.assert_frame_equal(a, b)
    # error and z by hand: (1.5 - 1.0) / 0.2 = 2.5; the second parameter is exact
    np.testing.assert_allclose(a["z"], [2.5, 0.0], atol=1e-12)


def test_a_batched_estimate_gives_one_row_per_trial_and_parameter():
    status = jnp.asarray([int(Status.CONVERGED), int(Status.SINGULAR), int(Status.CONVERGED)])
    values, covs = jnp.asarray(np.stack([VALUE, 2 * VALUE, 3 * VALUE])), jnp.broadcast_to(jnp.asarray(COV), (3, 2, 2))
    batch = jax.vmap(lambda v, c, s: Estimate(v, c, s, NAMES))(
        values, covs, status
    )  # as a vmapped estimator returns it
    table = parameter_table(batch)
    assert len(table) == 6 and list(table["trial"]) == [0, 0, 1, 1, 2, 2]
    assert list(table["status"]) == ["ok", "ok", "singular", "singular", "ok", "ok"]
    np.testing.assert_allclose(table["value"].to_numpy().reshape(3, 2), np.stack([VALUE, 2 * VALUE, 3 * VALUE]))


def test_not_an_estimate_is_a_one_line_error():
    with pytest.raises(ValueError, match="not an estimate"):
        parameter_table({"x": {"value": 1.0}})
    with pytest.raises(ValueError, match="truth has 3 values"):
        parameter_table(_log_estimate(), truth=[1.0, 2.0, 3.0])
