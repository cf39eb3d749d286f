"""The tables of ``jaxid fit``: parameters, validation, consistency, the frequency view and the summary.

Per-joint rows and columns run over the arm's ``n`` joints (``joint`` = 1 … n).
"""

from __future__ import annotations

import math

import numpy as np

from .._platform import thread_map

__all__ = [
    "parameters_table",
    "validation_table",
    "consistency_table",
    "frequency_view",
    "validation_summary",
    "markdown_summary",
]


def parameters_table(estimates, model, jackknife):
    """Base parameters per estimator: value, std, IDIM-LS's jackknife std, fixed flag, reference."""
    import pandas as pd

    rows = []
    for name, est in estimates.items():
        for i, (pname, label) in enumerate(zip(model.names, model.labels, strict=True)):
            rows.append(
                {
                    "estimator": name,
                    "parameter": pname,
                    "label": label,
                    "value": float(est.value[i]),
                    "std": float(est.std[i]),
                    "jackknife_std": float(jackknife[i]) if name == "idim_ls" and jackknife is not None else None,
                    "fixed": i not in model.free,
                    "reference": None if model.reference is None else float(model.reference[i]),
                }
            )
    return pd.DataFrame(rows)


def simulation_substeps(model, thetas, logs) -> dict[str, int]:
    """RK4 steps per sample of each model's free simulations, ``{label: substeps}``: what
    ``jaxid.estimate.logs.stepping.stable_substeps`` asks for each of ``thetas`` (``{label: base parameters}``)
    on ``logs`` (``{run: FilteredLog}``), 1 for a model whose state Jacobian is not finite there.

    Each model takes the steps its own stiffness needs: RK4 within its stability limit follows the
    slow motion the angle errors measure as closely for every model, and one stiff set (a truth with a
    light, damped wrist: ``h λ_max`` 39 on the UR5 campaign of ``scripts/bench_fit_cost.py``) no longer
    makes every other model take 16 substeps (one compiled program per distinct count)."""
    from ..estimate.logs.stepping import stable_substeps

    runs = list(logs.values())
    return {label: max(1, stable_substeps(model.regressor, theta, runs)[0]) for label, theta in thetas.items()}


def model_substeps(substeps, label):
    """``substeps`` of the model ``label``: a ``{label: int}`` (``simulation_substeps``), one int for all, or None."""
    return substeps.get(label) if isinstance(substeps, dict) else substeps


def validation_table(config, filtered, model, thetas, horizons, fitted=None, substeps=None):
    """Per run, role, model and joint: torque RMSE, free-simulation angle RMSE per horizon and a
    ``status`` (``ok``; ``simulation_failed`` when the free simulation raised, its RMSEs NaN;
    ``nonfinite`` when a metric came out NaN/inf).

    ``filtered``: the logs filtered at the evaluation band (``validation.band_hz``), on which every
    metric is computed; ``fitted``: the same logs filtered at the fit's cut-off, on which the
    torque RMSE is also reported as ``torque_rmse_fit_band`` (it moves with the fit's filter).
    ``substeps``: RK4 steps per sample of the free simulations, ``{label: int}`` or one int for every model
    (default: ``simulation_substeps``)."""
    import pandas as pd

    from ..estimate.logs.validation import free_simulation_rmse, torque_rmse

    val = config.section("validation")
    if substeps is None:
        substeps = simulation_substeps(model, thetas, filtered)

    def rows(job):
        run, label = job
        d, theta = filtered[run], thetas[label]
        role = "train" if run in config.train else "test"
        tau = torque_rmse(d, model.regressor, theta)
        tau_fit = None if fitted is None else torque_rmse(fitted[run], model.regressor, theta)
        try:
            sim = free_simulation_rmse(
                d, model.regressor, theta, horizons, val["start_every_s"], model_substeps(substeps, label)
            )
            status = "ok"
        except ValueError:
            sim = {h: np.full(model.dof, np.nan) for h in horizons}
            status = "simulation_failed"
        out = []
        for j in range(model.dof):
            row = {"run": run, "role": role, "model": label, "joint": j + 1, "torque_rmse": float(tau[j])}
            if tau_fit is not None:
                row["torque_rmse_fit_band"] = float(tau_fit[j])
            row.update({f"angle_rmse_{h:g}s": float(sim[h][j]) for h in horizons})
            # A NaN metric always comes with a status saying why (never a silent NaN).
            finite = all(np.isfinite(v) for k, v in row.items() if k.endswith("_rmse") or "_rmse_" in k)
            row["status"] = status if status != "ok" or finite else "nonfinite"
            out.append(row)
        return out

    # Each (run, model) is independent compiled work: one thread per core (``thread_map``), rows in order.
    jobs = [(run, label) for run in filtered for label in thetas]
    vrows = [row for part in thread_map(rows, jobs) for row in part]
    return pd.DataFrame(vrows)


