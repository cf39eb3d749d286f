"""`jaxid fit` with its defaults on simulated closed-loop logs of a six-joint arm, against the truth.

The UR5 of ``data/robots/`` (``jaxid.fit.simulated.simulated_logs``, seed 0): six runs of 30, 45, 25,
35, 50 and 20 s (the first four fitted, the last two held out), ~100 Hz jittered stamps, noise
through the PD loop, viscous and Coulomb friction, armature 0.1 kg m² and offsets 0.2 N m, a nominal
URDF whose link masses and inertias are up to 20 % off. The config gives the fit the true armature
and offsets as the nominal's (a URDF cannot hold them) so that the reference, ``true.urdf``, is the
whole truth; everything else is the defaults (automatic cut-off, default estimate chosen on the
training runs, figures on). Prints the held-out torque RMSE pooled over joints of every model and
writes ``results/check_six_joint_fit/result.json``.

    python scripts/check_six_joint_fit.py [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """[fit]
name = "check_six_joint_fit"
data = "{data}"
reference = "{data}/true.urdf"

[arm]
urdf = "{data}/nominal.urdf"
armature = 0.1
offset = 0.2

[split]
rule = "the first four runs fit, the last two held out"
train = ["r1", "r2", "r3", "r4"]
test = ["v1", "v2"]

[estimators]
use = ["idim_ls", "idim_ls_consistent", "idim_iv", "rls", "ekf"]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="folder for the simulated logs (default: a temp dir)")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import pandas as pd

    from jaxid.fit.simulated import simulated_logs

    data = args.data or Path(tempfile.mkdtemp(prefix="six_joint_"))
    if not (data / "v2.csv").exists():
        simulated_logs(
            ROOT / "data" / "robots" / "ur5_robot.urdf",
            data,
            durations=(30, 45, 25, 35, 50, 20),
            names=["r1", "r2", "r3", "r4", "v1", "v2"],
            armature=0.1,
            offset=0.2,
            seed=0,
        )
    out_dir = ROOT / "results" / "check_six_joint_fit"
    out_dir.mkdir(parents=True, exist_ok=True)
    config = data / "fit.toml"
    config.write_text(CONFIG.format(data=data.resolve()))
    fit_out = data / "out"
    subprocess.run(
        [sys.executable, "-m", "jaxid.cli", "fit", str(config), "--out", str(fit_out), "--overwrite"], check=True
    )
    manifest = json.loads((fit_out / "manifest.json").read_text())
    validation = pd.read_csv(fit_out / "validation.csv")
    test = validation[validation["role"] == "test"]
    pooled = {m: float(np.sqrt(np.mean(r["torque_rmse"] ** 2))) for m, r in test.groupby("model", sort=False)}
    default = manifest["default_estimator"]
    result = {
        "default_estimator": default,
        "cutoff_hz": manifest["cutoff_hz"],
        "held_out_torque_rmse_pooled": pooled,
        "default_over_truth": pooled[default] / pooled["reference"],
        "estimators": {k: {"seconds": v["seconds"], "status": v["status"]} for k, v in manifest["estimators"].items()},
        "failed_estimators": manifest["failed_estimators"],
        "fit_seconds": manifest["seconds"],
        "git_revision": manifest["git_revision"],
    }
    (out_dir / "result.json").write_text(json.dumps(result, indent=2))
    for model, value in pooled.items():
        print(f"{model:>20s}  {value:.4f} N m")
    print(f"default {default}: {result['default_over_truth']:.4f} × the truth's own error")


if __name__ == "__main__":
    main()
