"""Estimators as equinox modules: every option reaches the computation, traced options do not
recompile, the class facts replace name lists, and bad options fail with one clear line."""

import inspect
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate import base
from jaxid.estimate.interface import (
    ESTIMATORS,
    AbstractEstimator,
    estimator_class,
    make_estimator,
)
from jaxid.estimate.regressor_estimators import RLS, IdimLS

POINT = ("m1", "m2", "fv1", "fv2")
DT = 0.02
PERIODS = 2
NOISE = 0.002
GUESS = [6.0, 2.0, 6.0, 2.5]

#: Options every estimator function takes as the common interface, not as options.
COMMON = {"record", "excitation", "nominal", "unknowns", "q0", "noise_std"}


def _record(arm, excitation, seed=0):
    """``PERIODS`` periods of the linear steady state plus Gaussian noise (no simulation compile)."""
    n = round(excitation.period / DT)
    t = 300.0 + jnp.arange(PERIODS * n) * DT
    tau = jaxid.gravity_torque(arm, jnp.zeros(2)) + excitation.torque(t)
    q = jaxid.linear_steady_state(arm, excitation, t)
    q = q + NOISE * jax.random.normal(jax.random.key(seed), q.shape)
    return jaxid.Record(t, tau, q, jnp.int32(0), jnp.zeros(()), DT, excitation.period, PERIODS)


@pytest.fixture(scope="module")
def data():
    """Point-mass arm, Table 2 lines at a 10-s period, 2 periods of 500 samples, 2 mrad noise."""
    arm = jaxid.point_mass()
    split = jaxid.table2("split", 0.5, fundamental=2 * math.pi * 0.1)
    same = jaxid.table2("same", 0.5, fundamental=2 * math.pi * 0.1)
    return arm, split, _record(arm, split), same, _record(arm, same)


# -- the class layer ------------------------------------------------------------------------------


#: The classes that fit simulated records (the others fit logs only: jaxid.estimate.logs kernels).
RECORD = {n: c for n, c in ESTIMATORS.items() if "record" in c.accepts()}
#: Options whose class default is None, "the default of the data kind" (records: the function's).
PER_DATA_DEFAULT = {"initial_covariance", "velocity_process_std"}


def test_table_covers_the_registered_functions():
    assert set(RECORD) == set(base.ESTIMATORS), "every registered estimator function needs a class"
    assert {n for n, c in ESTIMATORS.items() if c.function is None} == {
        "idim_ls_bounded",
        "idim_ls_consistent",
        "output_error",
        "output_error_consistent",
    }
    for name, cls in RECORD.items():
        assert issubclass(cls, AbstractEstimator) and cls.name == name
        assert cls.function is base.ESTIMATORS[name]
        assert jaxid.get_estimator(name) is cls.function  # the function API keeps working
        assert estimator_class(name) is cls


@pytest.mark.parametrize("name", sorted(RECORD))
def test_fields_are_the_function_options_with_its_defaults(name):
    # A new function option without a field (or a changed default) fails here.
    cls = ESTIMATORS[name]
    params = inspect.signature(cls.function).parameters
    options = {k: p.default for k, p in params.items() if k not in COMMON}
    assert set(cls.data_options("record")) == set(options)
    default = cls().options()
    for key, value in options.items():
        if key == "measurement_offset":  # None: the noise mean given at call time, else 0
            assert default[key] is None and value == 0.0
        elif key in PER_DATA_DEFAULT:  # None: left out of the call, so the function's default applies
            assert default[key] is None and value is not None
        elif value is None:
            assert default[key] is None, key
        else:
            assert np.asarray(default[key]).item() == value, key


def test_facts():
    time_history = {n for n, c in RECORD.items() if c.history == "time"}
    assert time_history == {"rls", "ekf", "ukf"}
    assert {n for n, c in ESTIMATORS.items() if c.bound == "nonlinear"} == {"nonlinear_oe"}
    noise_mean = {n for n, c in RECORD.items() if c.takes_noise_mean}
    assert noise_mean == {n for n, c in RECORD.items() if "measurement_offset" in c.option_names()}
    assert {c.model for c in ESTIMATORS.values()} == {"linearised", "nonlinear", "regressor"}
    assert ESTIMATORS["idim_ls"].model == "regressor" and ESTIMATORS["ekf"].model == "nonlinear"


