"""The user's arm described in a parameter file or an [arm] table (jaxid.model.description): the lab's
YAML gives exactly the double_pendulum preset, I and J tables give the same arm, saved files load
back bit for bit, every bad description gets a one-line message naming the key, and an
experiment's [arm] table runs end to end through the CLI."""

import dataclasses
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from jaxid.config import load_experiment, parse_experiment
from jaxid.config.common import ConfigError
from jaxid.model import double_pendulum, point_mass, table1
from jaxid.model.arm_table import PRESETS, DescriptionWarning, arm_preset, describe_arm
from jaxid.model.description import arm_from_description, load_parameters, resolve_description, save_parameters
from jaxid.study import build_arm

ROOT = Path(__file__).parent.parent
LAB_YAML = ROOT / "data" / "double-pendulum" / "lab_model_parameters.yml"
OWN_ARM = ROOT / "experiments" / "own_arm.toml"
ARRAY_FIELDS = [f.name for f in dataclasses.fields(point_mass()) if f.name not in ("coulomb_slope", "active_terms")]


def assert_same_arm(a, b, atol=1e-15):
    """Every field of two arms equal (array fields to ``atol``, static fields exactly)."""
    for name in ARRAY_FIELDS:
        np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), rtol=0, atol=atol)
    assert a.coulomb_slope == b.coulomb_slope and a.active_terms == b.active_terms


def one_line_error(fn, *words, kind=ValueError):
    with pytest.raises(kind) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


#: A full description without a preset (the double pendulum's geometry, inertias about the joints).
LAB = yaml.safe_load(LAB_YAML.read_text())
EXPLICIT_I = {
    "m1": LAB["m1"],
    "m2": LAB["m2"],
    "l1": LAB["l1"],
    "l2": LAB["l2"],
    "r1": LAB["r1"],
    "r2": LAB["r2"],
    "I1": LAB["I1"],
    "I2": LAB["I2"],
    "fv1": LAB["b1"],
    "fv2": LAB["b2"],
    "fc1": LAB["cf1"] * math.pi / 2,
    "fc2": LAB["cf2"] * math.pi / 2,
    "Ir": LAB["Ir"],
    "gear_ratio": LAB["gr"],
}


# -- exact answers -----------------------------------------------------------------------------


def test_shipped_lab_yaml_gives_the_double_pendulum_preset():
    arm, preset = load_parameters(LAB_YAML), double_pendulum()
    assert_same_arm(arm, preset)
    for name in ARRAY_FIELDS:  # the same arithmetic: bit for bit
        assert np.array_equal(np.asarray(getattr(arm, name)), np.asarray(getattr(preset, name))), name
    np.testing.assert_array_equal(np.asarray(arm.standard_parameters()), np.asarray(preset.standard_parameters()))
    assert arm.active_terms == ("coulomb", "rotor") and arm.coulomb_slope == 100.0


def test_presets_and_the_one_loader():
    assert list(PRESETS) == ["point_mass", "table1", "double_pendulum"]
    for name, make in (("point_mass", point_mass), ("table1", table1), ("double_pendulum", double_pendulum)):
        assert_same_arm(arm_preset(name), make(), atol=0)
        assert_same_arm(arm_from_description({"preset": name}), make(), atol=0)
        assert_same_arm(arm_from_description(describe_arm(make())), make(), atol=0)
    one_line_error(lambda: arm_preset("pointmass"), "'pointmass'", "point_mass", "table1", "double_pendulum")


def test_inertias_about_the_joint_or_the_centre_of_mass_give_the_same_arm():
    by_i = arm_from_description(EXPLICIT_I)
    j = {k: v for k, v in EXPLICIT_I.items() if k not in ("I1", "I2")}
    j["J1"] = LAB["I1"] - LAB["m1"] * LAB["r1"] ** 2
    j["J2"] = LAB["I2"] - LAB["m2"] * LAB["r2"] ** 2
    assert_same_arm(by_i, arm_from_description(j), atol=0)
    assert_same_arm(by_i, double_pendulum(), atol=0)
    # defaults of a table without a preset: g = 9.81, slope 100, no offsets
    assert float(by_i.gravity) == 9.81 and by_i.coulomb_slope == 100.0
    np.testing.assert_array_equal(np.asarray(by_i.torque_offset), 0.0)


