"""The logs of a fit and the automatic choice of the filter cut-off.

**The automatic cut-off** (``cutoff_hz = "auto"``): the excitation frequency ``f_exc`` is the
highest periodogram peak of the training runs' torques (or ``excitation_hz``); for each
multiple ``c · f_exc`` in ``candidates`` the training runs are filtered, IDIM-LS is fitted, and
the fit's free simulations are compared with the *training* runs' measured angles (longest
horizon); the candidate with the smallest mean angle RMSE wins. The angle error is measured on
raw angles, so it does not depend on the filter it judges; the held-out runs are never used.
Why not a fixed multiple: the real arm's angles carry a ~5-15 Hz component the rigid model does
not explain (structure/drive), and the LS estimate attenuates as the cut-off lets more of it into
``q''`` (errors in variables) — the rule finds the band in which the rigid model holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .config import FitConfig, config_error
from .model import FitModel

__all__ = ["load_logs", "filter_all", "choose_cutoff"]


def load_logs(config: FitConfig, names: list[str]):
    """The named logs from ``config.data`` (``[log]`` options); ``ConfigError`` for a missing one."""
    from ..logs import load_log

    opts = config.section("log")
    found = {}
    for name in names:
        candidates = [config.data / f"{name}{s}" for s in (".csv.gz", ".csv", ".parquet", ".pq")]
        path = next((c for c in candidates if c.exists()), None)
        if path is None:
            raise config_error(
                f"log {name!r} not found in {config.data} (tried .csv.gz, .csv, .parquet); "
                "check split.train/test or pass --data DIR."
            )
        window = opts["window"]
        found[name] = load_log(
            path,
            angles=opts["angles"],
            torques=opts["torques"],
            velocities=opts["velocities"],
            time=opts["time"],
            window=None if window is None else tuple(window),
            sample_step=opts["sample_step"],
        )
    return found


def filter_all(logs, cutoff, flt):
    """Every log filtered at ``cutoff`` [Hz] with the ``[filter]`` options ``flt``."""
    from ..identification.data import filter_log

    return {
        n: filter_log(log, cutoff, method=flt["method"], order=flt["order"], trim_s=flt["trim_s"])
        for n, log in logs.items()
    }


def choose_cutoff(config: FitConfig, train_logs, model: FitModel) -> tuple[float, float, list[dict[str, Any]]]:
    """The cut-off [Hz] by the rule of the module docstring; returns ``(cutoff, f_exc, table)``."""
    from ..filters import dominant_frequency
    from ..identification.idim import idim_ls
    from ..identification.validation import free_simulation_rmse

    flt = config.section("filter")
    h = next(iter(train_logs.values())).sample_step
    f_exc = flt["excitation_hz"]
    if f_exc == "auto":
        f_exc = max(dominant_frequency(np.asarray(log.tau), log.sample_step) for log in train_logs.values())
    if flt["cutoff_hz"] != "auto":
        return float(flt["cutoff_hz"]), float(f_exc), []
    longest = max(config.section("validation")["horizons_s"])
    every = config.section("validation")["start_every_s"]
    table = []
    for c in flt["candidates"]:
        cutoff = round(float(c) * f_exc, 2)
        if cutoff >= 0.45 / h:
            continue
        filtered = filter_all(train_logs, cutoff, flt)
        try:
            est = model.embed(
                idim_ls(list(filtered.values()), model.free_regressor, model.free_names, known=model.known)
            )
            errs = [
                free_simulation_rmse(d, model.regressor, est.value, (longest,), every)[float(longest)]
                for d in filtered.values()
            ]
            score = float(np.mean(errs))
        except ValueError:
            score = math.inf
        table.append({"multiple": float(c), "cutoff_hz": cutoff, "train_angle_rmse": score})
    if not table or not np.isfinite(min(r["train_angle_rmse"] for r in table)):
        raise ValueError("automatic cut-off: no candidate gave a finite training error; set filter.cutoff_hz.")
    best = min(table, key=lambda r: r["train_angle_rmse"])
    for r in table:
        r["chosen"] = r is best
    return best["cutoff_hz"], float(f_exc), table