def test_bad_options_fail_with_one_clear_line():
    with pytest.raises(ValueError, match=r"no option 'forgeting'.*forgetting.*Did you mean 'forgetting'\?"):
        make_estimator("rls", {"forgeting": 0.99})
    with pytest.raises(ValueError, match=r"'weighting' must be 'none' or 'joint', got 'pooled'"):
        make_estimator("rls", {"weighting": "pooled"})
    with pytest.raises(ValueError, match=r"'max_steps' must be an integer, got 10.5"):
        make_estimator("ml", {"max_steps": 10.5})
    with pytest.raises(ValueError, match=r"'history_points' must be an integer, got True"):
        make_estimator("ekf", {"history_points": True})
    with pytest.raises(ValueError, match=r"'forgetting' must be a number"):
        make_estimator("rls", {"forgetting": "0.99"})
    with pytest.raises(ValueError, match=r"Unknown estimator 'mll'.*Did you mean 'ml'\?"):
        make_estimator("mll", {})
    with pytest.raises(ValueError, match=r"initial_estimator.*Did you mean 'equation_error'\?"):
        make_estimator("nonlinear_oe", {"initial_estimator": "equation_eror"})
    with pytest.raises(ValueError, match=r"'solver' must be"):
        ESTIMATORS["ml"](solver="newton")  # direct construction checks static options too
    for msg in ("no option", "must be"):
        with pytest.raises(ValueError, match=msg) as err:
            make_estimator("ukf", {"alpha": "x"} if msg == "must be" else {"alfa": 1.0})
        assert "\n" not in str(err.value)
    # TOML integers are fine where a number is expected; lists where an array is.
    est = make_estimator("rls", {"forgetting": 1, "threshold": 20, "initial_guess": GUESS})
    assert est.threshold == 20.0 and est.initial_guess.shape == (4,)


def test_module_call_is_the_function(data):
    arm, split, rec, *_ = data
    mean = 0.003
    # Compiled (one program per call form, not one kernel per eager operation): same bits.
    call = eqx.filter_jit(lambda fn, r, **kw: fn(r, split, arm, unknowns=POINT, **kw))
    by_class = call(IdimLS(threshold=20), rec, noise_mean=mean)
    by_function = call(jaxid.idim_ls, rec, threshold=20.0, measurement_offset=mean)
    np.testing.assert_array_equal(by_class.value, by_function.value)
    np.testing.assert_array_equal(by_class.covariance, by_function.covariance)
    # An explicit measurement_offset option wins over the noise mean.
    explicit = call(IdimLS(threshold=20, measurement_offset=mean), rec, noise_mean=0.5)
    np.testing.assert_array_equal(explicit.value, by_function.value)
    # The noise mean reaches the estimators that take it, and only those.
    for name in ("equation_error", "ekf"):
        ignored = _same_program(_program(data, name, {}), _program(data, name, {}, noise_mean=0.5))
        assert ignored != ESTIMATORS[name].takes_noise_mean


# -- every option reaches the computation -------------------------------------------------------
#
# (estimator, base options, option, other value). The base options put the estimator where the
# option matters (``order`` only acts on the Butterworth filter) or make it cheap to trace.