def test_overrides_on_a_preset_keep_j_or_set_i():
    base = double_pendulum()
    arm = arm_from_description({"preset": "double_pendulum", "l1": 0.3, "r1": 0.3, "fv1": 0.1})
    assert float(arm.lengths[0]) == 0.3 and float(arm.com[0]) == 0.3 and float(arm.friction[0]) == 0.1
    assert float(arm.inertias[0]) == float(base.inertias[0])  # J1 about the centre of mass kept
    arm = arm_from_description({"preset": "double_pendulum", "r1": 0.3, "I1": 0.1})
    assert float(arm.inertias[0]) == 0.1 - float(base.masses[0]) * 0.3**2


def test_a_toml_parameter_file_and_its_parameters_file_relative_to_it(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "arm.yml").write_text(LAB_YAML.read_text())
    (tmp_path / "mine.toml").write_text('[arm]\nparameters = "lab/arm.yml"\nl1 = 0.3\nr1 = 0.3\n')
    expected = arm_from_description({"preset": "double_pendulum", "l1": 0.3, "r1": 0.3})
    assert_same_arm(load_parameters(tmp_path / "mine.toml"), expected, atol=0)
    assert_same_arm(arm_from_description({"parameters": "mine.toml"}, base_dir=tmp_path), expected, atol=0)


# -- round trips -------------------------------------------------------------------------------


def _offset_arm():
    return double_pendulum().replace(torque_offset=(0.0123456789012345, -0.3), coulomb_slope=50.0, m2=0.7)


@pytest.mark.parametrize(
    "which, suffix",
    [(w, s) for w in ("double_pendulum", "point_mass") for s in (".toml", ".yml", ".yaml")]
    + [("offsets", ".toml"), ("zero_term", ".toml"), ("lab_offsets", ".yml")],  # see the refusals below
)
def test_saved_parameters_load_back(tmp_path, which, suffix):
    arm = {
        "double_pendulum": double_pendulum(),
        "point_mass": point_mass(),
        "offsets": _offset_arm(),
        "lab_offsets": double_pendulum().replace(torque_offset=(0.0123456789012345, -0.3)),
        "zero_term": table1().replace(rotor_inertia=1e-5, gear_ratio=9.0, active_terms=("coulomb",)),
    }[which]
    path = save_parameters(tmp_path / f"arm{suffix}", arm, notes="first line\nsecond line")
    assert path == tmp_path / f"arm{suffix}"
    text = path.read_text()
    assert text.startswith("# ") and "# first line\n# second line\n" in text
    back = load_parameters(path)
    assert_same_arm(back, arm)
    if suffix == ".toml":  # repr floats: bit for bit
        assert describe_arm(back) == describe_arm(arm)


def test_lab_yaml_refuses_what_it_cannot_hold_and_drops_zero_terms(tmp_path):
    one_line_error(
        lambda: save_parameters(tmp_path / "a.yml", _offset_arm()),
        "a.yml",
        "Coulomb slope of 50",
        ".toml",
    )
    assert not (tmp_path / "a.yml").exists()
    zero = point_mass().replace(active_terms=("offset",))
    assert load_parameters(save_parameters(tmp_path / "b.yml", zero)).active_terms == ()
    # small numbers are written so that YAML 1.1 reads them as numbers, not text
    tiny = point_mass().replace(rotor_inertia=1e-5, J1=1e-20)
    assert "Ir: 1.0e-05" in save_parameters(tmp_path / "c.yml", tiny).read_text()
    assert_same_arm(load_parameters(tmp_path / "c.yml"), tiny)
    one_line_error(lambda: save_parameters(tmp_path / "d.json", tiny), "d.json", ".toml")


# -- errors ------------------------------------------------------------------------------------

DP = {"preset": "double_pendulum"}


