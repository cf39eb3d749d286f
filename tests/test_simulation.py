"""Simulation against exact answers: analytic linear steady state, energy, small-amplitude limit.

Fast settings: multisines with a 10-20 s period instead of the paper's 100 s; compiled functions
are shared through module fixtures.
"""

import subprocess
import sys

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _env import child_env

import jaxid
from jaxid.simulation import DIVERGED, MAX_STEPS, NOT_STEADY, SUCCESS, sincos

SHORT = 2 * np.pi * 0.1  # fundamental of a 10-s multisine
MEDIUM = 2 * np.pi * 0.05  # 20 s


@pytest.fixture(scope="module")
def split20():
    return jaxid.table2("split", fundamental=MEDIUM)


def test_sincos_is_accurate():
    x = np.concatenate([np.linspace(-40, 40, 200_001), np.random.default_rng(0).uniform(-1e5, 1e5, 10_000)])
    s, c = jax.jit(sincos)(x)
    np.testing.assert_allclose(s, np.sin(x), rtol=0, atol=2.3e-16)
    np.testing.assert_allclose(c, np.cos(x), rtol=0, atol=2.3e-16)
    ds = jax.vmap(jax.grad(lambda x: sincos(x)[0]))(x[:100])
    np.testing.assert_allclose(ds, np.cos(x[:100]), atol=1e-15)
    assert np.all(np.isnan(np.asarray(sincos(jnp.array([np.inf, np.nan]))[0])))


@pytest.mark.parametrize("solver,substeps", [("rk4", 2), ("adaptive", 1)])
def test_linear_simulation_equals_analytic_steady_state(arm, split20, solver, substeps):
    # Transient periods derived from the slowest decay rate (tolerance 1e-10).
    rec = jaxid.simulate(arm, split20, model="linear", solver=solver, substeps=substeps, measured_periods=1)
    assert int(rec.status) == SUCCESS
    exact = jaxid.linear_steady_state(arm, split20, rec.t)
    assert float(jnp.max(jnp.abs(exact))) > 0.5  # a response of order 1 rad
    np.testing.assert_allclose(rec.q, exact, rtol=0, atol=1e-8)
    # The record is on the grid t0 + nΔ, whole periods, no repeated end point.
    n = rec.t.shape[0]
    assert n == rec.samples_per_period == 2000
    np.testing.assert_allclose(np.diff(rec.t), 0.01, rtol=1e-9)
    np.testing.assert_allclose(rec.t[0] % split20.period, 0.0, atol=1e-9)
    np.testing.assert_allclose(rec.tau, jaxid.gravity_torque(arm, jnp.zeros(2)) + split20.torque(rec.t), atol=1e-12)


def test_transient_periods_is_where_the_transient_falls_below_the_tolerance(arm, split20):
    """Started on the exact steady state plus the slowest mode alone (unit amplitude in q), the
    linear arm's remaining transient is above the tolerance after n − 1 discarded periods and
    below it after n = transient_periods. The mode comes from numpy's eigendecomposition of the
    state matrix; tolerance 1e-3 lies between e^{−σT} and e^{−2σT} (σ = 0.225 1/s, T = 20 s), with
    a margin of ~10x each side for the oscillation within the envelope."""
    tolerance = 1e-3
    n = jaxid.transient_periods(arm, split20, tolerance=tolerance)
    lin = jaxid.linearise(arm)
    mass, damping, stiffness = (np.asarray(x) for x in (lin.mass, lin.damping, lin.stiffness))
    state = np.block(
        [[np.zeros((2, 2)), np.eye(2)], [-np.linalg.solve(mass, stiffness), -np.linalg.solve(mass, damping)]]
    )
    eigenvalues, modes = np.linalg.eig(state)
    slow = modes[:, np.argmax(eigenvalues.real)]
    slow = slow / np.max(np.abs(slow[:2]))  # envelope of the q part: 1 rad
    steady = lambda t: jaxid.linear_steady_state(arm, split20, t)
    q0, qd0 = jax.jvp(steady, (jnp.zeros(1),), (jnp.ones(1),))
    y0 = jnp.asarray(np.concatenate([q0[0], qd0[0]]) + slow.real)
    arms = jax.tree.map(lambda x: jnp.stack([x, x]), arm)
    rec = jaxid.simulate_batch(
        arms, split20, model="linear", discard_periods=np.array([n - 1, n]), initial_states=jnp.stack([y0, y0])
    )
    left = [float(jnp.max(jnp.abs(rec.q[i] - steady(rec.t[i])))) for i in range(2)]
    assert left[1] < tolerance < left[0]
    with pytest.raises(ValueError, match="pass discard_periods explicitly"):
        jaxid.transient_periods(arm.replace(friction=jnp.zeros(2)), split20)


