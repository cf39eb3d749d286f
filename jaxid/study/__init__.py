"""The Monte Carlo study runner, by job:

- ``sampling`` — keys from ``(seed, setting, trial)``, parameter sets (trial ``i`` uses set
  ``i mod S``), the arm, the excitation and each set's transient length;
- ``compiled`` — the compiled noise draw and estimators, cached across settings;
- ``hosts`` — multi-process (``jax.distributed``) slicing and gathering of trials;
- ``files`` — the run directory: atomic writes, manifest, protection of finished runs;
- ``extras`` — per-setting Cramér–Rao bounds and the Fourier-coefficient table;
- ``validate`` — ``validate_experiment``: the checks of a whole experiment, before any file;
- ``runner`` — ``run_study``: settings → chunks of trials → rows on disk, resumable.

``jaxid.run_experiment`` runs the study and then writes its tables and figures.
"""

from .files import RunExists, check_run_dir
from .runner import TIME_HISTORY, run_study
from .sampling import (
    build_arm,
    build_excitation,
    parameter_set_of,
    sample_arms,
    set_discard_periods,
    set_key,
    setting_key,
    trial_key,
)
from .validate import validate_experiment

__all__ = [
    "run_study",
    "validate_experiment",
    "RunExists",
    "check_run_dir",
    "TIME_HISTORY",
    "setting_key",
    "trial_key",
    "set_key",
    "parameter_set_of",
    "build_arm",
    "build_excitation",
    "sample_arms",
    "set_discard_periods",
]
