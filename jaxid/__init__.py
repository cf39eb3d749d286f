"""jaxid: identify robot-arm dynamics from periodic multisine experiments, in JAX.

The public API is re-exported here flat; see README.md for the pipeline and conventions.
jaxid does not switch JAX to float64 at import: call ``jax.config.update("jax_enable_x64", True)``
(the CLI and the tests do); public entry points refuse float32 unless asked.
"""

from . import _platform

_platform.apply()  # jaxlib 0.11's CPU FFT deadlock: before any JAX backend starts (see jaxid._platform)

from .excitation import (
    PAPER_FUNDAMENTAL,
    TABLE2_AMPLITUDES,
    TABLE2_HARMONICS,
    Multisine,
    schroeder_phases,
    table2,
)
from .integrate import rk4_step, sincos, torque_grid
from .linalg import inverse_2x2, lstsq, small_qr, solve_2x2
from .linearisation import LinearArm, corrected_point_mass_state_matrices, linearise, paper_state_matrices
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
from .phasors import respond, synthesise
from .simulation import (
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
from .closed_loop import simulate_closed_loop
from .closed_loop_batch import simulate_closed_loop_batch
from .closed_loop_record import ClosedLoopRecord, MeasurementNoise
from .config import load_experiment, parse_experiment
from .config_common import ConfigError, Experiment, Setting
from .consistency import (
    ConsistentEstimate,
    consistent_least_squares,
    is_physically_consistent,
    link_eigenvalues,
    project_to_consistent,
    pseudo_inertia,
)
from .controllers import ComputedTorque, OpenLoop, PDController
from .crlb import (
    cramer_rao_bound,
    fisher_information,
    linear_crlb,
    linear_fisher_information,
    linear_phasors,
    linear_response,
    spectral_fisher_information,
)
from .derivatives import noise_variance, periodic_derivatives
from .design import LineDesign, design_line_amplitudes, design_scale
from .design_criteria import RmsePrediction, predict_rmse
from .estimators import (
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
from .estimators.ekf import ekf, ukf
from .estimators.interface import (
    EKF,
    ML,
    RLS,
    UKF,
    AbstractEstimator,
    EquationError,
    IdimIV,
    IdimLS,
    IdimLSBounded,
    IdimLSConsistent,
    NonlinearOutputError,
    OutputError,
    OutputErrorConsistent,
    Paper,
    estimator_class,
    make_estimator,
    names_for,
)
from .estimators.nonlinear import nonlinear_crlb, nonlinear_fisher, nonlinear_output_error
from .estimators.rls import idim_iv, idim_ls, rls
from .experiment import load_config, run_experiment
from .filters import default_cutoff, differentiate, lowpass
from .fit import load_fit_config, run_fit
from .identification import (
    ConsistentMap,
    FilteredLog,
    Identification,
    RegressionModel,
    filter_log,
    free_simulation_rmse,
    kalman_filter_fit,
    output_error,
    torque_rmse,
)
from .identification import (
    idim_iv as log_idim_iv,
)
from .identification import (
    idim_ls as log_idim_ls,
)
from .kalman import extended_kalman_filter, recursive_least_squares, unscented_kalman_filter
from .logs import MeasuredLog, load_log
from .measurement import NOISE_KINDS, add_line_noise, add_noise, line_noise_draws, noise_draws, noise_mean, noise_std
from .reference import FourierTrajectory, JointLimits, check_limits, joint_limits, random_fourier_trajectory
from .report import parameter_table, summarise, write_tables
from .spectrum import Spectrum, fourier_coefficients, line_noise_variance
from .steady_state import PeriodicOrbit, period_map, period_sensitivities, periodic_steady_state
from .study import RunExists
from .trajectory_design import TrajectoryDesign, design_trajectory
from .trajectory_information import (
    base_parameter_bound,
    parameter_magnitudes,
    regressor_condition,
    relative_bound_trace,
)
