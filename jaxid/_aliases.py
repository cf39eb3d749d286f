"""The module paths of jaxid before its pipeline folders, kept importable.

``import jaxid.closed_loop`` (or ``from jaxid.identification import filter_log``) still works: a
finder on ``sys.meta_path`` answers each old path with the module it became (the same object, so
``jaxid.closed_loop is jaxid.simulate.closed_loop``). New code imports the new paths; the table is
the map from the old layout to the new (README, "Layout").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["MOVED", "install"]

#: old module path → its module now
MOVED: dict[str, str] = {
    "jaxid.batch": "jaxid.simulation.batch",
    "jaxid.benchmark.bound": "jaxid.estimate.crlb",
    "jaxid.benchmark.config": "jaxid.config.benchmark",
    "jaxid.benchmark.report": "jaxid.report.benchmark",
    "jaxid.closed_loop": "jaxid.simulation.closed_loop",
    "jaxid.consistency": "jaxid.estimate.consistency",
    "jaxid.consistency.least_squares": "jaxid.estimate.consistency.least_squares",
    "jaxid.consistency.parametrisation": "jaxid.estimate.consistency.parametrisation",
    "jaxid.crlb": "jaxid.estimate.crlb",
    "jaxid.derivatives": "jaxid.measure.derivatives",
    "jaxid.design": "jaxid.excitation.multisine_design",
    "jaxid.estimators": "jaxid.estimate",
    "jaxid.estimators.abstract": "jaxid.estimate.abstract",
    "jaxid.estimators.base": "jaxid.estimate.base",
    "jaxid.estimators.ekf": "jaxid.estimate.kalman.records",
    "jaxid.estimators.equation_error": "jaxid.estimate.equation_error",
    "jaxid.estimators.idim_iv": "jaxid.estimate.idim_iv",
    "jaxid.estimators.interface": "jaxid.estimate.interface",
    "jaxid.estimators.ml": "jaxid.estimate.ml",
    "jaxid.estimators.nonlinear": "jaxid.estimate.nonlinear",
    "jaxid.estimators.nonlinear_bound": "jaxid.estimate.nonlinear_bound",
    "jaxid.estimators.nonlinear_coarse": "jaxid.estimate.nonlinear_coarse",
    "jaxid.estimators.paper": "jaxid.estimate.paper",
    "jaxid.estimators.regression": "jaxid.estimate.regression",
    "jaxid.estimators.rls": "jaxid.estimate.rls",
    "jaxid.filters": "jaxid.measure.filters",
    "jaxid.fit.config": "jaxid.config.fit",
    "jaxid.identification": "jaxid.estimate.logs",
    "jaxid.identification.data": "jaxid.estimate.logs.data",
    "jaxid.identification.figures": "jaxid.fit.figures",
    "jaxid.identification.idim": "jaxid.estimate.logs.idim",
    "jaxid.identification.kalman": "jaxid.estimate.kalman.logs",
    "jaxid.identification.model": "jaxid.estimate.logs.model",
    "jaxid.identification.output_error": "jaxid.estimate.logs.output_error",
    "jaxid.identification.reweighted": "jaxid.estimate.logs.reweighted",
    "jaxid.identification.shooting": "jaxid.estimate.logs.shooting",
    "jaxid.identification.validation": "jaxid.estimate.logs.validation",
    "jaxid.integrate": "jaxid.simulation.integrate",
    "jaxid.kalman": "jaxid.estimate.kalman.filters",
    "jaxid.linearisation": "jaxid.simulation.linearisation",
    "jaxid.log_formats": "jaxid.measure.log_formats",
    "jaxid.logs": "jaxid.measure.logs",
    "jaxid.measurement": "jaxid.measure.noise",
    "jaxid.phasors": "jaxid.excitation.phasors",
    "jaxid.plots": "jaxid.report.figures",
    "jaxid.reference": "jaxid.excitation.fourier",
    "jaxid.spectrum": "jaxid.measure.spectrum",
    "jaxid.steady_state": "jaxid.simulation.steady_state",
    "jaxid.trajectory": "jaxid.simulation.paths",
    "jaxid.trajectory_design": "jaxid.excitation.fourier_design",
    "jaxid.transient": "jaxid.simulation.transient",
}


class _OldPath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path (``MOVED``) and loads it as the module it became."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        return None


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``jaxid/__init__`` does)."""
    if not any(isinstance(f, _OldPath) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPath())  # first: a stale folder of the old layout must not shadow it