def consistency_table(model, thetas):
    """The physical-consistency checks (``consistency_checks``) of every model."""
    import pandas as pd

    from .model import consistency_checks

    return pd.DataFrame(
        [{"model": label, **row} for label, theta in thetas.items() for row in consistency_checks(model, theta)]
    )


def markdown_summary(summary) -> str:
    """The summary table as Markdown: one row per model, torque and angle RMSE per joint."""
    metrics = [c for c in summary.columns if c.startswith("torque_rmse") or c.startswith("angle_rmse_")]
    joints = sorted(int(j) for j in set(summary["joint"]))
    head = ["model"] + [f"{_pretty(m)} j{j}" for m in metrics for j in joints]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, rows in summary.groupby("model", sort=False):
        rows = rows.set_index("joint")
        cells = [model] + [f"{rows.loc[j, m]:.3f}" for m in metrics for j in joints]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pretty(metric: str) -> str:
    if metric == "torque_rmse":
        return "τ RMSE [N m]"
    if metric == "torque_rmse_fit_band":
        return "τ RMSE fit band [N m]"
    return f"q RMSE {metric.removeprefix('angle_rmse_')} [rad]"


def validation_summary(validation, horizons):
    """Held-out (test) mean per model and joint of every metric (train if there is no test run)."""
    role = "test" if (validation["role"] == "test").any() else "train"
    sub = validation[validation["role"] == role]
    cols = ["torque_rmse"] + [f"angle_rmse_{h:g}s" for h in horizons]
    cols += ["torque_rmse_fit_band"] if "torque_rmse_fit_band" in validation else []
    summary = sub.groupby(["model", "joint"], sort=False)[cols].mean().reset_index()
    summary.insert(0, "role", role)
    return summary


def frequency_view(config, filtered, model, thetas, f_exc_train):
    """Measured vs model lines at the excited frequency and its harmonics (``frequency_lines``): torque
    lines always, angle lines (free simulation of the whole run) for the two-link arm only."""
    import pandas as pd

    from ..estimate.logs.validation import free_simulation, frequency_lines, torque_prediction
    from ..measure.filters import dominant_frequency
    from .model import _two_link

    # The angle lines come from a free simulation of the whole run: meaningful for the hanging two-link
    # arm, not for an N-joint arm logged in closed loop (it falls over in open loop): torque lines only.
    angles = _two_link(model)
    opts = config.section("frequency")
    harmonics = int(opts["harmonics"])
    rows = []
    for run, d in filtered.items():
        sl = d.usable
        tau = d.band(d.tau)[sl]
        freqs = [dominant_frequency(tau[:, j], d.sample_step) for j in range(model.dof)]
        f0 = min(freqs)
        x = frequency_lines(tau, d.sample_step, f0, 1)[0]
        share = np.abs(x) ** 2 / 2 / np.maximum(np.var(tau, axis=0), 1e-300)
        if share.max() < opts["min_share"]:
            continue  # not a sine-driven run
        steps = sl.stop - 1 - sl.start
        signals = {"torque": {"measured": tau}}
        if angles:
            signals["angle"] = {"measured": np.asarray(d.q_raw)[sl]}
        for label, theta in thetas.items():
            signals["torque"][label] = torque_prediction(d, model.regressor, theta)[sl]
            if angles:
                sim = free_simulation(d, model.regressor, theta, np.asarray([sl.start]), steps)[0, :, : model.dof]
                signals["angle"][label] = sim
        for kind, series in signals.items():
            phasors = {k: frequency_lines(v, d.sample_step, f0, harmonics) for k, v in series.items()}
            for k in range(harmonics):
                for j in range(model.dof):
                    meas = phasors["measured"][k, j]
                    for label in thetas:
                        mod = phasors[label][k, j]
                        rows.append(
                            {
                                "run": run,
                                "role": "train" if run in config.train else "test",
                                "signal": kind,
                                "joint": j + 1,
                                "harmonic": k + 1,
                                "frequency_hz": f0 * (k + 1),
                                "model": label,
                                "measured_amplitude": abs(meas),
                                "measured_phase_deg": math.degrees(np.angle(meas)),
                                "model_amplitude": abs(mod),
                                "model_phase_deg": math.degrees(np.angle(mod)),
                                "relative_error": abs(mod - meas) / max(abs(meas), 1e-300),
                            }
                        )
    return pd.DataFrame(rows)
