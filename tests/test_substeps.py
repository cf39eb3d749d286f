"""RK4 substeps per log sample (``jaxid.estimate.logs.stepping``): ``model_step(substeps=k)`` and the
stiffness rule ``stable_substeps``, against a stiff linear joint whose solution is known exactly.

The joint ``m q'' + c q' + k q = τ`` (regressor ``[q'', q', q]``, ``θ = (m, c, k)``) with ``c² ≫ 4 m k`` has
real poles ``s₁ ≈ −k/c`` and ``s₂ ≈ −c/m``; under a torque ramp ``τ = a + b t`` (which the stage torques
interpolate exactly) its solution is ``q = A e^{s₁ t} + B e^{s₂ t} + (a + b t)/k − c b/k²``.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.estimate.logs.data import FilteredLog
from jaxid.estimate.logs.stepping import (
    model_step,
    simulate_segments,
    stable_substeps,
    stable_substeps_many,
    stage_torques,
)

M, C, K = 1.0, 600.0, 1000.0
H = 0.01  # h |s₂| ≈ 6.0: beyond RK4's stability limit (≈ 2.8) with one step per sample
A_TAU, B_TAU = 5.0, 20.0
STEPS = 200


def regressor(q, qd, qdd):
    return jnp.stack([qdd, qd, q], axis=-1)  # (..., 1, 3)


THETA = jnp.asarray([M, C, K])
POLES = np.roots([M, C, K])  # both real and negative


def exact(t, q0, v0):
    """The closed-form solution from ``(q0, v0)`` under the ramp torque."""
    s1, s2 = POLES
    qp0, vp = A_TAU / K - C * B_TAU / K**2, B_TAU / K  # the particular solution's value at 0 and slope
    # A + B = q0 − qp0; s1 A + s2 B = v0 − vp
    b = ((v0 - vp) - s1 * (q0 - qp0)) / (s2 - s1)
    a = (q0 - qp0) - b
    q = a * np.exp(s1 * t) + b * np.exp(s2 * t) + (A_TAU + B_TAU * t) / K - C * B_TAU / K**2
    v = a * s1 * np.exp(s1 * t) + b * s2 * np.exp(s2 * t) + B_TAU / K
    return q, v


def _simulate(substeps):
    t = H * np.arange(STEPS + 1)
    tau = jnp.asarray((A_TAU + B_TAU * t)[:, None])
    y0 = jnp.asarray([[0.3, -2.0]])
    run = jax.jit(simulate_segments, static_argnums=(0, 4, 5, 6))
    return t, np.asarray(run(regressor, THETA, y0, stage_torques(tau)[None], H, None, substeps))[0]


def _log():
    t = H * np.arange(STEPS + 1)
    q, v = exact(t, 0.3, -2.0)
    tau = A_TAU + B_TAU * t
    col = lambda x: jnp.asarray(np.asarray(x, dtype=float)[:, None])  # noqa: E731
    return FilteredLog(
        col(t)[:, 0],
        col(q),
        col(q),
        col(v),
        col(np.zeros_like(t)),
        col(tau),
        col(tau),
        "stiff",
        H,
        5.0,
        "butterworth",
        2,
    )


def test_rule_finds_the_exact_pole_and_the_substeps():
    substeps, stiffness = stable_substeps(regressor, THETA, [_log()])
    assert stiffness == pytest.approx(H * abs(POLES).max(), rel=1e-10)  # the linear joint's Jacobian is exact
    assert substeps == math.ceil(H * abs(POLES).max() / 2.5) == 3


def test_many_models_each_get_their_own_exact_pole():
    """``stable_substeps_many`` (IDIM-IV's batched passes): each model's rule from its own exact pole, in blocks of
    ``width`` with the last padded, a model whose Jacobian is not finite at 1 (as ``stable_substeps``), and a
    model's answer the same whatever its neighbours and the width."""
    dampings = [600.0, 1.0, 1500.0, 300.0, np.nan]  # stiff, not stiff, stiffer, mildly stiff, not finite
    thetas = [np.array([M, c, K]) for c in dampings]
    runs = [[_log()]] * len(thetas)
    for width in (1, 2, 10):
        got = stable_substeps_many(regressor, thetas, runs, width=width)
        for (substeps, stiffness), c in zip(got[:-1], dampings[:-1], strict=True):
            radius = H * abs(np.roots([M, c, K])).max()
            assert stiffness == pytest.approx(radius, rel=1e-10)
            assert substeps == max(1, math.ceil(radius / 2.5))
        assert got[-1][0] == 1 and math.isnan(got[-1][1])
        assert [s for s, _ in got] == [3, 1, 6, 2, 1]
    assert stable_substeps_many(regressor, [], []) == []
    with pytest.raises(ValueError, match="2 models for 1 sets of logs"):
        stable_substeps_many(regressor, thetas[:2], runs[:1])


def test_substeps_follow_the_exact_solution_where_one_step_diverges():
    substeps, _ = stable_substeps(regressor, THETA, [_log()])
    t, ys = _simulate(substeps)
    q, v = exact(t, 0.3, -2.0)
    np.testing.assert_allclose(ys[:, 0], q, atol=2e-4)
    # The fast mode (time constant 1.7 ms) is damped by RK4 at h |s₂| / 3 ≈ 2 less exactly than e^{-2}, and
    # decays within the first samples either way: the velocity is compared after them.
    np.testing.assert_allclose(ys[3:, 1], v[3:], atol=5e-3 * np.abs(v[3:]).max())
    _, one = _simulate(1)
    assert not np.all(np.abs(one[:, 0] - q) < 1.0)  # one step per sample: unstable (|R(h s₂)| > 1)


def test_two_substeps_are_two_half_steps():
    """``substeps = 2`` at ``h`` equals one step per sample on the grid of ``h / 2`` (torque interpolated)."""
    t = H * np.arange(STEPS + 1)
    tau = jnp.asarray((A_TAU + B_TAU * t**2)[:, None])  # curved: the stage torques set the interpolation
    y0 = jnp.asarray([0.3, -2.0])
    stages = stage_torques(tau)
    fine = stage_torques(jnp.asarray(np.stack([tau[:-1, 0], 0.5 * (tau[:-1, 0] + tau[1:, 0])], 1).reshape(-1, 1)))
    two = jax.jit(lambda y, u: model_step(regressor, THETA, y, u, H, None, 2))(y0, stages[0])
    halves = jax.jit(lambda y, u: model_step(regressor, THETA, y, u, H / 2))
    half = halves(halves(y0, fine[0]), jnp.stack([fine[1, 0], 0.5 * (fine[1, 0] + tau[1]), tau[1]]))
    np.testing.assert_allclose(two, half, rtol=1e-14, atol=1e-15)


def test_one_substep_is_the_default_bit_for_bit():
    t = H * np.arange(21)
    tau = jnp.asarray((A_TAU + B_TAU * t)[:, None])
    y0 = jnp.asarray([[0.3, -2.0]])
    run = jax.jit(simulate_segments, static_argnums=(0, 4, 5, 6))
    theta = jnp.asarray([M, 1.0, K])  # not stiff: h λ < 1
    default = jax.jit(simulate_segments, static_argnums=(0, 4, 5))(
        regressor, theta, y0, stage_torques(tau)[None], H, None
    )
    np.testing.assert_array_equal(run(regressor, theta, y0, stage_torques(tau)[None], H, None, 1), default)


def test_a_traced_count_equals_the_static_one_in_one_program():
    """``substeps`` as a traced integer (``integrate_sample``'s ``fori_loop``: trials of different counts in
    one program, ``jaxid.benchmark.batched_iv``) gives the static count's states, lane by lane under ``vmap``
    with each lane at its own count (measured: equal to the last bit here); one compiled program for all."""
    t = H * np.arange(41)
    tau = jnp.asarray((A_TAU + B_TAU * t**2)[:, None])  # curved: the substeps' torques matter
    y0 = jnp.asarray([[0.3, -2.0]])
    stages = stage_torques(tau)[None]
    static = jax.jit(simulate_segments, static_argnums=(0, 4, 5, 6))
    traced = jax.jit(
        jax.vmap(lambda k: simulate_segments(regressor, THETA, y0, stages, H, None, k)[0]),
    )
    counts = np.array([1, 3, 2, 5])
    lanes = np.asarray(traced(jnp.asarray(counts, jnp.int32)))
    for lane, k in zip(lanes, counts, strict=True):
        expected = np.asarray(static(regressor, THETA, y0, stages, H, None, int(k)))[0]
        np.testing.assert_allclose(lane, expected, rtol=1e-13, atol=1e-15)
    assert traced._cache_size() == 1
