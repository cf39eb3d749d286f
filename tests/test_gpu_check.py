"""The GPU check script runs end to end on the CPU (``--cpu``: small sizes) and writes its JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    # EQX_ON_ERROR=nan: the adaptive Tsit5 reference's runtime checks give NaN (which fails the
    # error bounds below) instead of a host callback, so its compile is persistently cacheable.
    env = {**os.environ, "PYTHON": sys.executable, "EQX_ON_ERROR": "nan"}
    env.pop("OUT", None)
    # About 50 s on two idle cores (most of it compiling); the budget leaves room for a busy machine.
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu", "--budget", "360", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu"
    for stage in ("device", "simulate", "study", "nbench"):
        assert report[stage]["stage_status"] == "ok", (stage, report[stage])
    device = report["device"]
    assert device["backend"] == "cpu" and device["ok"]
    assert device["max_error_device_vs_tsit5_rad"] < 1e-4  # RK4 at the coarse --cpu step
    rows = [r for r in report["simulate"]["rows"] if "traj_per_s" in r]
    assert [r["batch"] for r in rows] == [8, 16] and all(r["ok"] == r["trajectories"] for r in rows)
    assert rows[1]["calls"] == 2  # 16 trajectories in calls of at most 8
    study = report["study"]
    assert study["complete"] and study["trials_done"] == 200
    ml = {r["parameter"]: r for r in study["summary"] if r["estimator"] == "ml"}
    assert ml["m2"]["rmse"] < 2 * ml["m2"]["sqrt_crlb"]  # on the bound (linear arm, small noise)
    # The N-joint stage (two-link URDF under --cpu): every trial simulated, the estimators on the
    # first chunk, with their statuses and the bound beside the RMSE.
    nbench = report["nbench"]
    assert nbench["arm"] == "two_link" and nbench["chunk"] == 2
    assert nbench["simulate"]["trials"] == 4 and [c["trials"] for c in nbench["simulate"]["calls"]] == [2, 2]
    assert nbench["simulate"]["statuses"] == {"ok": 4}
    assert nbench["estimators"]["trials_done"] >= 1
    for name in ("idim_ls", "rls"):
        e = nbench["estimators"]["per_estimator"][name]
        assert sum(e["statuses"].values()) == e["trials"] == nbench["estimators"]["trials_done"]
        assert e["rmse_over_bound_median"] > 0
    headline = report["headline"]
    assert headline["study_trials_done"] == 200 and headline["simulate_16_traj_per_s"] > 0
