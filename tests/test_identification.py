"""Identification from logs against known answers: a simulated log of the lab model (known
parameters, jittered stamps, noise) read back by load_log and fitted by every estimator.

Tolerances, the same for every estimator (cut-off 20 Hz, parallel filtering): inertial base
parameters 2 % (rotor inertia, 7 % of d11: 5 %), viscous friction ±0.002 N m s/rad, Coulomb 5 %,
offsets ±0.002 N m (the UKF: 4 % and 12 %, see its test). Without parallel filtering IDIM's friction is 10-40 % off (the Coulomb column
keeps its step, the torque loses it).
"""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxid
from jaxid.estimate.kalman.logs import kalman_filter_fit
from jaxid.estimate.logs import FilteredLog, accelerations, idim_iv, idim_ls, output_error
from jaxid.estimate.logs.idim import _null_directions


@pytest.fixture(scope="module")
def problem(lab_fit):
    arm, base, regressor, logs, ls = lab_fit  # logs filtered at 20 Hz: ~10x the highest line (2.3 Hz)
    truth = np.asarray(base.values(jaxid.standard_parameters(arm)))
    return arm, base, truth, regressor, logs, ls


def _check(est, truth, names, *, inertial=0.02, rotor=0.05):
    idx = {n: i for i, n in enumerate(names)}
    for n in ("I1", "m1r1", "I2", "m2r2"):
        assert est.value[idx[n]] == pytest.approx(truth[idx[n]], rel=inertial), n
    assert est.value[idx["Ir"]] == pytest.approx(truth[idx["Ir"]], rel=rotor)
    for n in ("fv1", "fv2"):
        assert est.value[idx[n]] == pytest.approx(truth[idx[n]], abs=0.002), n
    for n in ("fc1", "fc2"):
        assert est.value[idx[n]] == pytest.approx(truth[idx[n]], rel=0.05), n
    for n in ("off1", "off2"):
        assert est.value[idx[n]] == pytest.approx(truth[idx[n]], abs=0.002), n
    assert np.all(np.isfinite(est.std)) and np.all(est.std > 0)


def test_base_parameters_are_the_identifiable_set(problem):
    arm, base, truth, regressor, logs, ls = problem
    assert base.rank == 11 and set(base.dependent) == {"m1", "m2"}
    # The standard regressor on this log has exactly the base rank, and IDIM refuses it by name.
    d = logs[0]
    w = np.asarray(jaxid.standard_regressor(arm, d.q, d.qd, d.qdd)).reshape(-1, 13)
    w = w / np.maximum(np.linalg.norm(w, axis=0), 1e-300)
    assert np.linalg.matrix_rank(w, tol=1e-9) == base.rank
    # Both directions: m1 never enters the torque, m2 only through I1 + l1² m2 and m1r1 + l1 m2 (l1 = 0.2 m).
    with pytest.raises(
        ValueError,
        match=r"rank 11 < 13 parameters; unidentifiable directions \(2\): \[m1\], \[m2 - 0\.04 I1 - 0\.2 m1r1\]",
    ):
        idim_ls(logs, lambda q, qd, qdd: jaxid.standard_regressor(arm, q, qd, qdd), jaxid.STANDARD_NAMES)
    assert ls.rank == 11 and 1 < ls.condition < 1e4


def _toy_log(n=200, step=0.01):
    t = step * np.arange(n)
    q = np.stack([np.sin(2.0 * t), 0.5 * np.cos(3.0 * t)], -1)
    qd = np.stack([2.0 * np.cos(2.0 * t), -1.5 * np.sin(3.0 * t)], -1)
    qdd = np.stack([-4.0 * np.sin(2.0 * t), -4.5 * np.cos(3.0 * t)], -1)
    tau = qdd + 0.1 * qd + np.sin(q)
    a = jnp.asarray
    return FilteredLog(a(t), a(q), a(q), a(qd), a(qdd), a(tau), a(tau), "toy", step, 5.0, "butterworth", 10)