@pytest.mark.parametrize(
    "table, words",
    [
        ({**DP, "m_1": 1.0}, ["arm.m_1", "unknown key", "Did you mean 'm1'?"]),
        ({**DP, "gr": 6.0}, ["arm.gr", "gear_ratio"]),
        ({**DP, "cf1": 0.1}, ["arm.cf1", "fc1 = cf1 π/2"]),
        ({"m1": 1.0, "m2": 1.0}, ["arm is missing", "l1", "J1 or I1", "preset"]),
        ({**DP, "parameters": "x.yml"}, ["both preset and parameters"]),
        ({"preset": "pendulum"}, ["arm.preset", "'pendulum'", "double_pendulum"]),
        ({**DP, "m1": "heavy"}, ["arm.m1 must be a number in kg", "'heavy'"]),
        ({**DP, "l2": math.inf}, ["arm.l2", "not finite"]),
        ({**DP, "m1": 0.0}, ["arm.m1 = 0 must be > 0 [kg]"]),
        ({**DP, "l1": -0.2}, ["arm.l1", "> 0 [m]"]),
        ({**DP, "gear_ratio": 0}, ["arm.gear_ratio", "> 0"]),
        ({**DP, "coulomb_slope": 0}, ["arm.coulomb_slope", "> 0 [s/rad]"]),
        ({**DP, "r2": -0.1}, ["arm.r2", ">= 0 [m]"]),
        ({**DP, "fv1": -1.0}, ["arm.fv1", ">= 0 [N m s/rad]"]),
        ({**DP, "fc2": -0.1}, ["arm.fc2", ">= 0 [N m]"]),
        ({**DP, "Ir": -1e-4}, ["arm.Ir", ">= 0 [kg m²]"]),
        ({**DP, "g": -9.81}, ["arm.g", ">= 0"]),
        ({**DP, "l1": 300.0}, ["arm.l1 = 300 m", "10 m", "lengths are in metres"]),
        ({**DP, "r2": 32.0}, ["arm.r2", "lengths are in metres"]),
        ({**DP, "m2": 1500.0}, ["arm.m2 = 1500 kg", "1000 kg", "masses are in kg"]),
        ({**DP, "I1": -0.01}, ["arm.I1", ">= 0"]),
        ({**DP, "J2": -0.1}, ["arm.J2 = -0.1", "about the centre of mass"]),
        ({**DP, "J1": 0.001, "I1": 0.03}, ["both J1", "and I1", "link 1"]),
        ({**DP, "terms": ["rotor"]}, ["arm.fc1", "non-zero", "'coulomb' is not in arm.terms", "fc1 = 0 and fc2 = 0"]),
        ({**DP, "terms": ["rotr"]}, ["arm.terms", "'rotr'", "Did you mean 'rotor'?"]),
        ({**DP, "terms": ["rotor", "rotor"]}, ["arm.terms", "twice"]),
        ({**DP, "terms": "coulomb, rotor"}, ["arm.terms", "'coulomb, rotor'"]),
        ({**DP, "angles": "upward_vertical"}, ["arm.angles", "downward vertical", "q1 + π", "q2 − q1"]),
        ({"parameters": "nowhere.yml"}, ["nowhere.yml", "no such parameter file"]),
        ({"parameters": "arm.json"}, ["arm.json", "unknown parameter file format", ".toml"]),
    ],
)
def test_bad_tables_get_one_line_messages(table, words):
    one_line_error(lambda: arm_from_description(table), *words)


@pytest.mark.parametrize(
    "table, words",
    [
        ({**DP, "I2": 0.01}, ["arm.I2 = 0.01", "below m2 r2² = 0.0582", "about the centre of mass?", "J2"]),
        ({**DP, "J2": -0.03}, ["arm.J2 = -0.03", "about the centre of mass"]),
        ({**DP, "m2": 0.05}, ["arm.J2", "from the preset 'double_pendulum'", "m2 = 0.05"]),
    ],
)
def test_inertias_beyond_the_allowance_are_read_with_a_warning(table, words):
    """Below −¼ m r² about the centre of mass but J + m r² >= 0: a fitted set, read as given."""
    with pytest.warns(DescriptionWarning) as record:
        arm = arm_from_description(table)
    message = str(record[0].message)
    assert "\n" not in message and "Read as given" in message, message
    for word in words:
        assert word in message, (word, message)
    j = float(arm.inertias[1])
    assert j < -0.25 * float(arm.masses[1] * arm.com[1] ** 2) and j + float(arm.masses[1] * arm.com[1] ** 2) >= 0


def test_saving_a_set_beyond_the_allowance_warns_and_writes(tmp_path):
    """A fitted set read with a warning is saved with the same warning, and the file is written (the
    warning does not say "not written"); it loads back to the same arm."""
    with pytest.warns(DescriptionWarning):
        arm = arm_from_description({**DP, "J2": -0.03})
    path = tmp_path / "fitted.toml"
    with pytest.warns(DescriptionWarning) as record:
        save_parameters(path, arm)
    message = str(record[0].message)
    assert str(path) in message and "not written" not in message, message
    with pytest.warns(DescriptionWarning):
        assert_same_arm(load_parameters(path), arm)