def test_small_amplitude_nonlinear_approaches_linear(arm, split20):
    scales = jnp.array([0.01, 0.02, 0.04])
    arms = jax.tree.map(lambda x: jnp.stack([x] * 3), arm)
    rec = jaxid.simulate_batch(arms, split20, scales=scales, discard_periods=6)
    assert np.all(np.asarray(rec.status) == SUCCESS)
    rel = []
    for i, s in enumerate(np.asarray(scales)):
        exact = jaxid.linear_steady_state(arm, split20.replace(scale=s), rec.t[i])
        rel.append(float(jnp.max(jnp.abs(rec.q[i] - exact)) / jnp.max(jnp.abs(exact))))
    # The leading nonlinearity is cubic: the relative error grows as scale², x4 per doubling.
    assert rel[0] < 2e-5
    np.testing.assert_allclose(np.array(rel[1:]) / np.array(rel[:-1]), 4.0, rtol=0.1)


def test_solvers_agree(arm, split20):
    kw = dict(discard_periods=6)
    rk4 = jaxid.simulate(arm, split20, **kw)
    adaptive = jaxid.simulate(arm, split20, solver="adaptive", **kw)  # rtol 1e-10, atol 1e-12
    diffrax_rk4 = jaxid.simulate(arm, split20, solver="diffrax-rk4", **kw)
    assert int(rk4.status) == int(adaptive.status) == SUCCESS
    # RK4 at Δ = 0.01 s against the tight adaptive reference (measured 4e-8 rad).
    np.testing.assert_allclose(rk4.q, adaptive.q, rtol=0, atol=1e-7)
    # The hand-written RK4 and diffrax's solver.step with the same tableau: round-off apart.
    np.testing.assert_allclose(rk4.q, diffrax_rk4.q, rtol=0, atol=1e-11)


def test_energy_is_conserved_without_friction_and_input(arm):
    """Zero friction and torque: the energy of a diffrax solution of forward_dynamics is constant,
    and jaxid.simulate follows that solution."""
    free = arm.replace(friction=jnp.zeros(2))
    # A large but regular swing (higher energies make the double pendulum chaotic, and two
    # accurate solutions then part exponentially).
    y0 = jnp.array([0.6, -0.4, 0.3, 0.5])

    def field(t, y, args):
        return jnp.concatenate([y[2:], jaxid.forward_dynamics(free, y[:2], y[2:], jnp.zeros(2))])

    ts = jnp.arange(1000) * 0.01
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        0.0,
        10.0,
        0.01,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-12),
        max_steps=100_000,
    )
    e = jaxid.energy(free, sol.ys[:, :2], sol.ys[:, 2:])
    e0 = float(jaxid.energy(free, y0[:2], y0[2:]))
    kinetic = jaxid.kinetic_energy(free, sol.ys[:, :2], sol.ys[:, 2:])
    assert float(jnp.max(kinetic)) > 1.0  # J: energy really moves between kinetic and potential
    np.testing.assert_allclose(e, e0, rtol=0, atol=1e-9)
    silent = jaxid.Multisine(((1,), (2,)), jnp.zeros((2, 1)), fundamental=SHORT)
    rec = jaxid.simulate(free, silent, discard_periods=0, initial_state=y0, substeps=2)
    np.testing.assert_allclose(rec.q, sol.ys[:, :2], rtol=0, atol=1e-7)
    # Without friction nothing settles: the steady-state check says so.
    assert int(rec.status) == NOT_STEADY