_IV = {"iterations": 1, "covariance": "white"}
_NL = {"initial_estimator": None}
_REGRESSION = [  # (base options, option, other value)
    ({}, "measurement_offset", 0.01),
    ({}, "derivative", "butterworth"),
    ({}, "keep", "band"),
    ({"keep": "band"}, "cutoff", 100),
    ({}, "threshold", 2.0),
    ({}, "weighting", "none"),
    ({"derivative": "butterworth"}, "order", 2),
]
_FILTER = [
    ("measurement_offset", 0.01),
    ("initial_guess", GUESS),
    ("initial_factor", 1.1),
    ("initial_relative_std", 0.1),
    ("initial_velocity_std", 1.0),
    ("velocity_process_std", 1e-3),
    ("parameter_process_std", 1e-3),
    ("history_points", 5),
]
VARIANTS = [
    ("paper", {"allow_shared_lines": True}, "method", "lstsq"),
    ("paper", {}, "allow_shared_lines", True),
    ("equation_error", {}, "method", "lstsq"),
    ("equation_error", {}, "weighting", "per_line"),
    ("ml", {}, "method", "lstsq"),
    ("ml", {}, "weighting", "per_line"),
    ("ml", {}, "start", "nominal"),
    ("ml", {}, "max_steps", 5),
    ("ml", {}, "rtol", 1e-6),
    ("ml", {}, "atol", 1e-6),
    ("ml", {}, "solver", "gauss_newton"),
    ("nonlinear_oe", _NL, "initial", GUESS),
    ("nonlinear_oe", _NL, "initial_estimator", "equation_error"),
    ("nonlinear_oe", _NL, "substeps", 2),
    ("nonlinear_oe", _NL, "fit_offset", False),
    ("nonlinear_oe", _NL, "max_iterations", 3),
    ("nonlinear_oe", _NL, "rtol", 1e-3),
    ("nonlinear_oe", _NL, "state_tolerance", 1e-3),
    ("nonlinear_oe", _NL, "damping", 1e-2),
    ("nonlinear_oe", _NL, "derivative_cutoff", 20),
    ("nonlinear_oe", _NL, "route", "shooting"),
    ("nonlinear_oe", {**_NL, "route": "shooting"}, "step_tolerance", 0.01),
    ("nonlinear_oe", _NL, "coarse_step", 0.08),
    *[("idim_ls", b, k, v) for b, k, v in _REGRESSION],
    *[("rls", b, k, v) for b, k, v in _REGRESSION],
    ("rls", {}, "forgetting", 0.99),
    ("rls", {}, "initial_covariance", 1e-2),
    ("rls", {}, "initial_guess", GUESS),
    ("rls", {}, "initial_factor", 1.1),
    ("rls", {}, "history_points", 5),
    *[("idim_iv", {**_IV, **b}, k, v) for b, k, v in _REGRESSION],
    ("idim_iv", _IV, "iterations", 2),
    ("idim_iv", _IV, "covariance", "delta"),
    ("idim_iv", _IV, "substeps", 2),
    ("idim_iv", _IV, "newton_iterations", 5),
    *[("ekf", {}, k, v) for k, v in _FILTER],
    *[("ukf", {}, k, v) for k, v in _FILTER],
    ("ukf", {}, "alpha", 0.5),
    ("ukf", {}, "beta", 1.0),
    ("ukf", {}, "kappa", 1.0),
]


def test_every_option_has_a_variant():
    covered = {(name, option) for name, _, option, _ in VARIANTS}
    missing = [(n, o) for n, c in RECORD.items() for o in c.data_options("record") if (n, o) not in covered]
    assert not missing, f"add a VARIANTS entry for {missing}"


_TRACES: dict = {}


def _program(data, name, options, noise_mean=None):
    """The traced estimator (jaxpr text and constants), or the error it raises.

    Tracing is deterministic, so an option that is dropped on the way gives the same program;
    one that is used changes its text (static options) or its constants (traced ones). This
    checks every option without compiling each static value (minutes on 2 cores).
    """
    key = (name, tuple(sorted((k, str(v)) for k, v in options.items())), noise_mean)
    if key not in _TRACES:
        arm, split, rec, same, rec_same = data
        # The paper's route on the same lines: refused unless allow_shared_lines.
        excitation, record = (same, rec_same) if name == "paper" else (split, rec)
        unknowns = ("m1", "m2") if name == "paper" else POINT
        estimator = make_estimator(name, options)
        try:
            closed = jax.make_jaxpr(lambda r: estimator(r, excitation, arm, unknowns=unknowns, noise_mean=noise_mean))(
                record
            )
            _TRACES[key] = (str(closed.jaxpr), [np.asarray(c) for c in closed.consts])
        except ValueError as err:
            _TRACES[key] = ("raised", [str(err)])
    return _TRACES[key]