def test_terms_say_which_optional_terms_exist():
    assert arm_from_description(DP).active_terms == ("coulomb", "rotor")  # the non-zero ones
    # a term listed is active even at zero (estimated in a fit)
    arm = arm_from_description({"preset": "point_mass", "terms": ["offset", "coulomb"]})
    assert arm.active_terms == ("coulomb", "offset") and float(arm.coulomb[0]) == 0.0
    # zeroing a preset's term drops it; listing the terms says so explicitly
    assert arm_from_description({**DP, "fc1": 0, "fc2": 0}).active_terms == ("rotor",)
    assert arm_from_description({**DP, "fc1": 0, "fc2": 0, "terms": ["rotor"]}).active_terms == ("rotor",)
    one_line_error(lambda: arm_from_description({**DP, "fc1": 0, "fc2": 0, "terms": []}), "arm.Ir", "'rotor'")
    # a non-zero value switches its term on without a terms list
    assert arm_from_description({"preset": "point_mass", "off2": 0.1}).active_terms == ("offset",)
    assert resolve_description({"preset": "point_mass"})["terms"] == []


@pytest.mark.parametrize(
    "text, words",
    [
        ("- 1\n- 2\n", ["flat YAML mapping", "list"]),
        ("m1: 0.6\nm_2: 0.5\n", ["unknown key 'm_2'", "Did you mean 'm2'?"]),
        ("m1: 0.6\n", ["missing m2", "l1", "gr"]),
        ("m1: [\n", ["not valid YAML"]),
    ],
)
def test_bad_lab_yaml_files(tmp_path, text, words):
    path = tmp_path / "bad.yml"
    path.write_text(text)
    one_line_error(lambda: load_parameters(path), "bad.yml", *words)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("m1", "heavy", ["bad.yml: m1 must be a number in kg", "'heavy'"]),
        ("m2", "[1, 2]", ["bad.yml: m2 must be a number", "flat"]),
        ("b2", -0.001, ["bad.yml: b2", ">= 0"]),
        ("cf1", ".nan", ["bad.yml: cf1", "not finite"]),
        ("gr", 0, ["bad.yml: gr", "> 0"]),
        ("l2", 300, ["bad.yml: l2 = 300 m", "metres"]),
        ("m1", 641.6937799349799e3, ["bad.yml: m1", "masses are in kg"]),
    ],
)
def test_bad_values_in_a_lab_yaml_name_the_file_and_the_key(tmp_path, key, value, words):
    lines = [line for line in LAB_YAML.read_text().splitlines() if not line.startswith(f"{key}:")]
    path = tmp_path / "bad.yml"
    path.write_text("\n".join([*lines, f"{key}: {value}"]) + "\n")
    one_line_error(lambda: load_parameters(path), *words)


def test_lab_yaml_torque_limits_are_ignored_and_exponents_read(tmp_path):
    lines = [line for line in LAB_YAML.read_text().splitlines() if not line.startswith(("tl", "Ir"))]
    path = tmp_path / "arm.yaml"
    path.write_text("\n".join([*lines, "Ir: 9.937281205437459e-05"]) + "\n")
    assert_same_arm(load_parameters(path), double_pendulum(), atol=0)
    path.write_text("\n".join([*lines, "Ir: 1e-4"]) + "\n")  # YAML 1.1 reads this as text
    assert float(load_parameters(path).rotor_inertia) == 1e-4


def test_bad_parameter_files(tmp_path):
    one_line_error(lambda: load_parameters(tmp_path / "none.yml"), "none.yml", "no such parameter file")
    one_line_error(lambda: load_parameters(tmp_path / "arm.txt"), "arm.txt", ".yml/.yaml", ".toml")
    (tmp_path / "two.toml").write_text("[arm]\npreset = 'table1'\n[experiment]\nname = 'x'\n")
    one_line_error(lambda: load_parameters(tmp_path / "two.toml"), "two.toml", "one [arm] table", "[experiment]")
    (tmp_path / "typo.toml").write_text("[arm]\npreset = 'table1'\nmass1 = 2.0\n")
    one_line_error(lambda: load_parameters(tmp_path / "typo.toml"), "typo.toml: arm.mass1", "unknown key")
    (tmp_path / "bad.toml").write_text("[arm\n")
    one_line_error(lambda: load_parameters(tmp_path / "bad.toml"), "bad.toml", "not valid TOML")
    (tmp_path / "loop.toml").write_text('[arm]\nparameters = "loop.toml"\n')
    one_line_error(lambda: load_parameters(tmp_path / "loop.toml"), "loop.toml", "loop")
    (tmp_path / "dir.yml").mkdir()
    one_line_error(lambda: load_parameters(tmp_path / "dir.yml"), "dir.yml", "no such parameter file")


