"""Fit a real arm from its logs: the ``jaxid fit <config.toml>`` runner, its tables and figures.

A fit config (``experiments/fits/*.toml``) names the logs, the model, the train/test split, the
filter and the estimators::

    [fit]        name, description, data (directory, relative to the config file), reference,
                 unknowns ("base": all base parameters, or a list of base names), fixed ({name = value}
                 for the base parameters not estimated; default: the arm description's values)
    [arm]        a two-link arm (preset, parameter file or geometry), or urdf = "robot.urdf" and
                 load_arm's options (fixed_joints, armature, offset, gravity, coulomb_slope): any
                 serial arm of n joints
    [log]        angles, torques (n names or a prefix), velocities, time, sample_step, window, angle_unit
    [split]      rule (text), train = [...], test = [...]                  (file stems)
    [filter]     method, order, cutoff_hz ("auto" or Hz), candidates, excitation_hz, trim_s
    [estimators] use = [...], and one sub-table of options per estimator
    [validation] horizons_s, start_every_s, headline
    [frequency]  harmonics, min_share

Every key is checked (a typo gets a suggestion). ``run_fit`` writes to ``results/<name>/``:
``parameters.csv`` (base parameters per estimator with std, IDIM-LS's leave-one-run-out jackknife
std, and the reference's values),
``validation.csv`` (per run, role, model and joint: torque RMSE and free-simulation angle RMSE per
horizon), ``consistency.csv`` (physical-consistency checks), ``lines.csv`` (the frequency-domain
view), ``cutoff.csv`` (the automatic cut-off choice, rule in ``cutoff``), figures and ``manifest.json``.

Layout: ``config`` (sections, defaults, validation), ``model`` (the arm, base parameters, free and
fixed ones, consistency checks), ``cutoff`` (the logs and the automatic filter cut-off),
``tables`` (the result tables and the Markdown summary), ``runner`` (``run_fit``: estimators,
jackknife, figures, manifest).
"""

from ..config.fit import FitConfig, load_fit_config, parse_fit_config
from ..config.fit_checks import ESTIMATOR_NAMES
from .cutoff import choose_cutoff
from .model import consistency_checks
from .runner import FitExists, run_fit
from .tables import markdown_summary, validation_summary

__all__ = [
    "FitConfig",
    "load_fit_config",
    "parse_fit_config",
    "run_fit",
    "FitExists",
    "ESTIMATOR_NAMES",
    "markdown_summary",
    "validation_summary",
    "consistency_checks",
    "choose_cutoff",
]
