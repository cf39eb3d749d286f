"""One estimator class per estimator, on measured logs as on simulated records (jaxid.estimate).

On a simulated log of the lab model (tests/_simulated_log.py): each class called on logs is its
log-side kernel of ``jaxid.estimate.logs`` with the options translated (bit-equal), RLS on logs
ends at IDIM-LS's weighted solution (an independent route to the same minimiser), an estimator
that starts from IDIM-LS computes it when no start is given, and every misuse (an estimator or an
option of the other kind of data, a consistent fit without a consistent map) is a one-line error.
"""

import numpy as np
import pytest

import jaxid
from jaxid.config import parse_experiment
from jaxid.config.common import ConfigError
from jaxid.estimate import (
    ESTIMATORS,
    ML,
    RLS,
    IdimIV,
    IdimLS,
    IdimLSBounded,
    IdimLSConsistent,
    OutputError,
    check_options,
    make_estimator,
    names_for,
)
from jaxid.estimate.logs import RegressionModel, idim_iv, idim_ls, idim_rls
from jaxid.fit.model import SIGN_CONSTRAINED


@pytest.fixture(scope="module")
def problem(lab_fit):
    _, base, regressor, logs, ls = lab_fit
    names = tuple(base.names)
    model = RegressionModel(regressor, names, nonnegative=tuple(n for n in SIGN_CONSTRAINED if n in names))
    return model, logs, ls


def _equal(a, b):
    np.testing.assert_array_equal(a.value, b.value)
    np.testing.assert_array_equal(a.covariance, b.covariance)


def test_the_data_kinds_of_the_table():
    assert names_for("log") == sorted(
        [
            "idim_ls",
            "idim_ls_bounded",
            "idim_ls_consistent",
            "idim_iv",
            "rls",
            "ekf",
            "ukf",
            "output_error",
            "output_error_consistent",
        ]
    )
    logs_only = {"idim_ls_bounded", "idim_ls_consistent", "output_error", "output_error_consistent"}
    assert set(names_for("record")) == set(ESTIMATORS) - logs_only
    # The fit offers exactly the estimators that take logs; the benchmark those and its own DIDIM, which
    # simulates the setting's controller (jaxid.benchmark.didim).
    assert set(jaxid.fit.ESTIMATOR_NAMES) == set(names_for("log"))
    assert set(jaxid.benchmark.BENCHMARK_ESTIMATORS) == set(names_for("log")) | {"didim"}


def test_idim_ls_on_logs_is_the_kernel_with_its_options(problem):
    model, logs, ls = problem
    _equal(IdimLS()(logs, model), ls)
    _equal(IdimLS()(logs[0], model), ls)  # one log or a list
    reg, names = model.regressor, model.names
    _equal(IdimLS(weighting="none", decimate=3)(logs, model), idim_ls(logs, reg, names, weighted=False, decimate=3))
    bounded = idim_ls(logs, reg, names, bounds=model.sign_bounds())
    _equal(IdimLS(constraint="sign")(logs, model), bounded)
    _equal(IdimLSBounded()(logs, model), bounded)
    lower = np.asarray(model.sign_bounds()[0])
    assert np.all(bounded.value[lower == 0] >= 0) and bounded.method == "idim_ls_bounded"
    # Bounds that do not bind: IDIM-LS itself, its estimate and its (Newey-West) covariance.
    p = len(names)
    loose = idim_ls(logs, reg, names, bounds=([-1e9] * p, [1e9] * p))
    np.testing.assert_allclose(loose.value, ls.value, rtol=1e-9, atol=1e-12 * np.abs(ls.value).max())
    np.testing.assert_allclose(loose.covariance, ls.covariance, rtol=1e-7, atol=1e-10 * np.abs(ls.covariance).max())


def test_rls_on_logs_ends_at_the_weighted_least_squares(problem):
    model, logs, ls = problem
    rls = RLS()(logs, model, start=ls)
    assert rls.method == "rls" and rls.status == "ok"
    # Forgetting 1 and a huge P0: the recursion's end is IDIM-LS's weighted solution, and its covariance (the
    # sandwich with P_N for (AᵀA)⁻¹) IDIM-LS's, Newey-West by default and σ̂² P_N with lags 0 as IDIM-LS's lags 0.
    np.testing.assert_allclose(rls.value, ls.value, rtol=1e-6, atol=1e-9 * np.abs(ls.value).max())
    np.testing.assert_allclose(rls.std, ls.std, rtol=1e-3)
    independent = idim_ls(logs, model.regressor, model.names, lags=0)
    white = idim_rls(logs, model.regressor, model.names, start=ls, lags=0)
    np.testing.assert_allclose(white.std, np.sqrt(np.diag(independent.covariance)), rtol=1e-3)
    assert not np.allclose(ls.std, white.std, rtol=1e-2)
    with pytest.raises(ValueError, match="lags must be a non-negative whole number"):
        idim_rls(logs, model.regressor, model.names, start=ls, lags=-1)
    # Forgetting discounts the early rows: another estimate.
    assert not np.allclose(RLS(forgetting=0.999)(logs, model, start=ls).value, ls.value, rtol=1e-4)