def test_describe_and_save_refuse_a_batch(tmp_path):
    import jax

    batch = jax.tree.map(lambda x: np.stack([x, x]), point_mass())
    one_line_error(lambda: describe_arm(batch), "batched")
    one_line_error(lambda: save_parameters(tmp_path / "a.toml", batch), "batched")
    with pytest.raises(ValueError, match="concrete arm") as info:
        jax.jit(lambda a: describe_arm(a) and 0)(point_mass())
    assert "\n" not in str(info.value)


# -- the [arm] table of an experiment ----------------------------------------------------------


def experiment(arm=None, source=None, **setting):
    raw = {
        "experiment": {"name": "t", "trials": 2},
        "settings": {"a": {"estimators": ["equation_error"], **setting}},
    }
    if arm is not None:
        raw["arm"] = arm
    return parse_experiment(raw, source=source, base_dir=ROOT / "experiments")


def test_an_experiments_arm_table_is_the_nominal_of_its_settings():
    table = {"preset": "double_pendulum", "l1": 0.3, "fv1": 0.1, "fv2": 0.05, "fc1": 0.0, "fc2": 0.0}
    exp = experiment(table)
    s = exp.setting("a")
    assert s["model"] == "arm" and s.arm == exp.arm == resolve_description(table)
    assert_same_arm(build_arm(s), arm_from_description(table), atol=0)
    assert exp.resolved()["arm"] == exp.arm and exp.select(["a"], trials=3).settings[0].arm == exp.arm
    # overrides still apply on top of the described arm
    s = experiment(table, parameters={"m2": 0.7}).setting("a")
    assert_same_arm(build_arm(s), arm_from_description({**table, "m2": 0.7}), atol=0)
    # a preset setting in an experiment with an [arm] table ignores it
    s = experiment(table, model="point_mass").setting("a")
    assert s.arm is None and s["model"] == "point_mass"
    assert_same_arm(build_arm(s), point_mass(), atol=0)
    # the arm is part of the setting's digest (a resumed run of another arm is refused)
    assert experiment(table).setting("a").digest() != experiment({**table, "l1": 0.25}).setting("a").digest()
    assert experiment().setting("a").digest() == experiment(table, model="point_mass").setting("a").digest()
    # the resolved config reads back as the same arm (jaxid report re-reads config.json)
    again = parse_experiment(json.loads(json.dumps(exp.resolved())))
    assert again.arm == exp.arm and again.setting("a").arm == exp.arm


def test_arm_table_errors_fail_when_the_experiment_is_read(tmp_path):
    one_line_error(lambda: experiment(model="arm"), 'settings.a.model = "arm"', "[arm] table", "point_mass")
    one_line_error(lambda: experiment({"preset": "table1", "m_2": 1.0}, source="x.toml"), "x.toml: arm.m_2", "m2")
    one_line_error(lambda: experiment({"preset": "table1", "m2": -1.0}), "arm.m2", "> 0", kind=ConfigError)
    one_line_error(lambda: experiment("double_pendulum"), "arm must be a table", kind=ConfigError)
    raw = {"experiment": {"name": "t"}, "amr": {}, "settings": {"a": {}}}
    one_line_error(lambda: parse_experiment(raw), "[amr]", "[arm]", "Did you mean 'arm'?")
    path = tmp_path / "e.toml"
    path.write_text(OWN_ARM.read_text().replace("l1 = 0.3", "ll1 = 0.3"))
    one_line_error(lambda: load_experiment(path), "e.toml: arm.ll1", "Did you mean 'l1'?", kind=ConfigError)
    # the lab's file is found relative to the experiment file
    path.write_text(OWN_ARM.read_text())
    one_line_error(lambda: load_experiment(path), "lab_model_parameters.yml", "no such parameter file")


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_own_arm_experiment_runs_end_to_end_and_records_its_arm(tmp_path, capsys):
    from test_study import check_smoke_run

    from jaxid.cli import main

    out = tmp_path / "own_arm"
    assert main(["run", str(OWN_ARM), "--settings", "smoke", "--out", str(out), "--quiet"]) == 0
    assert f"Results in {out}" in capsys.readouterr().out
    exp = load_experiment(OWN_ARM)
    check_smoke_run(out, exp)
    described = arm_from_description(tomllib.loads(OWN_ARM.read_text())["arm"], base_dir=OWN_ARM.parent)
    assert float(described.lengths[0]) == 0.3 and described.active_terms == ("rotor",)
    config = json.loads((out / "config.json").read_text())
    assert config["settings"]["smoke"]["model"] == "arm"
    assert_same_arm(arm_from_description(config["arm"]), described, atol=0)
    trials = pd.read_parquet(out / "trials.parquet")
    for name, truth in trials.groupby("parameter").truth:
        assert (truth == float(described.get(name))).all(), name