def test_batch_equals_loop_and_compiles_once(arm, monkeypatch):
    ex = jaxid.table2("split", fundamental=SHORT)
    masses = jnp.array([[5.0, 1.5], [4.0, 2.0], [6.0, 1.0]])
    friction = jnp.array([[5.0, 2.0], [4.0, 3.0], [6.0, 1.5]])
    arms = jax.vmap(lambda m, f: jaxid.point_mass(masses=m, friction=f))(masses, friction)
    scales = jnp.array([0.5, 1.0, 0.2])
    y0 = jnp.array([[0.0, 0.0, 0.0, 0.0], [0.1, -0.2, 0.3, 0.0], [0.0, 0.5, 0.0, -0.5]])
    opts = dict(discard_periods=1, measured_periods=2)
    # Count traces of the per-trial function from a fresh compiled runner.
    traces = []
    batch = sys.modules["jaxid.simulation.batch"]
    monkeypatch.setattr(batch, "trajectory", lambda *a, real=batch.trajectory, **k: traces.append(1) or real(*a, **k))
    batch._runner.cache_clear()
    rec = jaxid.simulate_batch(arms, ex, scales=scales, initial_states=y0, **opts)
    assert len(traces) == 1
    assert rec.q.shape == (3, 2000, 2) and rec.status.shape == (3,)
    for i in range(3):
        one = jaxid.simulate(
            jax.tree.map(lambda x, i=i: x[i], arms), ex.replace(scale=scales[i]), initial_state=y0[i], **opts
        )
        np.testing.assert_allclose(rec.q[i], one.q, rtol=0, atol=1e-12)
        np.testing.assert_allclose(rec.tau[i], one.tau, rtol=0, atol=1e-12)
        assert int(rec.status[i]) == int(one.status)
        np.testing.assert_allclose(rec.steady_change[i], one.steady_change, rtol=1e-9, atol=1e-15)
    # Other values of every traced input, same shapes: no second trace of the trial function.
    reverse = lambda tree: jax.tree.map(lambda x: x[::-1], tree)
    again = jaxid.simulate_batch(reverse(arms), ex, scales=scales[::-1], initial_states=y0[::-1], **opts)
    assert len(traces) == 1
    np.testing.assert_array_equal(again.q[::-1], rec.q)


_FOUR_DEVICES = """
import os
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxid
assert len(jax.devices()) == 4
ex = jaxid.table2("split", fundamental=2 * np.pi * 0.1)
masses = jnp.array([[5.0, 1.5], [4.0, 2.0], [6.0, 1.0], [5.5, 1.2], [4.5, 1.8], [5.0, 2.5]])
friction = jnp.array([[5.0, 2.0], [4.0, 3.0], [6.0, 1.5], [5.0, 2.5], [4.5, 2.0], [5.5, 1.8]])
arms = jax.vmap(lambda m, f: jaxid.point_mass(masses=m, friction=f))(masses, friction)
scales = jnp.array([0.5, 1.0, 0.2, 0.7, 0.3, 0.9])
y0 = jnp.zeros((6, 4)).at[:, 1].set(jnp.linspace(-0.3, 0.3, 6))
opts = dict(scales=scales, initial_states=y0, discard_periods=1, measured_periods=2)
sharded = jaxid.simulate_batch(arms, ex, **opts)  # 6 trials padded to 8: two per device
assert sharded.q.shape == (6, 2000, 2)
alone = jaxid.simulate_batch(arms, ex, shard=False, **opts)
np.testing.assert_allclose(sharded.q, alone.q, rtol=0, atol=1e-12)
np.testing.assert_array_equal(sharded.status, alone.status)
assert np.isfinite(np.asarray(sharded.q)).all()
"""


@pytest.mark.slow  # end to end (subprocesses or a whole fit): the quick tier leaves it out
def test_batch_sharded_over_four_devices_equals_one_device():
    """A batch that is not a multiple of the device count, sharded over 4 host devices (a fresh
    process: the device count is fixed at start-up), equals the unsharded batch."""
    env = child_env()
    subprocess.run([sys.executable, "-c", _FOUR_DEVICES], check=True, env=env, timeout=600)


def test_parameter_sweep_compiles_once(arm):
    """Masses, friction, scale and initial state are traced: one trace for the whole sweep."""
    ex = jaxid.table2(fundamental=SHORT)

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(a, scale, y0):
        return jaxid.simulate(a, ex.replace(scale=scale), discard_periods=1, initial_state=y0).q[-1]

    for m2, fv, s in [(1.5, 2.0, 1.0), (1.0, 3.0, 0.5), (2.5, 1.0, 0.1)]:
        run(arm.replace(m2=m2, fv2=fv), s, jnp.array([0.0, 0.1, 0.0, 0.0]))


