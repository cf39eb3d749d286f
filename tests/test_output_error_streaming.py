"""Output error by streamed normal equations against a dense reference.

``output_error`` never forms the Jacobian: it accumulates ``JᵀJ`` and ``Jᵀr`` chunk by chunk of segments
and eliminates the initial states (``jaxid.estimate.logs.shooting``). The reference here is the
direct route it replaces: the whole residual vector as one JAX function of ``(θ, x_1 … x_S)``, its dense
Jacobian by ``jax.jacfwd``, ``scipy.optimize.least_squares(method="trf", x_scale="jac", xtol=1e-10)``,
and the covariance ``σ̂² (JᵀJ)⁻¹`` from an SVD of the column-scaled Jacobian.

- Two-link log (7 segments): the same iterates (the trust-region steps are scipy's, solved on the
  normal equations): estimate to 1e-9 relative, covariance to 1e-7 of its largest entry, the same
  status, iterations and condition (1e-6).
- Small UR5 log (58 base parameters, 3 segments; slow): estimate to 1e-6 relative; covariance to 2 % of
  each standard deviation (normal equations square the condition number, about 4e5 here: the dense
  SVD route is the more accurate one).
- The covariance options: the segment sandwich (default, segments as clusters; and over 2 lags) and
  ``σ̂² (JᵀJ)⁻¹`` (``lags=-1``), each against the same formula on the dense Jacobian.
- The chunk size does not change the result (1e-10), logs of other lengths reuse the compiled chunk
  program, the identity parametrisation is plain output error.
- Fits in lockstep (``output_error_batch``) equal each fit alone, a failing fit is its own error, and a fit's
  numbers do not depend on the others in the call.

No timings or memory here: ``scripts/bench_fit_cost.py`` measures them.
"""

import dataclasses
import importlib
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _simulated_log import filtered_two_link
from scipy.optimize import least_squares

import jaxid
from jaxid.estimate.logs import filter_log, idim_ls, output_error, output_error_batch
from jaxid.estimate.logs.data import angle_noise_std
from jaxid.estimate.logs.idim import segment_starts
from jaxid.estimate.logs.stepping import simulate_segments, stage_torques
from jaxid.excitation.fourier import random_fourier_trajectory
from jaxid.measure.logs import MeasuredLog

UR5 = Path(__file__).resolve().parent.parent / "data" / "robots" / "ur5_robot.urdf"
#: The chunk program.
PROGRAM = importlib.import_module("jaxid.estimate.logs.shooting_passes")._shooting_blocks
#: The scipy route step for step (``shooting_solvers.trust_region_steps``): the same iterates as the dense reference.
TRF = "trust_region"


def dense_problem(logs, regressor, names, start, *, segment_s=0.5, stride=5, weight=100.0):
    """The residual vector of ``output_error`` (angles, then continuity gaps) as one JAX function of
    ``z = (θ, x_1 … x_S)``: ``(fun, its dense Jacobian, z0, segments' log indices, angle rows)``."""
    h, n = logs[0].sample_step, logs[0].joints
    length = max(stride, int(round(segment_s / h)))
    sigma = angle_noise_std(logs)
    x0, torques, meas, links, owner = [], [], [], [], []
    for i, d in enumerate(logs):
        starts = segment_starts(d, length)
        first = sum(len(x) for x in x0)
        x0.append(np.concatenate([np.asarray(d.q)[starts], np.asarray(d.qd)[starts]], 1))
        torques.append(np.asarray(stage_torques(d.tau))[starts[:, None] + np.arange(length)])
        meas.append(np.asarray(d.q_raw)[starts[:, None] + np.arange(0, length, stride)])
        links += [(first + k, first + k + 1) for k in range(len(starts) - 1)]
        owner += [i] * len(starts)
    x0, torques, meas = (np.concatenate(a) for a in (x0, torques, meas))
    a, b = np.asarray(links).T
    scale = jnp.asarray(np.concatenate([1 / sigma, length * h / sigma]) * weight)
    p, m = len(names), 2 * n

    @jax.jit
    def fun(z):
        states = simulate_segments(regressor, z[:p], z[p:].reshape(-1, m), jnp.asarray(torques), h)
        res = (states[:, :-1:stride, :n] - meas) / sigma
        gaps = (states[a, -1] - z[p:].reshape(-1, m)[b]) * scale
        return jnp.concatenate([res.reshape(-1), gaps.reshape(-1)])

    z0 = np.concatenate([np.asarray(start.value), x0.reshape(-1)])
    return fun, jax.jit(jax.jacfwd(fun)), z0, np.asarray(owner), meas.size


