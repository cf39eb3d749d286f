"""Every bad input is a one-line error naming the key and what to change, before anything is written.

CLI cases call ``jaxid.cli.main`` in-process on a small config (cwd and ``--out`` in a temporary
directory): each must return 2 (or exit 2 from argparse), print one line on stderr that names the
key and the fix, print no traceback, and leave the directory tree exactly as it was. Two cases
run ``python -m jaxid`` as a real subprocess to show the same end to end. Library cases must raise
``ValueError``/``TypeError`` whose message names the key. None of them simulates or compiles.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from _typecheck import package_errors

import jaxid
from jaxid.cli import main
from jaxid.config import parse_experiment
from jaxid.config.fit import parse_fit_config
from jaxid.study.validate import validate_experiment

ROOT = Path(__file__).resolve().parent.parent

BASE = """[experiment]
name = "bad"
{experiment}
[defaults]
trials = 2
unknowns = ["m1", "m2"]
lines = "split"
estimators = ["equation_error"]
sample_step = 0.05
discard_periods = 2
[settings.a]
{setting}
"""

# (id, extra [settings.a] lines, extra [experiment] lines, extra argv, regex the message must match)
CLI_CASES = [
    (
        "negative mass",
        "parameters = {m1 = -1.0}",
        "",
        [],
        r"settings\.a\.parameters\.m1 = -1\.0: .*must be positive \(SI units\) \(m1\)",
    ),
    (
        "nan mass",
        "parameters = {m2 = nan}",
        "",
        [],
        r"parameters\.m2 = nan: .*contains NaN or inf \(m2\).*give finite values",
    ),
    ("infinite length", "parameters = {l1 = inf}", "", [], r"parameters\.l1 = inf: .*contains NaN or inf \(l1\)"),
    (
        "negative friction",
        "parameters = {fv1 = -1.0}",
        "",
        [],
        r"parameters\.fv1 = -1\.0: .*must be non-negative \(SI units\) \(fv1\)",
    ),
    (
        "zero length",
        "parameters = {l2 = 0.0}",
        "",
        [],
        r"parameters\.l2 = 0\.0: .*must be positive \(SI units\) \(l2\)",
    ),
    (
        "inertia about joint",
        "parameters = {J2 = -10.0}",
        "",
        [],
        r"parameters\.J2 = -10\.0: .*raise J2 so that J2 \+ m2 r2² >= 0",
    ),
    ("number as string", 'parameters = {m1 = "5"}', "", [], r"parameters\.m1 must be a number"),
    (
        "uniform too wide",
        'sample = {m1 = {dist = "uniform", width = 1.5}}',
        "",
        [],
        r"sample\.m1: uniform with width = 1\.5 .*choose width < 1\b",
    ),
    (
        "normal negative std",
        'sample = {m1 = {dist = "normal", std = -0.1}}',
        "",
        [],
        r"sample\.m1\.std must be a positive",
    ),
    (
        "normal zero std",
        'sample = {m2 = {dist = "normal", std = 0.0}}',
        "",
        [],
        r"sample\.m2\.std must be a positive.*fixed",
    ),
    (
        "normal reaches zero",
        'sample = {m1 = {dist = "normal", std = 0.5}}',
        "",
        [],
        r"sample\.m1: normal with std = 0\.5 reaches m1 = -10 \(nominal 5\).*choose std < 0\.166 \(draws reach mean ± 6 std\), or a uniform width < 1\.",
    ),
    (
        "sample of zero nominal",
        'sample = {fc1 = {dist = "uniform", width = 0.1}}',
        "",
        [],
        r"sample\.fc1: the nominal fc1 is 0.*set parameters\.fc1",
    ),
    (
        "sample missing width",
        'sample = {m1 = {dist = "uniform"}}',
        "",
        [],
        r"sample\.m1: dist = 'uniform' takes exactly \['width'\]",
    ),
    (
        "unknown estimator option",
        "estimator_options = {equation_error = {bogus = 1}}",
        "",
        [],
        r"estimator_options\.equation_error: .*no option 'bogus'; its options: method, weighting",
    ),
    (
        "estimator option typo",
        'estimator_options = {equation_error = {weighing = "pooled"}}',
        "",
        [],
        r"no option 'weighing'.*Did you mean 'weighting'\?",
    ),
    (
        "estimator option value",
        'estimator_options = {equation_error = {weighting = "pooled_"}}',
        "",
        [],
        r"option 'weighting'.*Did you mean 'pooled'\?",
    ),
    (
        "step does not divide period",
        "sample_step = 0.03",
        "",
        [],
        r"sample_step: The step 0\.03 s does not divide the period 100 s .*N = 3333",
    ),
    (
        "nyquist",
        "sample_step = 2.5",
        "",
        [],
        r"sample_step = 2\.5 s gives 40 samples .*k = 43 \(0\.43 Hz\).*Nyquist frequency 0\.2 Hz; choose sample_step < 1\.163 s",
    ),
    ("empty estimators", "estimators = []", "", [], r"estimators is empty; choose some of"),
    ("empty unknowns", "unknowns = []", "", [], r"unknowns: The set of unknowns is empty"),
    (
        "unknown estimator",
        'estimators = ["equation_eror"]',
        "",
        [],
        r"unknown estimator 'equation_eror'.*Did you mean 'equation_error'\?",
    ),
    ("unknown preset", 'model = "tabel1"', "", [], r"model = 'tabel1' is not allowed.*Did you mean 'table1'\?"),
    ("config key typo", "noise_levle = 0.1", "", [], r"unknown key 'noise_levle'.*Did you mean 'noise_level'\?"),
    ("experiment key typo", "", "trails = 3", [], r"unknown key experiment\.trails.*Did you mean 'trials'\?"),
    ("experiment trials zero", "", "trials = 0", [], r"experiment\.trials must be a positive integer, got 0"),
    ("experiment chunk negative", "", "chunk = -4", [], r"experiment\.chunk must be a positive integer, got -4"),
    ("experiment trials float", "", "trials = 2.5", [], r"experiment\.trials must be an integer, got 2\.5"),
    ("setting trials zero", "trials = 0", "", [], r"settings\.a\.trials must be a positive integer, got 0"),
    ("non-integer periods", "measured_periods = 1.5", "", [], r"measured_periods must be a positive integer, got 1\.5"),
    (
        "non-integer discard",
        "discard_periods = 2.5",
        "",
        [],
        r'discard_periods must be "auto" or a non-negative integer',
    ),
    ("q0 wrong length", "q0 = [0.0]", "", [], r"q0 must be a list of two finite angles"),
    ("q0 nan", "q0 = [nan, 0.0]", "", [], r"q0 must be a list of two finite angles"),
    (
        "zero noise where weighted",
        'estimators = ["ml", "ekf"]\nnoise_level = 0.0',
        "",
        [],
        r"noise_level = 0, but \['ekf'\] use σ² as their measurement covariance.*noise_level > 0",
    ),
    (
        "absurd noise",
        "noise_level = 1e6",
        "",
        [],
        r"noise_level = 1e\+06 .*more than half a turn.*choose noise_level <= 10\.9",
    ),
    ("negative noise", "noise_level = -0.1", "", [], r"noise_level must be >= 0"),
    ("zero scale", "scale = 0.0", "", [], r"scale must be > 0"),
    (
        "unknown plot",
        "",
        'plots = ["rmse_vs_nois"]',
        [],
        r"unknown plot 'rmse_vs_nois'.*Did you mean 'rmse_vs_noise'\?",
    ),
    (
        "paper on shared lines",
        'estimators = ["paper"]\nlines = "same"',
        "",
        [],
        r"lines = \"same\".*allow_shared_lines = true",
    ),
    ("trials flag negative", "", "", ["--trials", "-3"], r"--trials must be a positive integer, got -3"),
    ("trials flag zero", "", "", ["--trials", "0"], r"--trials must be a positive integer, got 0"),
    (
        "coordinator alone",
        "",
        "",
        ["--coordinator", "localhost:1234"],
        r"--coordinator, --num-processes and --process-id go together",
    ),
    (
        "process id out of range",
        "",
        "",
        ["--coordinator", "h:1", "--num-processes", "2", "--process-id", "2"],
        r"--process-id must be in 0 \.\. 1",
    ),
    ("devices zero", "", "", ["--devices", "0"], r"--devices must be a positive integer"),
    ("unknown setting", "", "", ["--settings", "b"], r"No setting 'b'"),
    ("full without full_trials", "", "", ["--full"], r"no experiment\.full_trials; give --trials N"),
]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _run_cli(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err
    assert _tree(tmp_path) == before, "the command left files behind"
    return code, err


@pytest.mark.parametrize("setting,experiment,argv,pattern", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input(tmp_path, monkeypatch, capsys, setting, experiment, argv, pattern):
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(setting=setting, experiment=experiment))
    # No --out: the default results/<experiment>/<run> under the temporary cwd must not appear either.
    code, err = _run_cli(tmp_path, monkeypatch, capsys, ["run", str(path), "--quiet", "--devices", "1", *argv])
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("jaxid run: error: ")
    assert _search(pattern, lines[0])


def _search(pattern, text):
    import re

    assert re.search(pattern, text), f"{pattern!r} not in {text!r}"
    return True


def test_cli_missing_config(tmp_path, monkeypatch, capsys):
    code, err = _run_cli(tmp_path, monkeypatch, capsys, ["run", "no_such_experiment", "--quiet", "--devices", "1"])
    assert code == 2 and "does not exist" in err and "jaxid list" in err and "Traceback" not in err


def test_the_base_config_is_valid():
    """The CLI cases fail because of their one change, not because the base config is wrong."""
    import tomllib

    exp = parse_experiment(tomllib.loads(BASE.format(setting="", experiment="")))
    validate_experiment(exp)
    # And the largest legal widths the messages quote are the arm's own boundary.
    for dist, width, ok in (
        ("uniform", 0.999, True),
        ("uniform", 1.0, False),
        ("normal", 0.1666, True),
        ("normal", 0.1667, False),
    ):
        word = "width" if dist == "uniform" else "std"
        raw = tomllib.loads(
            BASE.format(setting=f'sample = {{m1 = {{dist = "{dist}", {word} = {width}}}}}', experiment="")
        )
        if ok:
            validate_experiment(parse_experiment(raw))
        else:
            with pytest.raises(ValueError, match="width < 1" if dist == "uniform" else "std < 0.166"):
                validate_experiment(parse_experiment(raw))


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
@pytest.mark.parametrize(
    "setting,pattern",
    [
        ("parameters = {m1 = -1.0}", r"parameters\.m1 = -1\.0"),
        ("estimator_options = {ml = {strat = 1}}", r"no option 'strat'.*Did you mean 'start'\?"),
    ],
    ids=["negative mass", "estimator option typo"],
)
def test_cli_subprocess_has_no_traceback(tmp_path, setting, pattern):
    """End to end through ``python -m jaxid``: exit status 2, one line, no traceback, no files."""
    path = tmp_path / "bad.toml"
    path.write_text(
        BASE.format(setting=setting.replace("equation_error", "ml"), experiment="").replace(
            'estimators = ["equation_error"]', 'estimators = ["ml"]'
        )
    )
    before = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "jaxid", "run", str(path), "--quiet", "--devices", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and _search(pattern, lines[0])
    assert _tree(tmp_path) == before


# -- library ---------------------------------------------------------------------------------------


def _log(n=50, step=0.01, **changes):
    t = 1.0 + step * np.arange(n)
    fields = dict(t=jnp.asarray(t), q=jnp.zeros((n, 2)), tau=jnp.ones((n, 2)), qd=None)
    fields.update(changes)
    return jaxid.MeasuredLog(**fields, source="log.csv", sample_step=step, columns=("a", "b", "c", "d"), raw_samples=n)


def _record(m=40, step=0.5, **changes):
    fields = dict(t=step * jnp.arange(m), tau=jnp.zeros((m, 2)), q=jnp.zeros((m, 2)))
    fields.update(changes)
    return jaxid.Record(
        **fields,
        status=jnp.int32(0),
        steady_change=jnp.zeros(()),
        sample_step=step,
        period=m * step,
        measured_periods=1,
    )


def _nan_at(shape, index):
    x = np.zeros(shape)
    x[index] = np.nan
    return jnp.asarray(x)


def _fit_raw(**sections):
    raw = {"fit": {"name": "f"}, "split": {"train": ["a"]}}
    for section, table in sections.items():
        raw.setdefault(section, {}).update(table)
    return raw


LIBRARY_CASES = [
    (
        "replace negative m1",
        lambda arm: arm.replace(m1=-1.0),
        ValueError,
        r"masses must be positive \(SI units\) \(m1\)",
    ),
    ("replace nan m2", lambda arm: arm.replace(m2=math.nan), ValueError, r"masses contains NaN or inf \(m2\)"),
    (
        "with_parameters negative fv2",
        lambda arm: arm.with_parameters(("fv2",), jnp.asarray([-0.5])),
        ValueError,
        r"friction must be non-negative \(SI units\) \(fv2\)",
    ),
    (
        "with_parameters inf l1",
        lambda arm: arm.with_parameters(("l1",), jnp.asarray([math.inf])),
        ValueError,
        r"lengths contains NaN or inf \(l1\)",
    ),
    (
        "with_parameters batched",
        lambda arm: jax.tree.map(lambda x: jnp.stack([x, x]), arm).with_parameters(
            ("m2",), jnp.asarray([[1.0], [0.0]])
        ),
        ValueError,
        r"masses must be positive \(SI units\) \(m2\)",
    ),
    ("replace field", lambda arm: arm.replace(gear_ratio=0.0), ValueError, r"gear_ratio must be positive"),
    (
        "replace rotor",
        lambda arm: arm.replace(Ir=-1e-3),
        ValueError,
        r"rotor_inertia must be non-negative \(SI units\) \(Ir\)",
    ),
    (
        "replace coulomb",
        lambda arm: arm.replace(fc1=-0.1),
        ValueError,
        r"coulomb must be non-negative \(SI units\) \(fc1\)",
    ),
    (
        "inertia about joint",
        lambda arm: arm.replace(J1=-100.0),
        ValueError,
        r"inertias about the joints.*raise J1 so that J1 \+ m1 r1² >= 0",
    ),
    (
        "constructor zero mass",
        lambda arm: jaxid.TwoLinkArm(masses=(1.0, 0.0), lengths=(1, 1), com=(1, 1), inertias=(0, 0)),
        ValueError,
        r"masses must be positive \(SI units\) \(m2\)",
    ),
    (
        "constructor shape",
        lambda arm: jaxid.TwoLinkArm(masses=(1.0, 1.0, 1.0), lengths=(1, 1), com=(1, 1), inertias=(0, 0)),
        ValueError,
        r"masses must have a trailing axis of length 2",
    ),
    ("replace unknown name", lambda arm: arm.replace(m3=1.0), ValueError, r"no field or parameter 'm3'"),
    (
        "unknown parameter name",
        lambda arm: arm.parameter_vector(("mm1",)),
        ValueError,
        r"Unknown parameter name 'mm1'.*Did you mean 'm1'\?",
    ),
    (
        "unknown estimator option",
        lambda arm: jaxid.make_estimator("ml", {"bogus": 1}),
        ValueError,
        r"Estimator 'ml' has no option 'bogus'; its options: method",
    ),
    (
        "unknown estimator",
        lambda arm: jaxid.make_estimator("rsl"),
        ValueError,
        r"Unknown estimator 'rsl'.*Did you mean 'rls'\?",
    ),
    (
        "step does not divide period",
        lambda arm: jaxid.types.steps_per_period(2 * math.pi / (2 * math.pi * 0.01), 0.03),
        ValueError,
        r"period 100 s .*e\.g\. 0\.030003 s",
    ),
    (
        "log nan angle",
        lambda arm: _log(q=_nan_at((50, 2), (7, 1))),
        ValueError,
        r"MeasuredLog\.q has 1 NaN/inf value\(s\), the first at index \(7, 1\)",
    ),
    (
        "log inf torque",
        lambda arm: _log(tau=jnp.full((50, 2), jnp.inf)),
        ValueError,
        r"MeasuredLog\.tau has 100 NaN/inf",
    ),
    (
        "log joint count",
        lambda arm: _log(q=jnp.zeros((50, 3))),
        ValueError,
        r"MeasuredLog\.q must have shape \(N, 2\) = \(50, 2\).*got \(50, 3\)",
    ),
    (
        "log length mismatch",
        lambda arm: _log(tau=jnp.zeros((49, 2))),
        ValueError,
        r"MeasuredLog\.tau must have shape \(N, 2\) = \(50, 2\)",
    ),
    (
        "log time vs step",
        lambda arm: _log(t=jnp.arange(50) * 0.02),
        ValueError,
        r"MeasuredLog\.t steps by 0\.02 s at index 0, not sample_step = 0\.01 s",
    ),
    ("log time 2-d", lambda arm: _log(t=jnp.zeros((50, 1))), ValueError, r"MeasuredLog\.t must be one time vector"),
    ("log step", lambda arm: _log(step=0.0), ValueError, r"MeasuredLog\.sample_step must be a positive finite"),
    (
        "record joint count",
        lambda arm: _record(q=jnp.zeros((40, 3))),
        ValueError,
        r"Record: q and tau must have shape \(\.\.\., M, 2\)",
    ),
    (
        "record length mismatch",
        lambda arm: _record(tau=jnp.zeros((39, 2))),
        ValueError,
        r"Record: q and tau must have shape.*tau \(39, 2\)",
    ),
    (
        "record time vs step",
        lambda arm: _record(t=0.25 * jnp.arange(40)),
        ValueError,
        r"Record\.t steps by 0\.25 s at index 0, not sample_step = 0\.5 s",
    ),
    ("record step", lambda arm: _record(step=-0.5), ValueError, r"Record\.sample_step must be a positive finite"),
    (
        "fit cutoff inf",
        lambda arm: parse_fit_config(_fit_raw(filter={"cutoff_hz": math.inf})),
        ValueError,
        r"filter\.cutoff_hz = inf: give a finite number",
    ),
    (
        "fit sample step nan",
        lambda arm: parse_fit_config(_fit_raw(log={"sample_step": math.nan})),
        ValueError,
        r"log\.sample_step = nan",
    ),
    (
        "fit stride zero",
        lambda arm: parse_fit_config(_fit_raw(estimators={"output_error": {"stride": 0}})),
        ValueError,
        r"estimators\.output_error\.stride must be a positive integer, got 0",
    ),
    (
        "fit trim negative",
        lambda arm: parse_fit_config(_fit_raw(filter={"trim_s": -0.1})),
        ValueError,
        r"filter\.trim_s must be a non-negative number",
    ),
    (
        "fit option typo",
        lambda arm: parse_fit_config(_fit_raw(estimators={"ekf": {"measurment_std": 0.1}})),
        ValueError,
        r"estimators\.ekf\.measurment_std.*Did you mean 'measurement_std'\?",
    ),
    (
        "fit min share",
        lambda arm: parse_fit_config(_fit_raw(frequency={"min_share": 1.5})),
        ValueError,
        r"frequency\.min_share must be a number in \(0, 1\]",
    ),
]


@pytest.mark.parametrize("make,error,pattern", [c[1:] for c in LIBRARY_CASES], ids=[c[0] for c in LIBRARY_CASES])
def test_library_bad_input(arm, make, error, pattern):
    # The package's own messages (the suite's runtime type checker would pre-empt some of them).
    with package_errors(), pytest.raises(error, match=pattern):
        make(arm)


def test_load_log_names_the_bad_column(tmp_path):
    n = 20
    frame = pd.DataFrame(
        {"time": 0.01 * np.arange(n), "pos_meas1": 0.0, "pos_meas2": 0.0, "tau_meas1": 1.0, "tau_meas2": 1.0}
    )
    frame.loc[5, "tau_meas2"] = np.nan
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"column 'tau_meas2' has 1 NaN/inf value\(s\), the first at row 5"):
        jaxid.load_log(path)
    with pytest.raises(ValueError, match=r"sample_step must be a positive"):
        jaxid.load_log(path, sample_step=-0.01, window=(0.0, 0.04))


def test_checks_leave_legal_and_traced_arms_alone(arm):
    """The lab's negative J2 is legal (J2 + m2 r2² >= 0), and traced values are not checked, so
    ``jit``, ``vmap`` and ``grad`` through ``replace``/``with_parameters`` still work."""
    lab = jaxid.double_pendulum()
    assert float(lab.get("J2")) < 0
    about = float(lab.get("J2") + lab.get("m2") * lab.get("r2") ** 2)
    assert about >= 0
    j2 = float(lab.get("J2"))
    assert float(lab.replace(J2=j2 - 0.5 * about).get("J2")) == j2 - 0.5 * about
    with pytest.raises(ValueError, match=r"J2 \+ m2 r2²"):
        lab.replace(J2=j2 - 1.001 * about - 1e-9)
    assert float(jax.jit(lambda m: arm.replace(m1=m).get("m1"))(-1.0)) == -1.0
    out = jax.vmap(lambda m: arm.with_parameters(("m1",), m[None]).get("m1"))(jnp.asarray([2.0, -1.0]))
    np.testing.assert_array_equal(out, [2.0, -1.0])
    assert float(jax.grad(lambda m: arm.replace(m1=m).get("m1") ** 2)(3.0)) == 6.0
    # Concrete values a hair inside the boundary pass; the boundary itself does not.
    arm.replace(fv1=0.0, r1=0.0)
    with pytest.raises(ValueError):
        arm.replace(m1=0.0)
