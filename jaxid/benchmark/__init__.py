"""The N-joint benchmark: Monte Carlo comparison of identification methods on an arm from its URDF.

``[experiment] kind = "benchmark"`` with ``[arm] urdf = "..."`` (``config``); per setting a plan
(arms, model, reference, controller, the noise-free runs, the Cramér–Rao bound, ``jaxid.estimate.crlb.base_parameter_crlb``) and per
trial a closed-loop log and every estimator on it (``trial``); chunks on disk, resumable
(``runner``); tables and figures (``report``). ``jaxid run`` dispatches on the kind.
"""

from ..config.benchmark import (
    BENCHMARK_DEFAULTS,
    BENCHMARK_ESTIMATORS,
    ESTIMATOR_DOC,
    Benchmark,
    is_benchmark,
    load_benchmark,
    parse_benchmark,
)
from ..estimate.crlb import base_parameter_crlb
from .runner import run_benchmark
from .trial import BenchmarkPlan, make_plan

__all__ = [
    "BENCHMARK_DEFAULTS",
    "BENCHMARK_ESTIMATORS",
    "ESTIMATOR_DOC",
    "Benchmark",
    "BenchmarkPlan",
    "base_parameter_crlb",
    "is_benchmark",
    "load_benchmark",
    "make_plan",
    "parse_benchmark",
    "run_benchmark",
]