def dense_output_error(logs, regressor, names, start, *, segment_s=0.5, stride=5, weight=100.0, max_nfev=50):
    """``dense_problem`` solved by scipy's trust-region solver: ``(θ, white covariance, status, Jacobian
    evaluations, condition, sandwich)``, ``sandwich(lags)`` the segment sandwich from the dense Jacobian:
    ``H = JᵀJ`` over all unknowns, each segment's angle rows a cluster with score ``J_sᵀ r_s`` (every
    column), Bartlett-weighted over ``lags`` neighbouring segments of one log, ``[H⁻¹ M H⁻¹]_θθ · rows / dof``."""
    fun, jac, z0, owner, angle_rows = dense_problem(
        logs, regressor, names, start, segment_s=segment_s, stride=stride, weight=weight
    )
    p = len(names)
    sol = least_squares(
        lambda z: np.asarray(fun(z)),
        z0,
        jac=lambda z: np.asarray(jac(z)),
        method="trf",
        x_scale="jac",
        max_nfev=max_nfev,
        xtol=1e-10,
    )
    j, r = np.asarray(jac(sol.x)), np.asarray(fun(sol.x))
    s2 = float(r @ r) / (r.size - j.shape[1])
    col = np.linalg.norm(j, axis=0)
    _, s, vt = np.linalg.svd(j / col, full_matrices=False)
    cov = s2 * ((vt.T / s**2) @ vt / np.outer(col, col))[:p, :p]
    info = j.T @ j
    reduced = info[:p, :p] - info[:p, p:] @ np.linalg.solve(info[p:, p:], info[p:, :p])
    d = np.sqrt(np.diag(reduced))
    ev = np.linalg.eigvalsh(reduced / np.outer(d, d))
    status = "max_iterations" if sol.status == 0 else "ok"
    segments = len(owner)
    scores = np.einsum(
        "skc,sk->sc", j[:angle_rows].reshape(segments, -1, j.shape[1]), r[:angle_rows].reshape(segments, -1)
    )

    def sandwich(lags):
        meat = scores.T @ scores
        for lag in range(1, lags + 1):
            for s in range(segments - lag):
                if owner[s] == owner[s + lag]:
                    cross = np.outer(scores[s + lag], scores[s])
                    meat += (1 - lag / (lags + 1)) * (cross + cross.T)
        inverse = np.linalg.inv(info)
        return (r.size / (r.size - j.shape[1]) * inverse @ meat @ inverse)[:p, :p]

    return sol.x[:p], cov, status, int(sol.njev), float(np.sqrt(ev.max() / ev.min())), sandwich


@pytest.fixture(scope="module")
def two_link(tmp_path_factory):
    regressor, names, logs, ls = filtered_two_link(tmp_path_factory.mktemp("streaming"))
    return regressor, names, logs, ls, output_error(logs, regressor, names, start=ls, solver=TRF)


def _close(est, theta, cov, *, rtol_theta, rtol_cov):
    np.testing.assert_allclose(est.value, theta, rtol=rtol_theta, atol=rtol_theta * np.abs(theta).max())
    np.testing.assert_allclose(est.covariance, cov, rtol=0, atol=rtol_cov * np.abs(cov).max())


