"""Configuration files, read in one place: what every file shares (``common``: TOML reading,
``ConfigError``, the ``[experiment]`` table), a study's TOML (``study``, re-exported here), a fit's
(``fit``; its ``[arm]`` table and reference arms in ``fit_arm``, the checks on values in ``fit_checks``)
and a benchmark's (``benchmark``).
"""

from .study import (
    SETTING_DEFAULTS,
    ConfigError,
    Experiment,
    Setting,
    load_experiment,
    parse_experiment,
)

__all__ = ["ConfigError", "Experiment", "Setting", "load_experiment", "parse_experiment", "SETTING_DEFAULTS"]
