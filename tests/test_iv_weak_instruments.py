"""IDIM-IV's weak-instrument status (``jaxid.estimate.logs.iv``): the canonical-correlation kernel
against principal angles built by hand, and the status, note and fit warning when the threshold is
not met (the threshold raised above every possible correlation, on the shipped simulated log)."""

import importlib

import numpy as np
import pytest
from _simulated_log import write_logs

import jaxid
from jaxid.estimate.logs import filter_log, idim_iv, idim_ls
from jaxid.estimate.logs.iv import smallest_canonical_correlation
from jaxid.fit.checks import estimate_warnings

IV = importlib.import_module("jaxid.estimate.logs.iv")


def test_smallest_canonical_correlation_is_the_cosine_of_the_largest_principal_angle():
    rng = np.random.default_rng(1)
    basis, _ = np.linalg.qr(rng.standard_normal((50, 4)))
    e1, e2, e3, e4 = basis.T
    angle = 1.2
    a = np.stack([e1, e2], 1) @ np.array([[2.0, 1.0], [0.0, 3.0]])  # any basis of span(e1, e2)
    b = np.stack([e1, np.cos(angle) * e2 + np.sin(angle) * e3], 1) * np.array([5.0, 0.1])
    assert smallest_canonical_correlation(a, b) == pytest.approx(np.cos(angle), rel=1e-12)
    assert smallest_canonical_correlation(a, a @ np.array([[1.0, 2.0], [3.0, 4.0]])) == pytest.approx(1.0, rel=1e-12)
    assert smallest_canonical_correlation(a, np.stack([e1, e4], 1)) == pytest.approx(0.0, abs=1e-12)


def test_weak_instruments_are_a_status_with_a_note_and_a_warning(tmp_path, monkeypatch):
    _, parquet, arm, _ = write_logs(tmp_path)
    base = jaxid.base_parameters(arm)

    def regressor(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)

    logs = [filter_log(jaxid.load_log(parquet), 20.0)]
    ls = idim_ls(logs, regressor, base.names)
    strong = idim_iv(logs, regressor, base.names, start=ls, iterations=1)
    assert strong.status == "ok" and "weak instruments" not in strong.notes
    monkeypatch.setattr(IV, "WEAK_CORRELATION", 1.5)  # above any correlation: every fit is weak
    weak = idim_iv(logs, regressor, base.names, start=ls, iterations=1)
    assert weak.status == "weak_instruments" and "below 1.5" in weak.notes
    np.testing.assert_array_equal(weak.value, strong.value)  # the estimate is kept
    model = type("Model", (), {"free": ()})()
    kinds = {w["kind"]: w["message"] for w in estimate_warnings(model, "idim_iv", weak, [])}
    assert "not_converged" not in kinds and "smallest canonical correlation" in kinds["weak_instruments"]