@pytest.mark.parametrize("iterations", [3, 50])
def test_two_link_equals_the_dense_path(two_link, iterations):
    """Stopped early (3 evaluations: ``max_iterations``) and converged: the same point as scipy's solver
    on the dense Jacobian."""
    regressor, names, logs, ls, converged = two_link
    # The segment sandwich: the covariance the dense route computes (``covariance="inputs"``, the default:
    # test_output_error_inputs.py).
    est = output_error(logs, regressor, names, start=ls, max_iterations=iterations, solver=TRF, covariance="sandwich")
    if iterations == 50:
        np.testing.assert_array_equal(est.value, converged.value)
    theta, _, status, njev, cond, sandwich = dense_output_error(logs, regressor, names, ls, max_nfev=iterations)
    _close(est, theta, sandwich(0), rtol_theta=1e-9, rtol_cov=1e-7)
    assert (est.status, est.iterations) == (status, njev)
    assert est.status == ("max_iterations" if iterations == 3 else "ok")
    assert est.condition == pytest.approx(cond, rel=1e-6) and est.rank == len(names)


def test_gauss_newton_stops_certified_at_the_dense_optimum(two_link):
    """The default solver (``shooting_solvers.gauss_newton``: Nielsen-damped Gauss–Newton) ends ``"ok"`` at the point
    scipy's solver on the dense Jacobian converges to, within 1e-2 of a standard deviation, in no more
    passes. Its stationarity certificate is checked on the dense route at the point it returns: the
    undamped Gauss–Newton model there (dense ``J``, SVD least squares) lowers ``½ |r|²`` by at most 1e-6
    of it, and by no more than the streamed certificate states."""
    regressor, names, logs, ls, converged = two_link
    plain = importlib.import_module("jaxid.estimate.logs.output_error")
    seen, original = [], plain.solve

    def spy(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    plain.solve = spy
    try:
        est = output_error(logs, regressor, names, start=ls)
    finally:
        plain.solve = original
    sol = seen[-1][0]
    assert est.status == "ok" and "stationary" in est.notes, est.notes
    assert est.iterations <= converged.iterations, (est.notes, converged.notes)
    # Both stop short of the exact optimum (ftol 1e-8; a certificate of 1e-6 of the cost, here ~1e-5 of the cost
    # of one white standard deviation, σ̂²/2 = cost/dof): apart by a few 1e-3 of a standard deviation.
    np.testing.assert_array_less(np.abs(est.value - converged.value), 1e-2 * converged.std)
    # The certificate, independently: the dense residuals and Jacobian at (θ̂, x̂).
    fun, jac, *_ = dense_problem(logs, regressor, names, ls)
    z = np.concatenate([est.value, sol.states.reshape(-1)])
    r, j = np.asarray(fun(z)), np.asarray(jac(z))
    cost = 0.5 * float(r @ r)
    assert cost == pytest.approx(sol.normal.cost, rel=1e-10)
    col = np.linalg.norm(j, axis=0)
    step = np.linalg.lstsq(j / col, -r, rcond=None)[0]
    decrease = 0.5 * float(np.sum(((j / col) @ step) ** 2))
    certified = float(est.notes.split("at most ")[1].split(" of it")[0])
    assert decrease <= 1e-6 * cost and decrease / cost <= certified * 1.01 + 1e-12, (decrease / cost, certified)


def test_parameter_criterion_equals_the_dense_route(two_link):
    """``parameter_step`` (Gauss–Newton's convergence in the parameters) at the start: the undamped step's
    ``θ`` part against ``θ``'s white standard deviations, from the dense Jacobian by least squares and
    ``σ̂² (JᵀJ)⁻¹``. The rule is tested only once the cost can fall by at most ``SETTLED_COST`` of itself:
    at this start it could fall by more, so even an unbounded tolerance stops later, and says so."""
    regressor, names, logs, ls, _ = two_link
    passes = importlib.import_module("jaxid.estimate.logs.shooting_passes")
    solvers = importlib.import_module("jaxid.estimate.logs.shooting_solvers")
    shooting = importlib.import_module("jaxid.estimate.logs.shooting")
    problem = passes.shooting_problem(logs, regressor, np.asarray(ls.value), 0.5, 5, 100.0, None, None, 64, 1)
    ne, _ = problem.linearise(np.asarray(ls.value), problem.x0)
    moved = shooting.parameter_step(ne, problem.dof)
    fun, jac, z0, *_ = dense_problem(logs, regressor, names, ls)
    r, j = np.asarray(fun(z0)), np.asarray(jac(z0))
    p, dof = len(names), r.size - j.shape[1]
    assert dof == problem.dof and 0.5 * float(r @ r) == pytest.approx(ne.cost, rel=1e-10)
    col = np.linalg.norm(j, axis=0)
    step = np.linalg.lstsq(j / col, -r, rcond=None)[0] / col
    _, sv, vt = np.linalg.svd(j / col, full_matrices=False)
    std = np.sqrt(float(r @ r) / dof * np.diag((vt.T / sv**2) @ vt)[:p]) / col[:p]
    assert moved == pytest.approx(np.max(np.abs(step[:p]) / std), rel=1e-6)
    assert shooting.undamped_decrease(ne) > solvers.SETTLED_COST * ne.cost
    est = output_error(logs, regressor, names, start=ls, parameter_tolerance=1e9)
    assert est.status == "ok" and est.iterations > 1 and "converged in the parameters" in est.notes, est.notes


@pytest.mark.parametrize("lags", [-1, 2])
def test_covariance_options_equal_the_dense_path(two_link, lags):
    """``lags=-1``: ``σ̂² (JᵀJ)⁻¹`` (white residuals); ``lags=2``: the segment sandwich over two
    neighbouring segments, both from the dense Jacobian. Neither changes the estimate."""
    regressor, names, logs, ls, converged = two_link
    est = output_error(logs, regressor, names, start=ls, covariance="sandwich", lags=lags, solver=TRF)
    theta, white, *_, sandwich = dense_output_error(logs, regressor, names, ls)
    _close(est, theta, white if lags < 0 else sandwich(lags), rtol_theta=1e-9, rtol_cov=1e-7)
    np.testing.assert_array_equal(est.value, converged.value)
    # the options differ (else the comparison could not tell them apart)
    assert not np.allclose(est.covariance, converged.covariance, rtol=1e-3)
    assert not np.allclose(sandwich(2), white, rtol=1e-3)


def test_chunk_size_does_not_change_the_result(two_link):
    """7 segments in chunks of 1, 3 (the last padded) and 64 (one chunk of 8)."""
    regressor, names, logs, ls, est = two_link
    # Chunks sum the normal equations in another order: rounding of order eps in J'J, which its
    # inverse (the covariance) amplifies by its condition number.
    rtol_cov = 16 * np.finfo(float).eps * np.linalg.cond(est.covariance)
    for chunk in (1, 3):
        other = output_error(logs, regressor, names, start=ls, chunk_segments=chunk, solver=TRF)
        _close(other, est.value, est.covariance, rtol_theta=1e-10, rtol_cov=rtol_cov)
        np.testing.assert_allclose(other.residual_std, est.residual_std, rtol=1e-10)
        assert (other.status, other.iterations, other.notes) == (est.status, est.iterations, est.notes)


def test_logs_of_other_lengths_share_the_chunk_program(two_link):
    """A shorter log (5 segments instead of 7) in chunks of 2: the program of the 7-segment fit, reused."""
    regressor, names, logs, ls, _ = two_link
    short = [dataclasses.replace(logs[0], trim=300)]  # 500 usable samples fewer
    output_error(logs, regressor, names, start=ls, chunk_segments=2, max_iterations=2)
    size = PROGRAM._cache_size()
    est = output_error(short, regressor, names, start=ls, chunk_segments=2, max_iterations=2)
    assert est.notes.startswith("5 segments") and PROGRAM._cache_size() == size


def test_identity_parametrisation_is_plain_output_error(two_link):
    regressor, names, logs, ls, est = two_link
    same, z = output_error(
        logs, regressor, names, parametrisation=lambda z: z, start_z=ls.value, return_z=True, solver=TRF
    )
    _close(same, est.value, est.covariance, rtol_theta=1e-12, rtol_cov=1e-10)
    np.testing.assert_array_equal(z, same.value)


def test_bad_chunk_size_is_refused(two_link):
    regressor, names, logs, ls, _ = two_link
    with pytest.raises(ValueError, match="chunk_segments must be a positive integer, got 0"):
        output_error(logs, regressor, names, start=ls, chunk_segments=0)
    with pytest.raises(ValueError, match="lags must be -1 .* got -2"):
        output_error(logs, regressor, names, start=ls, covariance="sandwich", lags=-2)
    with pytest.raises(ValueError, match="solver must be one of gauss_newton, trust_region, hybrid; got 'lm'"):
        output_error(logs, regressor, names, start=ls, solver="lm")


@pytest.mark.slow
def test_ur5_equals_the_dense_path():
    """A 2-s UR5 log at 500 Hz (58 base parameters, 3 segments), converged."""
    from jaxid.fit.model import BaseColumns
    from jaxid.model.urdf import load_arm

    arm = load_arm(UR5, armature=[0.2, 0.2, 0.1, 0.02, 0.02, 0.02])
    arm = eqx.tree_at(lambda a: a.viscous, arm, arm.viscous + 0.5)
    base = jaxid.base_parameters(arm)
    regressor = BaseColumns(arm, base, tuple(range(len(base.names))))
    key = jax.random.key(0)
    reference = random_fourier_trajectory(arm, 5, 2.0, key=key, margin=0.8)
    t = np.arange(1001) * 0.002
    q, qd, qdd = reference.evaluate(jnp.asarray(t))
    tau = np.asarray(arm.inverse_dynamics(q, qd, qdd))
    rng = np.random.default_rng(0)
    q_meas = np.asarray(q) + 1e-4 * rng.standard_normal(q.shape)
    tau_meas = tau + 0.05 * rng.standard_normal(tau.shape)
    log = MeasuredLog(jnp.asarray(t), jnp.asarray(q_meas), jnp.asarray(tau_meas), None, "ur5", 0.002, (), t.size)
    logs = [filter_log(log, 10.0, trim_s=0.1)]
    ls = idim_ls(logs, regressor, base.names)
    est = output_error(logs, regressor, base.names, start=ls, covariance="sandwich", lags=-1, solver=TRF)
    theta, cov, status, _, cond, _ = dense_output_error(logs, regressor, base.names, ls)
    # Both stop on scipy's tolerances (ftol 1e-8 of the cost): two converged points that differ in the
    # weakest directions (7.5e-6 relative on one of 58 parameters after a round-off change of the
    # regressor), far inside the estimate's own uncertainty.
    np.testing.assert_array_less(np.abs(est.value - theta), 1e-3 * np.sqrt(np.diag(cov)))
    np.testing.assert_allclose(est.value, theta, rtol=2e-5, atol=2e-5 * np.abs(theta).max())
    np.testing.assert_allclose(est.std, np.sqrt(np.diag(cov)), rtol=0.02)
    assert est.status == status == "ok" and est.condition == pytest.approx(cond, rel=0.02)


@pytest.mark.parametrize("solver", ["trust_region", "gauss_newton", "hybrid"])
def test_a_start_whose_simulations_diverge_is_refused_with_its_cause(two_link, solver):
    """A start whose segment simulations are not finite (here one parameter not a number) raises one error
    that says so and what to start from; the benchmark records it as ``diverged``."""
    from jaxid.benchmark.trial import _failure

    regressor, names, logs, ls, _ = two_link
    bad = dataclasses.replace(ls, value=np.asarray(ls.value).copy())
    bad.value[0] = np.nan
    with pytest.raises(ValueError, match=r"start.s simulations diverged .*\(idim_ls_consistent\)") as err:
        output_error(logs, regressor, names, start=bad, solver=solver)
    assert _failure(err.value) == "diverged"


@pytest.mark.parametrize("solver", ["trust_region", "gauss_newton", "hybrid"])
def test_fits_in_lockstep_equal_each_fit_alone(two_link, solver):
    """``output_error_batch``: three fits (the log; the log shifted by 1e-5 rad of angle noise; a shorter log,
    5 segments instead of 7) and a fourth whose start cannot be simulated run in lockstep, each round's passes
    as one program over all their segments. Each fit equals ``output_error`` on it alone (estimate and
    covariance to 1e-10; status, passes and notes the same), the failing one is its own error (the one
    ``output_error`` raises), and a fit's bits do not depend on the others in the call (here two of them, in the
    other order)."""
    regressor, names, logs, ls, _ = two_link
    fits = [
        logs,
        [eqx.tree_at(lambda d: d.q_raw, logs[0], logs[0].q_raw + 1e-5)],
        [dataclasses.replace(logs[0], trim=300)],
    ]
    starts = [idim_ls(f, regressor, names) for f in fits]
    bad = dataclasses.replace(ls, value=np.asarray(ls.value).copy())
    bad.value[0] = np.nan
    together = output_error_batch([*fits, logs], regressor, names, starts=[*starts, bad], solver=solver)
    assert isinstance(together[3], ValueError) and "simulations diverged" in str(together[3])
    for f, start, got in zip(fits, starts, together, strict=False):
        alone = output_error(f, regressor, names, start=start, solver=solver)
        _close(got, alone.value, alone.covariance, rtol_theta=1e-10, rtol_cov=1e-10)
        assert (got.status, got.iterations, got.notes) == (alone.status, alone.iterations, alone.notes)
        assert got.status == "ok"
    assert together[2].notes.startswith("5 segments")  # the fourth fit ended in the first round, the others ran on
    pair = output_error_batch(fits[:0:-1], regressor, names, starts=starts[:0:-1], solver=solver)
    for got, before in zip(pair[::-1], together[1:3], strict=True):  # chunks of one shape: the same bits
        np.testing.assert_array_equal(got.value, before.value)
        np.testing.assert_array_equal(got.covariance, before.covariance)


def test_lockstep_refuses_an_unknown_option_before_any_pass(two_link):
    regressor, names, logs, ls, _ = two_link
    with pytest.raises(TypeError, match="segment_length"):
        output_error_batch([logs], regressor, names, starts=[ls], segment_length=0.5)
    with pytest.raises(ValueError, match="2 fits but 1 starts"):
        output_error_batch([logs, logs], regressor, names, starts=[ls])


def test_the_estimator_runs_its_fits_in_lockstep(two_link):
    """``OutputError.fit_logs_batch``: the estimator's options translated as for one fit (the hybrid solver by
    default), each trial equal to the estimator called on it alone up to round-off; the consistent variant is
    refused in one line (it runs trial by trial)."""
    from jaxid.estimate import OutputError
    from jaxid.estimate.logs import RegressionModel

    regressor, names, logs, ls, converged = two_link
    model = RegressionModel(regressor, names)
    got = OutputError().fit_logs_batch([logs, logs], model, [ls, ls])
    alone = OutputError()(logs, model, start=ls)
    assert "solver: hybrid, " in alone.notes and alone.status == "ok"  # the estimator's default
    for est in got:
        _close(est, alone.value, alone.covariance, rtol_theta=1e-10, rtol_cov=1e-10)
        assert (est.status, est.iterations, est.notes) == (alone.status, alone.iterations, alone.notes)
    with pytest.raises(ValueError, match="fit_logs_batch runs plain output error"):
        OutputError(constraint="consistent").fit_logs_batch([logs], model, [ls])
