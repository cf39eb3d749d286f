"""``estimators.use`` by default: the two-link list, and for a URDF/MJCF arm the same with the physically
consistent least squares (``jaxid.config.fit.SERIAL_ESTIMATORS``); a given list is kept as it is."""

from pathlib import Path

import pytest

from jaxid.config.fit import _SECTIONS, SERIAL_ESTIMATORS, parse_fit_config

ROOT = Path(__file__).resolve().parents[1]


def _config(arm, estimators=None):
    raw = {"fit": {"name": "t"}, "arm": arm, "split": {"train": ["run_01"]}}
    if estimators is not None:
        raw["estimators"] = estimators
    return parse_fit_config(raw, path=ROOT / "experiments" / "fits" / "t.toml", data=ROOT)


def test_a_urdf_arm_runs_the_consistent_least_squares_by_default():
    config = _config({"urdf": "../../data/robots/ur5_robot.urdf"})
    assert config.estimators == SERIAL_ESTIMATORS
    assert "idim_ls_consistent" in SERIAL_ESTIMATORS and SERIAL_ESTIMATORS[0] == "idim_ls"


def test_a_two_link_arm_and_a_given_list_keep_theirs():
    assert _config({"preset": "double_pendulum"}).estimators == _SECTIONS["estimators"]["use"]
    given = _config({"urdf": "../../data/robots/ur5_robot.urdf"}, {"use": ["idim_ls", "ekf"]})
    assert given.estimators == ["idim_ls", "ekf"]


def test_the_default_list_is_never_changed_by_a_config():
    before = list(_SECTIONS["estimators"]["use"])
    _config({"preset": "double_pendulum"}, {"use": ["ekf"]})  # idim_ls is put first in the config's copy
    _config({"preset": "double_pendulum"}).estimators.append("rls")
    assert _SECTIONS["estimators"]["use"] == before


@pytest.mark.parametrize("bad", ["idim_ls", []])
def test_a_use_that_is_not_a_list_is_refused(bad):
    from jaxid.config.common import ConfigError

    with pytest.raises(ConfigError, match="estimators.use must be a non-empty list"):
        _config({"preset": "double_pendulum"}, {"use": bad})


def test_output_error_in_a_fit_weights_its_gaps_like_an_angle_sample():
    from jaxid.config.fit import FIT_OPTIONS
    from jaxid.estimate import make_estimator

    config = _config({"urdf": "../../data/robots/ur5_robot.urdf"})
    fit_options = {"continuity_weight": 1.0, "solver": "gauss_newton"}
    assert config.estimator_options("output_error") == fit_options == FIT_OPTIONS["output_error"]
    assert make_estimator("output_error", config.estimator_options("output_error")).continuity_weight == 1.0
    assert make_estimator("output_error", {}).continuity_weight == 100.0  # the estimator's own default is kept
    given = _config({"preset": "double_pendulum"}, {"output_error": {"continuity_weight": 100.0}})
    assert given.estimator_options("output_error")["continuity_weight"] == 100.0


def test_output_error_s_solver_reaches_the_fit_and_the_consistent_variant_refuses_the_trust_region(monkeypatch):
    """The class runs ``output_error`` with the hybrid solver unless told (``solver=None``), Gauss–Newton when
    told (a fit's ``FIT_OPTIONS``); the consistent variant takes no trust region (a one-line error)."""
    from jaxid.estimate import make_estimator
    from jaxid.estimate import nonlinear_estimators as ne

    seen = []

    def spy(logs, regressor, names, **kwargs):
        seen.append(kwargs["solver"])
        raise RuntimeError("stop")  # the call's arguments are what this test checks

    class Model:
        regressor, names, known = None, ("a",), None

    monkeypatch.setattr(ne, "output_error", spy)
    for options in ({}, {"solver": "gauss_newton"}):
        with pytest.raises(RuntimeError, match="stop"):
            make_estimator("output_error", options)._fit_logs([], Model, None, {"constraint": "none", **options})
    assert seen == ["hybrid", "gauss_newton"]
    with pytest.raises(ValueError, match="solver='trust_region' applies to constraint='none' only"):
        make_estimator("output_error_consistent", {"solver": "trust_region"})._fit_logs(
            [], Model, None, {"constraint": "consistent", "solver": "trust_region"}
        )
    with pytest.raises(ValueError, match="option 'solver'"):
        make_estimator("output_error", {"solver": "lm"})


def test_output_error_s_parameter_tolerance_reaches_gauss_newton_and_is_refused_elsewhere(monkeypatch):
    """``parameter_tolerance`` goes to ``output_error`` with Gauss–Newton (the fit's solver) and the hybrid (the
    estimator's default); with the trust region or the consistent variant, where no such rule runs, a changed
    value is a one-line error."""
    from jaxid.estimate import make_estimator
    from jaxid.estimate import nonlinear_estimators as ne

    seen = []

    def spy(logs, regressor, names, **kwargs):
        seen.append(kwargs.get("parameter_tolerance"))
        raise RuntimeError("stop")

    class Model:
        regressor, names, known = None, ("a",), None

    monkeypatch.setattr(ne, "output_error", spy)
    for solver in ("gauss_newton", None):  # None: the estimator's default, the hybrid
        options = {"solver": solver, "parameter_tolerance": 0.2}
        with pytest.raises(RuntimeError, match="stop"):
            make_estimator("output_error", options)._fit_logs([], Model, None, {"constraint": "none", **options})
    assert seen == [0.2, 0.2]
    with pytest.raises(ValueError, match="drop solver = 'trust_region' or parameter_tolerance"):
        make_estimator("output_error", {"parameter_tolerance": 0.2})._fit_logs(
            [], Model, None, {"constraint": "none", "solver": "trust_region", "parameter_tolerance": 0.2}
        )
    with pytest.raises(ValueError, match="the consistent variant stops on its own certificate"):
        make_estimator("output_error_consistent", {"parameter_tolerance": 0.2})._fit_logs(
            [], Model, None, {"constraint": "consistent", "parameter_tolerance": 0.2}
        )


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_output_error_s_parameter_tolerance_must_be_finite_and_non_negative(bad):
    from jaxid.estimate import make_estimator

    with pytest.raises(ValueError, match="'parameter_tolerance' must be a finite number ≥ 0"):
        make_estimator("output_error", {"parameter_tolerance": bad})
    assert make_estimator("output_error", {"parameter_tolerance": 0.0}).parameter_tolerance == 0.0
