"""IDIM-LS's CholeskyQR2 solver and its zero-padded rows (``jaxid.estimate.logs.ls_kernel``, ``idim._ls_rows``)
against LAPACK's SVD-based least squares on the same rows, and its fallback where it is not exact."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.estimate.logs.idim import _ls_rows, _row_bucket
from jaxid.estimate.logs.ls_kernel import CHOLQR_CONDITION, _ls_kernel_jit

ROWS, JOINTS, P = 300, 3, 12


def _problem(seed=0, spread=3.0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(ROWS, JOINTS, P)) * np.logspace(0, spread, P)  # columns of very different norms
    theta = rng.normal(size=P)
    y = np.einsum("njp,p->nj", w, theta) + rng.normal(size=(ROWS, JOINTS)) * np.array([0.1, 1.0, 3.0])
    return w, y


@pytest.mark.parametrize("lags", [0, 3])
def test_cholqr_on_padded_rows_equals_lapack_on_the_rows(lags):
    w, y = _problem()
    svd = _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), True, True, lags, "svd")
    pad = 37
    wp = np.concatenate([w, np.zeros((pad, JOINTS, P))])
    yp = np.concatenate([y, np.zeros((pad, JOINTS))])
    chol = _ls_kernel_jit(jnp.asarray(wp), jnp.asarray(yp), True, True, lags, "cholqr", ROWS)
    np.testing.assert_allclose(chol.theta, svd.theta, rtol=1e-11)
    np.testing.assert_allclose(chol.covariance, svd.covariance, rtol=1e-9, atol=1e-12 * np.abs(svd.covariance).max())
    np.testing.assert_allclose(chol.residual_std, svd.residual_std, rtol=1e-10)
    np.testing.assert_allclose(chol.sigma, svd.sigma, rtol=1e-10)
    np.testing.assert_allclose(chol.condition, svd.condition, rtol=1e-9)
    assert int(chol.rank) == int(svd.rank) == int(chol.first_rank) == P
    # The rows as _ls_rows pads them: the same estimate, and the bucket is a few sizes per octave.
    np.testing.assert_allclose(_ls_rows(w, y, True, lags).theta, svd.theta, rtol=1e-11)
    assert _row_bucket(ROWS) == 320 and _row_bucket(7000) == 7168 and _row_bucket(1) == 1


@pytest.mark.parametrize("lags", [0, 3])
def test_qr_solver_equals_lapack(lags):
    # The benchmark's batched trials' solver (a QR of [A | b] and the SVD of R), unpadded.
    w, y = _problem(seed=5)
    svd = _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), True, True, lags, "svd")
    qr = _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), True, True, lags, "qr")
    for field in ("theta", "covariance", "residual_std", "sigma", "condition"):
        np.testing.assert_allclose(getattr(qr, field), getattr(svd, field), rtol=1e-9, atol=1e-14)
    assert int(qr.rank) == int(svd.rank) == int(qr.first_rank) == P
    with pytest.raises(ValueError, match="solver must be one of"):
        _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), True, True, lags, "lu")


def test_rank_deficiency_falls_back_to_lapack_and_is_refused_by_name():
    from jaxid.estimate.logs.idim import _check_rank

    w, y = _problem(seed=1)
    w[..., 5] = 2.0 * w[..., 4]  # two columns that only a combination identifies
    fit = _ls_rows(w, y, True, 0)
    assert int(fit.first_rank) == P - 1  # by the SVD (CholeskyQR2 breaks down on it)
    names = tuple(f"c{i}" for i in range(P))
    with pytest.raises(ValueError, match=r"c4.*c5|c5.*c4"):
        _check_rank(int(fit.first_rank), names, np.asarray(fit.first_scaled), np.asarray(fit.first_scale))


def test_ill_conditioned_rows_take_the_svd():
    w, y = _problem(seed=2)
    noise = np.random.default_rng(3).normal(size=w.shape[:2]) * np.abs(w[..., 4]).mean()
    w[..., 5] = w[..., 4] + 1e-9 * noise  # scale-free condition number beyond CholeskyQR2's range, still full rank
    svd = _ls_kernel_jit(jnp.asarray(w), jnp.asarray(y), True, True, 0, "svd")
    assert float(svd.condition) > CHOLQR_CONDITION and int(svd.rank) == P
    fit = _ls_rows(w, y, True, 0)
    np.testing.assert_array_equal(np.asarray(fit.theta), np.asarray(svd.theta))  # the SVD's own result


def test_jackknife_fits_equal_idim_ls_on_each_subset(lab_log, lab_fit):
    # idim_ls_left_out (each log's rows built once) against idim_ls refitted on every subset.
    import jaxid
    from jaxid.estimate.logs import filter_log, idim_ls
    from jaxid.estimate.logs.idim import idim_ls_left_out

    _, parquet, _, _ = lab_log
    _, base, regressor, _, _ = lab_fit
    measured = jaxid.load_log(parquet)
    edges = np.linspace(0.0, measured.duration, 4)
    logs = [filter_log(measured.window(a, b), 20.0) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    left_out = idim_ls_left_out(logs, regressor, base.names)
    for i, theta in enumerate(left_out):
        subset = [d for j, d in enumerate(logs) if j != i]
        np.testing.assert_allclose(theta, idim_ls(subset, regressor, base.names).value, rtol=1e-9, atol=1e-12)


def test_consistent_least_squares_on_zero_padded_rows_is_the_same_fit():
    # idim_ls_consistent pads its rows (consistent_estimate): samples= counts the data rows only.
    import jaxid
    from jaxid.estimate.consistency import consistent_least_squares

    arm = jaxid.load_arm("data/robots/two_link.urdf")
    rng = np.random.default_rng(6)
    q, qd, qdd = (jnp.asarray(rng.normal(size=(200, arm.dof))) for _ in range(3))
    w = np.asarray(arm.standard_regressor(q, qd, qdd))
    y = np.einsum("njs,s->nj", w, np.asarray(arm.standard_parameters())) + 0.01 * rng.normal(size=(200, arm.dof))
    plain = consistent_least_squares(w, y, arm, correlation_lags=2)
    pad = ((0, 56), (0, 0), (0, 0))
    padded = consistent_least_squares(np.pad(w, pad), np.pad(y, pad[:2]), arm, correlation_lags=2, samples=200)
    assert int(plain.status) == int(padded.status)
    np.testing.assert_allclose(padded.cost, plain.cost, rtol=1e-9)
    np.testing.assert_allclose(padded.data_cost, plain.data_cost, rtol=1e-9)
    scale = np.abs(np.asarray(plain.standard)).max()
    np.testing.assert_allclose(padded.standard, plain.standard, atol=1e-6 * scale)
    np.testing.assert_allclose(
        padded.covariance, plain.covariance, rtol=1e-5, atol=1e-9 * np.abs(plain.covariance).max()
    )
    # Counting the padding as data would change the covariance (the test would catch a wrong count).
    wrong = consistent_least_squares(np.pad(w, pad), np.pad(y, pad[:2]), arm, correlation_lags=2)
    assert not np.allclose(wrong.covariance, plain.covariance, rtol=1e-3)
