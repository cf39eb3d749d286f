"""jaxid: identify robot-arm dynamics from periodic multisine experiments, in JAX.

The public API is re-exported here flat; see README.md for the pipeline and conventions.
jaxid does not switch JAX to float64 at import: call ``jax.config.update("jax_enable_x64", True)``
(the CLI and the tests do); public entry points refuse float32 unless asked.
"""

from . import _aliases, _platform

_aliases.install()  # the module paths before the pipeline folders (jaxid._aliases)
_platform.apply()  # jaxlib 0.11's CPU FFT deadlock: before any JAX backend starts (see jaxid._platform)

from .excitation.multisine import (
    PAPER_FUNDAMENTAL,
    TABLE2_AMPLITUDES,
    TABLE2_HARMONICS,
    Multisine,
    schroeder_phases,
    table2,
)
from .excitation.phasors import respond, synthesise
from .linalg import inverse_2x2, lstsq, small_qr, solve_2x2
from .model import (
    PARAMETER_NAMES,
    REGRESSOR_PARAMETERS,
    STANDARD_NAMES,
    AbstractArm,
    BaseParameters,
    SerialArm,
    TwoLinkArm,
    arm_from_description,
    arm_from_standard,
    base_parameters,
    base_regressor,
    coriolis_forces,
    double_pendulum,
    energy,
    forward_dynamics,
    friction_torque,
    gravity_torque,
    holding_torque,
    inverse_dynamics,
    kinetic_energy,
    load_arm,
    load_parameters,
    mass_matrix,
    point_mass,
    potential_energy,
    regressor,
    save_parameters,
    standard_parameters,
    standard_regressor,
    table1,
)
from .simulation.integrate import rk4_step, sincos, torque_grid
from .simulation.linearisation import LinearArm, corrected_point_mass_state_matrices, linearise, paper_state_matrices
from .simulation.open_loop import (
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
    steps_per_period,
    transient_periods,
)
from .types import Status, require_float64

__version__ = "0.1.0"
from .benchmark import Benchmark, base_parameter_crlb, load_benchmark, run_benchmark
from .config.common import ConfigError, Experiment, Setting
from .config.study import load_experiment, parse_experiment
from .estimate import (
    CONVERGED,
    ESTIMATOR_STATUS,
    ESTIMATORS,
    FAILED,
    MAX_ITERATIONS,
    SINGULAR,
    UNSTRUCTURED_NAMES,
    Estimate,
    equation_error,
    get_estimator,
    linear_system,
    ml,
    paper_fit,
    paper_masses,
    paper_template_response,
    parameter_values,
)
from .estimate.consistency import (
    ConsistentEstimate,
    consistent_least_squares,
    is_physically_consistent,
    link_eigenvalues,
    project_to_consistent,
    pseudo_inertia,
)
from .estimate.crlb import (
    cramer_rao_bound,
    fisher_information,
    linear_crlb,
    linear_fisher_information,
    linear_phasors,
    linear_response,
    spectral_fisher_information,
)
from .estimate.interface import AbstractEstimator, estimator_class, make_estimator, names_for
from .estimate.kalman.filters import extended_kalman_filter, recursive_least_squares, unscented_kalman_filter
from .estimate.kalman.logs import kalman_filter_fit
from .estimate.kalman.records import ekf, ukf
from .estimate.linearised_estimators import ML, EquationError, Paper
from .estimate.logs import (
    ConsistentMap,
    FilteredLog,
    Identification,
    RegressionModel,
    filter_log,
    free_simulation_rmse,
    output_error,
    torque_rmse,
)
from .estimate.logs import (
    idim_iv as log_idim_iv,
)
from .estimate.logs import (
    idim_ls as log_idim_ls,
)
from .estimate.nonlinear import nonlinear_crlb, nonlinear_fisher, nonlinear_output_error
from .estimate.nonlinear_estimators import EKF, UKF, NonlinearOutputError, OutputError, OutputErrorConsistent
from .estimate.regressor_estimators import RLS, IdimIV, IdimLS, IdimLSBounded, IdimLSConsistent
from .estimate.rls import idim_iv, idim_ls, rls
from .excitation.fourier import FourierTrajectory, JointLimits, check_limits, joint_limits, random_fourier_trajectory
from .excitation.fourier_design import TrajectoryDesign, design_trajectory
from .excitation.fourier_information import (
    base_parameter_bound,
    parameter_magnitudes,
    regressor_condition,
    relative_bound_trace,
)
from .excitation.multisine_criteria import RmsePrediction, predict_rmse
from .excitation.multisine_design import LineDesign, design_line_amplitudes, design_scale
from .experiment import load_config, run_experiment
from .fit import load_fit_config, run_fit
from .measure.derivatives import noise_variance, periodic_derivatives
from .measure.filters import default_cutoff, differentiate, lowpass
from .measure.logs import MeasuredLog, load_log
from .measure.noise import NOISE_KINDS, add_line_noise, add_noise, line_noise_draws, noise_draws, noise_mean, noise_std
from .measure.spectrum import Spectrum, fourier_coefficients, line_noise_variance
from .report.tables import parameter_table, summarise, write_tables
from .simulation.closed_loop import simulate_closed_loop
from .simulation.closed_loop_batch import simulate_closed_loop_batch
from .simulation.closed_loop_record import ClosedLoopRecord, MeasurementNoise
from .simulation.controllers import ComputedTorque, OpenLoop, PDController
from .simulation.steady_state import PeriodicOrbit, period_map, period_sensitivities, periodic_steady_state
from .study import RunExists