def test_rank_deficiency_names_every_direction():
    """A regressor with two exact dependencies (a column twice another, a zero column): the message
    names both directions with their coefficients (largest 1), in one line."""

    def regressor(q, qd, qdd):
        return jnp.stack([qdd, qd, jnp.sin(q), 2.0 * qd, jnp.zeros_like(q)], -1)  # (..., 2, 5)

    names = ("I", "fv", "mgr", "fv_twice", "off")
    with pytest.raises(ValueError, match=r"^the regressor has rank 3 < 5 parameters; ") as error:
        idim_ls([_toy_log()], regressor, names)
    message = str(error.value)
    assert "\n" not in message
    # fv + 2 fv_twice moves the torque by qd (1 - 0.5 * 2) = 0; off multiplies a zero column.
    assert "unidentifiable directions (2): [fv - 0.5 fv_twice], [off] (" in message
    assert "the basis is not unique" in message and "fit.fixed" in message and "fit.unknowns" in message
    assert "'I'" not in message and "'mgr'" not in message  # the identifiable ones are not blamed
    # One direction: no note about the basis.
    with pytest.raises(
        ValueError, match=r"rank 3 < 4 parameters; unidentifiable directions \(1\): \[fv - 0\.5 fv_twice\] \("
    ) as error:
        idim_ls([_toy_log()], lambda q, qd, qdd: regressor(q, qd, qdd)[..., :4], names[:4])
    assert "not unique" not in str(error.value)


def test_null_directions_are_a_readable_basis():
    """For a random 3-dimensional null space: W d = 0 for each direction, each has its own pivot with
    coefficient 1, zero at the other pivots, and no coefficient larger than 1 in magnitude."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(40, 2, 4)) * np.asarray([1.0, 10.0, 0.1, 3.0])
    w = np.concatenate([w, w @ rng.normal(size=(4, 3))], -1)  # 7 columns, rank 4
    scale = np.linalg.norm(w.reshape(-1, 7), axis=0)
    basis, pivots = _null_directions((w / scale).reshape(-1, 7), scale)
    assert basis.shape == (3, 7) and len(set(pivots)) == 3 and pivots == sorted(pivots)
    np.testing.assert_allclose(w.reshape(-1, 7) @ basis.T, 0.0, atol=1e-9 * np.abs(w).max())
    np.testing.assert_array_equal(basis[:, pivots], np.eye(3))
    assert np.abs(basis).max() <= 1.0 + 1e-9


def test_idim_ls_recovers_the_parameters(problem):
    _, base, truth, _, _, ls = problem
    _check(ls, truth, base.names)
    bounded = idim_ls(problem[4], problem[3], base.names, bounds=([0.0] * 11, [np.inf] * 11))
    assert np.all(bounded.value >= 0)


def test_idim_iv_recovers_the_parameters(problem):
    _, base, truth, regressor, logs, ls = problem
    iv = idim_iv(logs, regressor, base.names, start=ls, iterations=1)
    _check(iv, truth, base.names)


def test_output_error_multiple_shooting_recovers_the_parameters(problem):
    _, base, truth, regressor, logs, ls = problem
    oe = output_error(logs, regressor, base.names, start=ls, max_iterations=8)
    _check(oe, truth, base.names)
    assert "continuity gap" in oe.notes and oe.residual_std.max() < 1e-3


def test_ekf_recovers_the_parameters(problem):
    _, base, truth, regressor, logs, ls = problem
    ekf = kalman_filter_fit(logs, regressor, base.names, start=ls, kind="ekf")
    _check(ekf, truth, base.names)


def test_ukf_recovers_the_parameters(problem):
    _, base, truth, regressor, logs, ls = problem
    ukf = kalman_filter_fit(logs, regressor, base.names, start=ls, kind="ukf")
    # The UKF (alpha = 1, 31 sigma points over 2000 steps of a chaotic arm) moves by a few per cent
    # with round-off (CSV vs parquet input, Cholesky implementation): looser inertial tolerances.
    _check(ukf, truth, base.names, inertial=0.04, rotor=0.12)


def test_fixed_parameters_enter_as_known_torque(problem):
    arm, base, truth, _, logs, _ = problem
    names = base.names
    free = [i for i, n in enumerate(names) if n not in ("off1", "off2")]
    held = [i for i in range(len(names)) if i not in free]

    def free_regressor(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)[..., free]

    def known(q, qd, qdd):
        return jaxid.base_regressor(arm, q, qd, qdd, base)[..., held] @ truth[held]

    ls = idim_ls(logs, free_regressor, [names[i] for i in free], known=known)
    np.testing.assert_allclose(ls.value[:4], truth[:4], rtol=0.02)
    # The simulators see the same model: free part + known torque == the full model.
    q, qd, tau = jnp.asarray([0.3, -0.5]), jnp.asarray([1.0, -2.0]), jnp.asarray([0.2, -0.1])
    full = accelerations(problem[3], jnp.asarray(truth), q, qd, tau)
    split = accelerations(free_regressor, jnp.asarray(truth[free]), q, qd, tau, known)
    np.testing.assert_allclose(split, full, rtol=1e-12)