def test_bad_inputs_raise(arm):
    ex = jaxid.table2(fundamental=SHORT)
    with pytest.raises(ValueError, match="does not divide the period"):
        jaxid.simulate(arm, ex, sample_step=0.03, discard_periods=1)
    with pytest.raises(ValueError, match="solver must be one of"):
        jaxid.simulate(arm, ex, solver="rk45", discard_periods=1)
    with pytest.raises(ValueError, match="model must be 'nonlinear' or 'linear'"):
        jaxid.simulate(arm, ex, model="linearised", discard_periods=1)
    with pytest.raises(ValueError, match="substeps must be a positive integer"):
        jaxid.simulate(arm, ex, substeps=0, discard_periods=1)
    with pytest.raises(ValueError, match="whole periods"):
        jaxid.simulate(arm, ex, measured_periods=0, discard_periods=1)
    with pytest.raises(ValueError, match="non-negative integer or None"):
        jaxid.simulate(arm, ex, discard_periods=-1)
    with pytest.raises(ValueError, match=r"q0 must have shape \(2,\)"):
        jaxid.simulate(arm, ex, q0=(0.0, 0.0, 0.0), discard_periods=1)
    with pytest.raises(ValueError, match=r"initial_state must be \(q1, q2, q1', q2'\)"):
        jaxid.simulate(arm, ex, initial_state=jnp.zeros(2), discard_periods=1)
    with pytest.raises(ValueError, match="masses must be positive"):
        jaxid.point_mass(masses=(5.0, -1.5))
    arms = jax.tree.map(lambda x: jnp.stack([x, x]), arm)
    with pytest.raises(ValueError, match=r"Unknown simulation option\(s\) \['solvr'\]"):
        jaxid.simulate_batch(arms, ex, solvr="rk4", discard_periods=1)
    with pytest.raises(ValueError, match="leading batch axis"):
        jaxid.simulate_batch(arm, ex, discard_periods=1)
    with pytest.raises(ValueError, match=r"initial_states must have shape \(2, 4\)"):
        jaxid.simulate_batch(arms, ex, initial_states=jnp.zeros((3, 4)), discard_periods=1)


def test_status_flags_instead_of_silent_nan(arm):
    ex = jaxid.table2(fundamental=SHORT)
    # ok; driven over the top hard enough to run away; unstable (negative friction, traced so the
    # constructor check cannot see it); barely damped (not steady after eight periods).
    friction = jnp.array([[5.0, 2.0], [5.0, 2.0], [-3.0, -3.0], [0.01, 0.01]])
    arms = jax.vmap(lambda f: arm.replace(friction=f))(friction)
    scales = jnp.array([1.0, 1e5, 1.0, 1.0])
    rec = jaxid.simulate_batch(arms, ex, scales=scales, discard_periods=8)
    status = np.asarray(rec.status)
    np.testing.assert_array_equal(status, [SUCCESS, DIVERGED, DIVERGED, NOT_STEADY])
    bad = ~np.all(np.isfinite(np.asarray(rec.q)), axis=(1, 2))
    assert np.all(status[bad] != SUCCESS)
    # The adaptive solver flags running out of steps.
    short = jaxid.simulate(arm, ex, solver="adaptive", discard_periods=1, max_steps=50)
    assert int(short.status) == MAX_STEPS


def test_one_discarded_period_is_enough_when_the_transient_has_died(arm):
    # Slowest decay 0.225 1/s: after one 100-s period the transient is ~1e-10 of the response.
    # The steady-state check compares the measured periods' boundaries, not the rest state.
    ex = jaxid.table2("split", 0.25)
    rec = jaxid.simulate(arm, ex, sample_step=0.05, discard_periods=1, measured_periods=2)
    assert int(rec.status) == SUCCESS
    assert float(rec.steady_change) < 1e-8


def test_concrete_simulate_and_bound_run_compiled(arm, caplog):
    """``simulate`` and ``linear_crlb`` called on concrete inputs run as one compiled program
    (``jaxid.types.compiled_when_concrete``): the numbers of the same call compiled by hand, and a
    second call with other values of the same shapes compiles nothing."""
    ex = jaxid.table2("split", fundamental=SHORT)
    unknowns = ("m1", "m2", "fv1", "fv2")
    rec = jaxid.simulate(arm, ex, discard_periods=1)
    by_hand = jax.jit(lambda a, e: jaxid.simulate(a, e, discard_periods=1))(arm, ex)
    np.testing.assert_array_equal(rec.q, by_hand.q)
    np.testing.assert_array_equal(rec.tau, by_hand.tau)
    bound = jaxid.linear_crlb(arm, ex, unknowns, noise_std=0.01)
    np.testing.assert_array_equal(bound, jax.jit(lambda a: jaxid.linear_crlb(a, ex, unknowns, noise_std=0.01))(arm))
    other = arm.replace(m2=2.0, fv2=3.0)
    with jax.log_compiles(), caplog.at_level("WARNING"):
        again = jaxid.simulate(other, ex.replace(scale=0.5), discard_periods=1)
        jaxid.linear_crlb(other, ex, unknowns, noise_std=0.01)
    compiled = [r.getMessage() for r in caplog.records if "XLA compilation" in r.getMessage()]
    assert not compiled, compiled
    assert not np.array_equal(again.q, rec.q)  # the new values reached the computation
