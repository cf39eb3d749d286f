"""The README's commands run as printed: the library quickstart (every estimator ok and within its
bounds) and the main job's `jaxid run` command (on the experiment's smoke setting)."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _env import child_env

import jaxid
from jaxid.config import load_experiment

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_readme_quickstart_runs(capsys, monkeypatch):
    code = re.search(r"## Library quickstart\n\n```python\n(.*?)```", README, re.S).group(1)
    # Keep every estimate the loop makes (the quickstart only prints them).
    estimates = {}
    real = jaxid.get_estimator

    def get_estimator(name, **kw):
        fn = real(name, **kw)
        return lambda *a, **k: estimates.setdefault(name, fn(*a, **k))

    monkeypatch.setattr(jaxid, "get_estimator", get_estimator)
    namespace: dict = {}
    exec(compile(code, "README quickstart", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["equation_error", "ml", "nonlinear_oe", "sqrt(CRLB)"]
    assert list(estimates) == ["equation_error", "ml", "nonlinear_oe"]
    truth = np.array([5.0, 1.5, 5.0, 2.0])  # point_mass(): m1, m2, fv1, fv2
    sqrt_crlb = np.sqrt(np.diag(np.asarray(namespace["bound"])))
    for name, est in estimates.items():
        assert int(est.status) == 0, name
        assert est.names == ("m1", "m2", "fv1", "fv2")
        own = np.sqrt(np.diag(np.asarray(est.covariance)))
        error = np.asarray(est.value) - truth
        # one noisy trial: within 5 of its own reported standard deviations of the truth
        assert np.all(np.abs(error) < 5 * own), (name, error / own)
        if name != "equation_error":  # (biased by noise on its regressor at this SNR)
            # efficient at this small amplitude: on the linear bound, and within 5 √CRLB
            np.testing.assert_allclose(own, sqrt_crlb, rtol=0.1, err_msg=name)
            assert np.all(np.abs(error) < 5 * sqrt_crlb), (name, error / sqrt_crlb)


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_readme_main_command_runs(tmp_path):
    """The main job's `jaxid run ...` exactly as the README prints it (console script, a fresh
    process), on the experiment's smoke setting and into a temporary directory."""
    from test_study import check_smoke_run

    line = re.search(r"\*\*Set up and run the main job\*\*.*?```bash\n(.*?)\n```", README, re.S).group(1)
    command = shlex.split(line.split("&&")[-1])
    assert command[:2] == ["jaxid", "run"]
    exe = Path(sys.executable).parent / "jaxid"
    exe = str(exe) if exe.exists() else shutil.which("jaxid")
    out = tmp_path / "main"
    env = child_env()
    done = subprocess.run(
        [exe, *command[1:], "--settings", "smoke", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"Results in {out}" in done.stdout
    experiment = command[2]
    check_smoke_run(out, load_experiment(ROOT / "experiments" / f"{experiment}.toml"))


@pytest.mark.slow
def test_readme_serial_arm_runs(monkeypatch):
    """The URDF section's example: the UR5's 58 base parameters, a tracked closed-loop run, and a
    consistent fit whose residual is the torque noise and whose certified gap to the LMI optimum is
    small beside its cost."""
    code = re.search(r"## Any serial arm \(URDF\)\n.*?```python\n(.*?)```", README, re.S).group(1)
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(code, "README serial arm", "exec"), namespace)
    base, record, fit = namespace["base"], namespace["record"], namespace["fit"]
    assert base.rank == 58 and int(record.status) == 0
    tracking = np.abs(np.asarray(record.q - record.q_reference)).max()
    assert tracking < 1e-3, tracking  # [rad]: the computed-torque loop follows the reference
    assert bool(fit.consistent) and int(fit.status) == 0
    residual = float(np.sqrt(fit.data_cost / record.tau.size))
    assert 0.045 < residual < 0.06, residual  # the torque noise, 0.05 N m
    assert float(fit.duality_gap) < 1e-2 * float(fit.cost)