def test_an_estimator_started_from_idim_ls_computes_it_when_not_given(problem):
    model, logs, ls = problem
    given = IdimIV(iterations=1)(logs, model, start=ls)
    _equal(given, idim_iv(logs, model.regressor, model.names, start=ls, iterations=1))
    _equal(IdimIV(iterations=1)(logs, model), given)


def test_the_other_kind_of_data_is_refused_in_one_line(problem):
    model, logs, _ = problem
    cases = [
        (lambda: ML()(logs, model), r"'ml' fits simulated records only.*estimators for logs: \['ekf'"),
        (lambda: OutputError()(object(), None, None, unknowns=("m1",)), r"'output_error' fits measured logs only"),
        (lambda: IdimLS(derivative="butterworth")(logs, model), r"option 'derivative' applies to simulated records"),
        (lambda: IdimLS(decimate=2)(object(), None, None, unknowns=("m1",)), r"option 'decimate' applies to logs"),
        (lambda: IdimLSConsistent()(logs, model), r'constraint "consistent" needs a model of an arm'),
        (lambda: check_options("rls", {"decimate": 2}, data="record"), r"no option 'decimate' on records"),
        (lambda: check_options("idim_ls", {"weighted": True}, data="log"), r"Did you mean 'weighting'\?"),
        (lambda: check_options("output_error", {}, data="record"), r"does not fit simulated records"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            call()
        assert "\n" not in str(err.value)


def test_configs_refuse_the_other_kind_of_data(tmp_path):
    raw = {
        "experiment": {"name": "x"},
        "settings": {"a": {"estimators": ["output_error"]}},
    }
    with pytest.raises(ConfigError, match=r"'output_error' fits measured logs"):
        parse_experiment(raw)
    raw["settings"]["a"] = {"estimators": ["rls"], "estimator_options": {"rls": {"decimate": 2}}}
    with pytest.raises(ConfigError, match=r"no option 'decimate' on records"):
        parse_experiment(raw)
    fit = {
        "fit": {"name": "f"},
        "arm": {"preset": "double_pendulum"},
        "split": {"train": ["a"]},
        "estimators": {"use": ["idim_ls", "idim_ls_consistent"]},
    }
    with pytest.raises(ConfigError, match=r"consistent fit needs an \[arm\] urdf"):
        jaxid.fit.parse_fit_config(fit)
    fit["estimators"] = {"use": ["idim_ls"], "idim_ls": {"weighted": True}}
    with pytest.raises(ConfigError, match=r"estimators\.idim_ls\.weighted: .*Did you mean 'weighting'"):
        jaxid.fit.parse_fit_config(fit)


def test_make_estimator_builds_every_log_estimator():
    for name in names_for("log"):
        estimator = make_estimator(name)
        assert "log" in estimator.accepts() and set(estimator.data_options("log")) <= set(estimator.option_names())


def test_a_fit_stopped_at_its_limit_warns():
    from jaxid.estimate.logs import Identification
    from jaxid.estimate.logs.shooting import MISFIT_NOTE
    from jaxid.fit.checks import estimate_warnings
    from jaxid.fit.model import build_model

    config = jaxid.fit.parse_fit_config(
        {"fit": {"name": "f"}, "arm": {"preset": "double_pendulum"}, "split": {"train": ["a"]}}
    )
    model = build_model(config)
    p = len(model.names)
    value = np.ones(p)
    for status, warned in (("ok", False), ("max_iterations", True)):
        est = Identification(
            "output_error", model.names, value, 1e-4 * np.eye(p), p, 1.0, np.ones(2), 10, 30, "", status
        )
        kinds = [w["kind"] for w in estimate_warnings(model, "output_error", est, [])]
        assert ("not_converged" in kinds) == warned, kinds
    # A stopped output error whose angle residuals are far above the angle noise is told why more passes may not help.
    for misfit, said in (("7.25", True), ("1.6", False)):
        note = f"8 segments of 0.5 s; {MISFIT_NOTE} {misfit} × the angle noise σ"
        est = Identification(
            "output_error", model.names, value, 1e-4 * np.eye(p), p, 1.0, np.ones(2), 10, 30, note, "max_iterations"
        )
        (message,) = [
            w["message"] for w in estimate_warnings(model, "output_error", est, []) if w["kind"] == "not_converged"
        ]
        assert (f"by {misfit} × their noise" in message) == said, message
    # Output error's std from a torque noise estimated from the logs (an upper bound in closed loop) is said to be
    # conservative, unless the config gives the sensor's torque_std.
    note = "8 segments of 0.5 s; covariance with the torque reading's noise σ_τ = [0.2 0.2] N m"
    est = Identification("output_error", model.names, value, 1e-4 * np.eye(p), p, 1.0, np.ones(2), 10, 30, note, "ok")
    warned = estimate_warnings(model, "output_error", est, [])
    assert [w["kind"] for w in warned] == ["noise_upper_bound"], warned
    assert "torque_std" in warned[0]["message"]
    assert estimate_warnings(model, "output_error", est, [], {"torque_std": 0.2}) == []
