"""Experiment configs: every shipped file parses; bad keys and values get messages that say what to change."""

from pathlib import Path

import numpy as np
import pytest

from jaxid.config import load_experiment, parse_experiment
from jaxid.config.common import ConfigError
from jaxid.experiment import load_config

EXPERIMENTS = sorted((Path(__file__).parent.parent / "experiments").glob("*.toml"))


def base(**setting):
    return {"experiment": {"name": "t", "trials": 2}, "settings": {"a": {"estimators": ["equation_error"], **setting}}}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_shipped_experiments_parse_and_have_smoke(path):
    exp = load_config(path)  # a study or a benchmark (kind = "benchmark")
    names = [s.name for s in exp.settings]
    assert "smoke" in names, f"{path.name} needs a smoke setting for CI"
    assert exp.setting("smoke").trials <= 5


def test_defaults_and_override_resolution():
    raw = {
        "experiment": {"name": "t", "trials": 7, "seed": 3},
        "defaults": {"scale": 0.5, "estimators": ["equation_error"]},
        "settings": {"a": {}, "b": {"scale": 2.0, "trials": 3}},
    }
    exp = parse_experiment(raw)
    assert exp.setting("a")["scale"] == 0.5 and exp.setting("a").trials == 7
    assert exp.setting("b")["scale"] == 2.0 and exp.setting("b").trials == 3
    assert exp.setting("a")["noise"] == "uniform"  # package default
    assert exp.select(["b"], trials=4).settings[0].trials == 4


@pytest.mark.parametrize(
    "setting, words",
    [
        ({"scal": 1.0}, ["unknown key 'scal'", "Did you mean 'scale'"]),
        ({"lines": "splt"}, ["lines", "'split'"]),
        ({"estimators": ["equation_eror"]}, ["unknown estimator", "equation_error"]),
        ({"unknowns": ["m3"]}, ["unknowns", "m1"]),
        ({"noise": "pink"}, ["noise", "gaussian"]),
        ({"measured_periods": 0}, ["measured_periods", "positive integer"]),
        ({"discard_periods": -1}, ["discard_periods"]),
        ({"parameters": {"mass1": 2.0}}, ["unknown parameter 'mass1'"]),
        ({"sample": {"m2": {"dist": "uniform"}}}, ["width"]),
        ({"scale": "big"}, ["scale must be a finite number"]),
        ({"estimator_options": {"equation_error": {"wieghting": "none"}}}, ["no option 'wieghting'", "'weighting'"]),
        ({"estimator_options": {"equation_error": {"noise_std": 0.1}}}, ["set by the study"]),
        ({"estimator_options": {"equation_error": 3}}, ["must be a table of options"]),
    ],
)
def test_bad_values_have_clear_messages(setting, words):
    with pytest.raises(ConfigError) as err:
        parse_experiment(base(**setting))
    for w in words:
        assert w in str(err.value)
    assert "\n" not in str(err.value)  # one line


def test_bad_top_level_and_experiment_keys():
    with pytest.raises(ConfigError, match="Did you mean 'settings'"):
        parse_experiment({"setings": {}})
    with pytest.raises(ConfigError, match="experiment.sed"):
        parse_experiment({"experiment": {"sed": 1}, "settings": {"a": {}}})
    with pytest.raises(ConfigError, match="no settings"):
        parse_experiment({"experiment": {"name": "x"}})


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_experiment(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment\nname=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(bad)


# The paper (Tables 1-2, Section 4): Table 2's harmonics of f0 = 0.01 Hz and their amplitudes, the
# same torque on both joints, the link masses unknown, noise d = 0.1*rand() added to the angles.
PAPER_HARMONICS = (3, 5, 7, 9, 11, 13, 17, 21, 27, 42)
PAPER_AMPLITUDES = (0.2, 1.5, 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.4, 2.0)


def test_paper_toml_is_the_papers_experiment():
    from jaxid.study.sampling import build_arm, build_excitation

    exp = load_experiment(Path(__file__).parent.parent / "experiments" / "paper.toml")
    same = exp.setting("paper_same")
    assert same["lines"] == "same" and same["scale"] == 1.0 and same["phases"] == "zero"
    assert list(same["unknowns"]) == ["m1", "m2"]
    assert same["noise"] == "uniform" and same["noise_level"] == 0.1
    assert list(same["q0"]) == [0.0, 0.0]
    assert "paper" in same["estimators"]
    # Table 1's point-mass arm (r_i = l_i, J_i = 0): m = (5, 1.5) kg, l = (1, 0.8) m.
    arm = build_arm(same)
    np.testing.assert_array_equal(arm.masses, [5.0, 1.5])
    np.testing.assert_array_equal(arm.lengths, [1.0, 0.8])
    np.testing.assert_array_equal(arm.com, [1.0, 0.8])
    np.testing.assert_array_equal(arm.inertias, [0.0, 0.0])
    # The torque on each joint is Σ d_i cos(k_i ω0 t), ω0 = 2π 0.01 rad/s, written out here.
    ex = build_excitation(same, exp.seed)
    assert ex.harmonics == (PAPER_HARMONICS, PAPER_HARMONICS)
    assert ex.period == pytest.approx(100.0, rel=1e-12)
    t = np.linspace(0.0, 100.0, 997)
    tau = sum(d * np.cos(k * 2 * np.pi * 0.01 * t) for k, d in zip(PAPER_HARMONICS, PAPER_AMPLITUDES, strict=True))
    np.testing.assert_allclose(ex.torque(t), np.stack([tau, tau], -1), rtol=0, atol=1e-12)
    # The other full-size settings keep the paper's amplitudes, unknowns and noise.
    for name in ("paper_split",):
        s = exp.setting(name)
        assert s["scale"] == 1.0 and list(s["unknowns"]) == ["m1", "m2"]
        assert s["noise"] == "uniform" and s["noise_level"] == 0.1
