"""Simulation: the one RK4 step (``integrate``), the two-link arm under a multisine (``open_loop``,
``paths``, ``batch``, ``steady_state``, ``transient``, ``linearisation``) and any serial arm in closed loop
(``closed_loop``). The package re-exports ``open_loop``'s names.
"""

from .open_loop import (
    DIVERGED,
    MAX_STEPS,
    NOT_STEADY,
    RK4,
    STATUS_NAMES,
    SUCCESS,
    Record,
    linear_steady_state,
    simulate,
    simulate_batch,
    sincos,
    steps_per_period,
    transient_periods,
    transient_periods_each,
)

__all__ = [
    "Record",
    "SUCCESS",
    "DIVERGED",
    "MAX_STEPS",
    "NOT_STEADY",
    "STATUS_NAMES",
    "RK4",
    "simulate",
    "simulate_batch",
    "linear_steady_state",
    "transient_periods",
    "transient_periods_each",
    "steps_per_period",
    "sincos",
]