def _same_program(a, b) -> bool:
    return (
        a[0] == b[0]
        and len(a[1]) == len(b[1])
        and all(np.shape(x) == np.shape(y) and np.array_equal(x, y) for x, y in zip(a[1], b[1], strict=True))
    )


#: Estimators that take seconds to trace on 2 cores.
_SLOW = ("ml", "nonlinear_oe", "idim_iv")


@pytest.mark.parametrize(
    "name, base_options, option, value",
    [pytest.param(*v, id=f"{v[0]}-{v[2]}", marks=[pytest.mark.slow] if v[0] in _SLOW else []) for v in VARIANTS],
)
def test_option_reaches_the_computation(data, name, base_options, option, value):
    before = _program(data, name, base_options)
    assert _same_program(before, _program(data, name, dict(base_options))), "tracing is not deterministic"
    after = _program(data, name, {**base_options, option: value})
    assert not _same_program(before, after), f"{name}: option {option}={value!r} does not change the computation"


def test_every_option_changes_the_estimate(data):
    # The numbers themselves, for an estimator that runs eagerly in well under a second
    # (its ``threshold`` was once accepted and dropped).
    name = "idim_ls"
    arm, split, rec, *_ = data

    def run(**options):
        est = make_estimator(name, options)(rec, split, arm, unknowns=POINT)
        return np.concatenate([np.ravel(est.value), np.ravel(est.covariance)])

    reference = run()
    for vname, base_options, option, value in VARIANTS:
        if vname == name:
            other = run(**{**base_options, option: value})
            start = run(**base_options) if base_options else reference
            assert not np.array_equal(start, other), f"{name}: {option}={value!r} does not change the estimate"


# -- traced options do not recompile ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options",
    [
        ("rls", [{"forgetting": 0.999, "initial_covariance": 1e6}, {"forgetting": 0.99, "initial_covariance": 1e-2}]),
        (
            "ekf",
            [
                {"initial_relative_std": 0.3, "velocity_process_std": 1e-4, "parameter_process_std": 0.0},
                {"initial_relative_std": 0.1, "velocity_process_std": 1e-3, "parameter_process_std": 1e-3},
            ],
        ),
    ],
)
def test_traced_options_compile_once(data, name, options):
    arm, split, rec, *_ = data

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(estimator, record):
        return estimator(record, split, arm, unknowns=POINT, noise_std=NOISE)

    first, second = (run(make_estimator(name, o), rec) for o in options)
    assert not np.array_equal(first.value, second.value)


def test_experiment_files_check_options_as_constructor_arguments():
    from jaxid.config import parse_experiment
    from jaxid.config.common import ConfigError

    def setting(options):
        return {
            "experiment": {"name": "t", "trials": 2},
            "settings": {"a": {"estimators": ["rls"], "estimator_options": {"rls": options}}},
        }

    parse_experiment(setting({"forgetting": 0.999, "history_points": 50}))
    for options, words in [
        ({"forgeting": 0.999}, ["settings.a.estimator_options.rls", "no option 'forgeting'", "'forgetting'"]),
        ({"keep": "detect"}, ["'keep' must be", "Did you mean 'detected'"]),
        ({"history_points": 2.5}, ["'history_points' must be an integer"]),
    ]:
        with pytest.raises(ConfigError) as err:
            parse_experiment(setting(options))
        assert all(w in str(err.value) for w in words), str(err.value)
        assert "\n" not in str(err.value)


def test_a_traced_option_sweeps_under_vmap(data):
    # Traced options are array leaves: one compiled call estimates with several forgetting factors.
    arm, split, rec, *_ = data
    values = [1.0, 0.999, 0.99]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *(RLS(forgetting=v, history_points=4) for v in values))

    @eqx.filter_jit
    def sweep(estimators):
        return eqx.filter_vmap(lambda e: e(rec, split, arm, unknowns=POINT))(estimators)

    swept = sweep(stacked)
    assert swept.value.shape == (3, 4) and swept.history.shape == (3, 4, 4)
    assert np.all(np.isfinite(swept.value)) and np.all(swept.status == 0)
    assert not np.allclose(swept.value[0], swept.value[1], rtol=1e-9)
    assert not np.allclose(swept.value[1], swept.value[2], rtol=1e-9)
