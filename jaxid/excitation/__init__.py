"""Excitation: the multisine torque (``multisine``, re-exported here) and its phasor synthesis
(``phasors``), Fourier reference trajectories of a serial arm (``fourier``), and the design of both
(``multisine_design``, ``fourier_design``).
"""

from .multisine import (
    PAPER_FUNDAMENTAL,
    TABLE2_AMPLITUDES,
    TABLE2_HARMONICS,
    Multisine,
    schroeder_phases,
    table2,
)

__all__ = ["Multisine", "TABLE2_HARMONICS", "TABLE2_AMPLITUDES", "PAPER_FUNDAMENTAL", "table2", "schroeder_phases"]
