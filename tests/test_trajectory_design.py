"""Excitation design by gradient (``jaxid.excitation.fourier_design``) on the two-link URDF arm.

Anchors: the bound equals numpy normal equations on a regressor built independently (inverse
dynamics of unit parameter vectors, by linearity) and the Monte Carlo covariance of weighted least
squares; the gradients equal central finite differences; a design meets the joint limits at the
margin on a dense grid and lowers its criterion. Small sizes: two harmonics, 32 samples per period.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.excitation.fourier import (
    FourierTrajectory,
    JointLimits,
    check_limits,
    joint_limits,
    random_fourier_trajectory,
)
from jaxid.excitation.fourier_design import design_trajectory
from jaxid.excitation.fourier_information import (
    DEFAULT_FLOORS,
    base_parameter_bound,
    information_matrix,
    parameter_magnitudes,
    regressor_condition,
    relative_bound_trace,
)
from jaxid.model.base_parameters import base_parameters
from jaxid.model.urdf import load_arm

ROOT = Path(__file__).resolve().parent.parent
ROBOTS = ROOT / "data" / "robots"
SAMPLES = 32
PERIODS = 3
NOISE = np.array([0.2, 0.05])  # N m, per joint


@pytest.fixture(scope="module")
def setup():
    arm = load_arm(ROBOTS / "two_link.urdf", armature=0.02, offset=(0.3, -0.1))
    arm = arm.with_parameters(["fc1", "fc2"], jnp.array([0.4, 0.2]))
    base = base_parameters(arm)
    traj = random_fourier_trajectory(arm, 2, 5.0, key=jax.random.key(3))
    return arm, base, traj


def _independent_regressor(arm, base, traj):
    """``W_b`` ``(samples · n, r)`` from the inverse dynamics of unit standard vectors (numpy)."""
    t = np.arange(SAMPLES) * traj.period / SAMPLES
    q, qd, qdd = traj.evaluate(t)
    zero = arm.with_standard_parameters(jnp.zeros(len(arm.standard_names)))
    tau0 = np.asarray(zero.inverse_dynamics(q, qd, qdd))
    cols = []
    for i in base.independent:
        unit = np.zeros(len(arm.standard_names))
        unit[i] = 1.0
        cols.append(np.asarray(arm.with_standard_parameters(unit).inverse_dynamics(q, qd, qdd)) - tau0)
    return np.stack(cols, axis=-1)  # (samples, n, r)


def test_bound_equals_numpy_normal_equations(setup):
    arm, base, traj = setup
    w = _independent_regressor(arm, base, traj)
    ww = (w / NOISE[None, :, None]).reshape(-1, base.rank)
    expected = np.linalg.inv(PERIODS * ww.T @ ww)
    bound = np.asarray(base_parameter_bound(arm, base, traj, noise_std=NOISE, samples=SAMPLES, periods=PERIODS))
    np.testing.assert_allclose(bound, expected, rtol=1e-8, atol=1e-12 * np.abs(expected).max())
    d = np.asarray(parameter_magnitudes(base, arm.standard_parameters()))
    trace = relative_bound_trace(arm, base, traj, noise_std=NOISE, magnitudes=d, samples=SAMPLES, periods=PERIODS)
    np.testing.assert_allclose(float(trace), np.trace(expected / np.outer(d, d)), rtol=1e-8)
    cond = regressor_condition(arm, base, traj, samples=SAMPLES)
    np.testing.assert_allclose(float(cond), np.linalg.cond(w.reshape(-1, base.rank)), rtol=1e-6)


def test_bound_matches_monte_carlo_least_squares(setup):
    arm, base, traj = setup
    w = _independent_regressor(arm, base, traj)
    w = np.tile(w, (PERIODS, 1, 1))  # the same samples in every period
    rows = (w / NOISE[None, :, None]).reshape(-1, base.rank)
    pinv = np.linalg.pinv(rows)
    rng = np.random.default_rng(0)
    trials = 4000
    noise = rng.standard_normal((trials, rows.shape[0]))  # already divided by the noise std
    errors = noise @ pinv.T  # weighted LS error of each trial, (trials, r)
    bound = np.asarray(base_parameter_bound(arm, base, traj, noise_std=NOISE, samples=SAMPLES, periods=PERIODS))
    empirical = errors.T @ errors / trials
    # the variances within 5 standard errors of a chi-square estimate of 4000 draws (≈ 11 %)
    np.testing.assert_allclose(np.diag(empirical), np.diag(bound), rtol=5 * np.sqrt(2 / trials))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_gradients_match_finite_differences(setup):
    arm, base, traj = setup
    d = parameter_magnitudes(base, arm.standard_parameters())

    @jax.jit
    def criteria(a):
        t = FourierTrajectory(traj.offset, a, traj.b, traj.period)
        bound = relative_bound_trace(arm, base, t, noise_std=NOISE, magnitudes=d, samples=SAMPLES)
        return jnp.stack([jnp.log(bound), jnp.log(regressor_condition(arm, base, t, samples=SAMPLES))])

    direction = jax.random.normal(jax.random.key(1), traj.a.shape)
    jac = jax.jit(jax.jacrev(criteria))(traj.a)
    analytic = np.asarray(jnp.einsum("cjl,jl->c", jac, direction))
    h = 1e-5
    numeric = (np.asarray(criteria(traj.a + h * direction)) - np.asarray(criteria(traj.a - h * direction))) / (2 * h)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5)


@pytest.mark.parametrize("criterion", ["bound", "condition"])
def test_design_meets_the_limits_and_lowers_its_criterion(setup, criterion):
    arm, base, _ = setup
    margin = 0.8
    design = design_trajectory(
        arm, harmonics=2, period=5.0, noise_std=NOISE, criterion=criterion, steps=40, samples=SAMPLES, margin=margin
    )
    limits = joint_limits(arm)
    dense = check_limits(design.trajectory, limits, samples=8192)
    worst = max(float(r) for r in dense)
    assert worst <= margin * (1 + 1e-5)
    # every joint has a binding limit at the margin on check_limits' grid
    assert max(float(r) for r in design.limit_ratios) == pytest.approx(margin, rel=1e-9)
    start, end = (
        (design.bound_start, design.bound_end)
        if criterion == "bound"
        else (design.condition_start, design.condition_end)
    )
    assert end < 0.9 * start
    assert design.iterations >= 1 and design.criterion == criterion


def test_magnitudes_floor_zero_parameters(setup):
    arm, base, _ = setup
    d = np.asarray(parameter_magnitudes(base, jnp.zeros(len(arm.standard_names))))
    kinds = {"fv": "viscous", "fc": "coulomb", "off": "offset", "Ia": "inertia"}
    for name, value in zip(base.names, d, strict=True):
        prefix = name.rstrip("0123456789")
        if prefix in kinds:
            assert value == DEFAULT_FLOORS[kinds[prefix]]
    theta = np.asarray(base.values(arm.standard_parameters()))
    big = np.abs(theta) > 1.0
    np.testing.assert_allclose(
        np.asarray(parameter_magnitudes(base, arm.standard_parameters()))[big], np.abs(theta[big])
    )


def test_information_scales_with_periods_and_noise(setup):
    arm, base, traj = setup
    f1 = information_matrix(arm, base, traj, noise_std=1.0, samples=SAMPLES)
    f2 = information_matrix(arm, base, traj, noise_std=2.0, samples=SAMPLES, periods=4)
    np.testing.assert_allclose(np.asarray(f2), np.asarray(f1), rtol=1e-12)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"criterion": "trace"}, "criterion must be one of"),
        ({"noise_std": 0.0}, "noise_std must be positive"),
        ({"noise_std": -1.0}, "noise_std must be positive"),
        ({"noise_std": [0.1, 0.1, 0.1]}, "noise_std must be positive"),
        ({"harmonics": 0}, "harmonics must be a positive integer"),
        ({"steps": 0}, "steps must be a positive integer"),
        ({"margin": 1.5}, "margin must be a number in"),
        ({"column_scaling": "max"}, "column_scaling must be"),
        (
            {"limits": JointLimits(jnp.array([[-1.0, 1.0], [0.0, 0.0]]), jnp.ones(2), jnp.ones(2), jnp.ones(2))},
            "infeasible limits",
        ),
        (
            {
                "limits": JointLimits(
                    jnp.array([[-1.0, 1.0], [-1.0, 1.0]]), jnp.array([1.0, 0.0]), jnp.ones(2), jnp.ones(2)
                )
            },
            "infeasible limits",
        ),
    ],
)
def test_bad_input_is_a_one_line_value_error(setup, options, message):
    arm, base, _ = setup
    kwargs = {"harmonics": 2, "period": 5.0, "noise_std": 0.1, "steps": 1, "base": base, **options}
    with pytest.raises(ValueError, match=message) as info:
        design_trajectory(arm, **kwargs)
    assert "\n" not in str(info.value)


# -- the paper's multisine on the two-link arm: line amplitudes against the linear bound ----------


def test_line_amplitudes_keep_each_joints_power_and_lower_the_linear_bound():
    import jaxid
    from jaxid.excitation.multisine_design import design_line_amplitudes

    excitation = jaxid.table2("split", scale=0.5)
    design = design_line_amplitudes(jaxid.table1(), excitation, noise_std=0.01, steps=15)
    power = np.sum(np.asarray(design.excitation.amplitudes) ** 2, axis=1)
    np.testing.assert_allclose(power, np.sum(np.asarray(excitation.amplitudes) ** 2, axis=1), rtol=1e-12)
    assert design.excitation.harmonics == excitation.harmonics
    assert design.bound_end < 0.8 * design.bound_start
    np.testing.assert_allclose(np.sum(np.square(design.relative_std_start)), design.bound_start, rtol=1e-12)
    with pytest.raises(ValueError, match="noise_std must be positive"):
        design_line_amplitudes(jaxid.table1(), excitation, noise_std=0.0)


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_readme_example_runs(capsys, monkeypatch):
    import re

    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Excitation designed by gradient\n.*?```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README excitation design", "exec"), namespace)
    design = namespace["design"]
    assert design.bound_end < design.bound_start
    assert max(float(r) for r in design.limit_ratios) == pytest.approx(0.9, rel=1e-9)


def test_design_meets_binding_position_limits_off_the_middle(setup):
    """Position limits that bind, a start whose offsets are away from the middle of the range."""
    arm, base, _ = setup
    margin = 0.8  # the steps and margin of the bound design above: its compiled solve is reused
    limits = JointLimits(
        jnp.array([[-0.3, 0.5], [-0.2, 0.2]]), jnp.array([5.0, 5.0]), jnp.array([50.0, 50.0]), jnp.full(2, jnp.inf)
    )
    start = random_fourier_trajectory(limits, 2, 5.0, key=jax.random.key(7), margin=margin)
    start = FourierTrajectory(start.offset + 0.3 * margin * limits.half_range, start.a, start.b, start.period)
    design = design_trajectory(
        arm,
        harmonics=2,
        period=5.0,
        noise_std=NOISE,
        limits=limits,
        start=start,
        steps=40,
        samples=SAMPLES,
        margin=margin,
    )
    dense = check_limits(design.trajectory, limits, samples=8192)
    assert float(dense.position) <= margin * (1 + 1e-5)
    assert float(design.limit_ratios.position) == pytest.approx(margin, rel=1e-9)
    assert float(jnp.max(jnp.abs(design.trajectory.offset - limits.middle))) > 1e-3  # the offset path is used
    assert design.bound_end < design.bound_start
