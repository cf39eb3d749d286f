"""Identification from measured logs (real arms): filtering, IDIM-LS/IV, output error, EKF/UKF.

- ``data``: ``filter_log`` (zero-phase filter + derivatives), the regressor model's torque;
- ``stepping``: RK4 steps of a regressor model (``model_step``, segment simulation) and the
  stiffness rule for substeps per sample (``stable_substeps``);
- ``model``: ``RegressionModel``, the arm as these estimators see it (regressor, names, known torque,
  constraints);
- ``idim``: ``idim_ls`` (weighted, optionally bounded); the ``Identification`` result;
- ``ls_kernel``: its one least-squares kernel (pure JAX; the batched benchmark's too);
- ``iv``: ``idim_iv`` (instruments from restarted segment simulations);
- ``reweighted``: ``idim_rls``, ``idim_ls_consistent`` on IDIM-LS's weighted rows;
- ``output_error``: multiple-shooting output error (``output_error_batch``: many fits in lockstep, their
  passes as one program);
- ``kalman``: the EKF/UKF of ``jaxid.estimate.kalman.filters`` with the regressor model's transition;
- ``validation``: torque RMSE, free-simulation angle RMSE, frequency lines, residual spectra;
- ``figures``: the figures of ``jaxid fit``.

Every estimator takes filtered logs of ``n`` joints (``(N, n)`` columns), a regressor
``Y(q, q', q'') -> (..., n, p)`` and the parameter names, so any linear-in-parameters model of any
number of joints works (``jaxid.fit`` uses the base regressor of a ``TwoLinkArm`` or a ``SerialArm``).
These are the kernels; the estimators are the classes of ``jaxid.estimate`` (one class per
estimator, called on a simulated record or on logs: ``IdimLS()(logs, model)``).
"""

from .data import FilteredLog, accelerations, angle_noise_std, filter_log
from .idim import Identification, default_decimation, idim_ls
from .iv import idim_iv
from .model import ConsistentMap, RegressionModel
from .output_error import output_error
from .output_error_batch import output_error_batch
from .reweighted import consistent_estimate, idim_ls_consistent, idim_rls
from .stepping import simulate_segments, stage_torques
from .validation import free_simulation, free_simulation_rmse, frequency_lines, residual_spectrum, torque_rmse

__all__ = [
    "FilteredLog",
    "filter_log",
    "stage_torques",
    "accelerations",
    "simulate_segments",
    "Identification",
    "idim_ls",
    "idim_iv",
    "idim_rls",
    "idim_ls_consistent",
    "consistent_estimate",
    "RegressionModel",
    "ConsistentMap",
    "default_decimation",
    "output_error",
    "output_error_batch",
    "angle_noise_std",
    "torque_rmse",
    "free_simulation",
    "free_simulation_rmse",
    "frequency_lines",
    "residual_spectrum",
]
