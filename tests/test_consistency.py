"""Physical consistency (``jaxid.estimate.consistency``): the pseudo-inertia test, the log-Cholesky map and
consistent least squares without an SDP solver, checked against an LMI solution (cvxpy + Clarabel).

Anchors: the pseudo-inertia of point masses is ``Σ m [r; 1][r; 1]ᵀ`` (an independent derivation);
the shipped URDF arms are consistent; the log-Cholesky round trip is exact to round-off; and on a
UR5 regression (standard regressor at random states, torque ``Y φ_true + noise``) the fit equals the
solution of the same problem with the LMIs ``J_i ⪰ 0``, ``Ia, fv, fc ≥ 0`` solved by Clarabel, to
the SDP solver's accuracy (tolerances stated at ``COST_RTOL`` and ``BASE_RTOL``).

Every compiled kernel is shared through module fixtures: one regressor evaluation (both data sets
stacked) and one fit per data set.
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.estimate import consistency as C
from jaxid.model.base_parameters import base_parameters
from jaxid.model.urdf import load_arm
from jaxid.types import Status

ROBOTS = Path(__file__).resolve().parent.parent / "data" / "robots"
UR5 = ROBOTS / "ur5_robot.urdf"
PANDA = ROBOTS / "panda.urdf"
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")

#: Data sets: (states, joint angle range about one pose [rad] (None: anywhere), speed bound [rad/s],
#: acceleration bound [rad/s²], torque noise std [N m]). The short one is a small, slow motion about
#: one pose: its column-scaled base regressor has condition number ≈ 3e2 (the rich one ≈ 5).
SHORT = (40, 0.3, 0.3, 1.0, 0.1)
RICH = (200, None, 2.0, 4.0, 0.5)
#: Agreement with the LMI solution (Clarabel, gap and feasibility tolerances 1e-8): relative cost,
#: and the identified base combinations K φ, max |difference| / max |K φ_LMI| (measured: ≤ 3e-9 and
#: ≤ 6e-7; the fit's cost is the lower of the two on the short set).
COST_RTOL = 1e-7
BASE_RTOL = 1e-6
#: The fit's regularisation ρ (λ = ρ tr(WᵀW) / s, the default).
RHO = C.DEFAULT_REGULARISATION


@pytest.fixture(scope="module")
def ur5():
    return load_arm(UR5)


@pytest.fixture(scope="module")
def regression(ur5):
    """The truth (the URDF perturbed in log-Cholesky coordinates, positive friction and armature,
    offsets), the prior (the URDF values: friction and armature 0) and the two data sets."""
    n = ur5.dof
    rng = np.random.default_rng(2022)
    prior = np.asarray(ur5.standard_parameters())
    z = np.array(C.unconstrained_from_standard(C.project_to_consistent(prior, floor=1e-3)))
    z[: 10 * n] += 0.1 * rng.standard_normal(10 * n)
    z[10 * n : 11 * n] = np.log(rng.uniform(0.05, 0.2, n))  # armature [kg m²]
    z[11 * n : 13 * n] = np.log(rng.uniform(1.0, 5.0, 2 * n))  # viscous [N m s/rad], Coulomb [N m]
    z[13 * n :] = rng.uniform(-1.0, 1.0, n)  # offsets [N m]
    truth = np.asarray(C.standard_from_unconstrained(z))
    states = []
    for size, spread, speed, acceleration, _ in (SHORT, RICH):
        q = rng.uniform(-np.pi, np.pi, (size, n))
        if spread is not None:
            q = rng.uniform(-np.pi, np.pi, n) + spread * (q / np.pi)
        states.append((q, speed * rng.uniform(-1, 1, (size, n)), acceleration * rng.uniform(-1, 1, (size, n))))
    q, qd, qdd = (np.concatenate(parts) for parts in zip(*states, strict=True))
    w = np.asarray(ur5.standard_regressor(q, qd, qdd)).reshape(-1, n, 14 * n)  # one compile
    sets = {}
    rows = {"short": slice(0, SHORT[0]), "rich": slice(SHORT[0], None)}
    for name, noise in (("short", SHORT[4]), ("rich", RICH[4])):
        wi = w[rows[name]].reshape(-1, 14 * n)
        clean = wi @ truth
        sets[name] = (wi, clean + noise * rng.standard_normal(clean.shape), clean)
    base = base_parameters(ur5)  # 58 identifiable combinations K φ of the 84 standard parameters
    return {"truth": truth, "prior": prior, "sets": sets, "base": np.asarray(base.matrix), "kept": base.independent}


@pytest.fixture(scope="module")
def fits(ur5, regression):
    """``consistent_least_squares`` on each data set (default solver) and its wall time [s]."""
    import time

    out = {}
    for name, (w, y, _) in regression["sets"].items():
        start = time.perf_counter()
        est = jax.block_until_ready(C.consistent_least_squares(w, y, ur5))
        out[name] = (est, time.perf_counter() - start)
    return out


def _lmi_solution(w, y, prior, rho):
    """The same problem with the LMIs, by cvxpy + Clarabel: ``(φ, cost, seconds)``."""
    cp = pytest.importorskip("cvxpy")
    import time

    s = w.shape[1]
    n = s // 14
    lam = rho * np.sum(w * w) / s
    basis = np.stack([np.asarray(C.pseudo_inertia(e)) for e in np.eye(10)])  # J is linear in the link
    phi = cp.Variable(s)
    constraints = [sum(phi[10 * i + k] * basis[k] for k in range(10)) >> 0 for i in range(n)]
    constraints.append(phi[10 * n : 13 * n] >= 0)  # Ia, fv, fc
    # The same cost as ‖W φ − y‖² + λ ‖φ − φ_prior‖², up to a constant, in s rows (QR).
    r = np.linalg.qr(np.vstack([np.column_stack([w, y]), np.sqrt(lam) * np.column_stack([np.eye(s), prior])]), "r")
    problem = cp.Problem(cp.Minimize(cp.sum_squares(r[:s, :s] @ phi - r[:s, s])), constraints)
    start = time.perf_counter()
    problem.solve(solver="CLARABEL", tol_gap_abs=1e-8, tol_gap_rel=1e-8, tol_feas=1e-8)
    seconds = time.perf_counter() - start
    # Clarabel may flag the boundary optimum "optimal_inaccurate" (it stalls just short of 1e-8);
    # the test checks the answer itself: feasible to 1e-8 and within the fit's dual bound.
    assert problem.status in ("optimal", "optimal_inaccurate"), problem.status
    value = np.asarray(phi.value)
    return value, _cost(w, y, prior, lam, value), seconds


def _cost(w, y, prior, lam, phi):
    return float(np.sum((w @ phi - y) ** 2) + lam * np.sum((phi - prior) ** 2))


def _point_masses(masses, points):
    """The 10 standard parameters and the pseudo-inertia of point masses (independent derivation)."""
    m = masses.sum()
    h = masses @ points
    inertia = sum(mk * (r @ r * np.eye(3) - np.outer(r, r)) for mk, r in zip(masses, points, strict=True))
    link = np.array([m, *h, inertia[0, 0], inertia[0, 1], inertia[0, 2], inertia[1, 1], inertia[1, 2], inertia[2, 2]])
    hom = np.column_stack([points, np.ones(len(masses))])
    return link, np.einsum("k,ki,kj->ij", masses, hom, hom)


# -- pseudo-inertia ----------------------------------------------------------------------------


def test_pseudo_inertia_of_point_masses_and_back():
    rng = np.random.default_rng(0)
    link, pseudo = _point_masses(rng.uniform(0.1, 2.0, 5), rng.normal(0, 0.3, (5, 3)))
    np.testing.assert_allclose(C.pseudo_inertia(link), pseudo, rtol=0, atol=1e-14)
    np.testing.assert_allclose(C.standard_from_pseudo_inertia(pseudo), link, rtol=0, atol=1e-14)


@pytest.mark.parametrize("path, locked", [(UR5, ()), (PANDA, PANDA_FINGERS)], ids=["ur5", "panda"])
def test_shipped_arms_are_consistent(path, locked):
    arm = load_arm(path, fixed_joints=locked)
    eig = np.asarray(C.link_eigenvalues(arm))
    assert eig.shape == (arm.dof, 4)
    assert np.all(eig > 0), eig[:, 0]  # strictly: every URDF link has positive definite J
    assert bool(C.is_physically_consistent(arm))


def test_triangle_inequality_violation_and_negative_friction_are_inconsistent(ur5):
    # m = 1 kg at the origin with Izz > Ixx + Iyy: Σ = ½ tr(I) 1 − I = diag(0.15, 0.15, −0.05).
    bad = np.array([1.0, 0, 0, 0, 0.1, 0, 0, 0.1, 0, 0.3])
    assert np.linalg.eigvalsh(np.asarray(C.pseudo_inertia(bad)))[0] == pytest.approx(-0.05)
    phi = np.asarray(ur5.standard_parameters()).copy()
    assert bool(C.is_physically_consistent(phi))
    phi_link = phi.copy()
    phi_link[20:30] = bad
    assert not bool(C.is_physically_consistent(phi_link))
    phi_friction = phi.copy()
    phi_friction[10 * ur5.dof + ur5.dof + 2] = -0.1  # fv3
    assert not bool(C.is_physically_consistent(phi_friction))
    batch = np.stack([phi, phi_link, phi_friction])
    np.testing.assert_array_equal(C.is_physically_consistent(batch), [True, False, False])


# -- log-Cholesky --------------------------------------------------------------------------------


def test_log_cholesky_round_trip_on_ur5_links(ur5):
    links = np.asarray(ur5.inertial)
    z = C.log_cholesky_from_standard(links)
    back = np.asarray(C.standard_from_log_cholesky(z))
    assert np.max(np.abs(back - links)) <= 1e-12 * np.max(np.abs(links))
    # The factor has the paper's form: m = e^{2α}, centre of mass t = h / m, upper triangular.
    u = np.asarray(C.log_cholesky_factor(z))
    np.testing.assert_allclose(np.exp(2 * np.asarray(z)[:, 0]), links[:, 0], rtol=1e-13)
    np.testing.assert_allclose(np.asarray(z)[:, 7:], links[:, 1:4] / links[:, :1], rtol=0, atol=1e-14)
    assert np.all(np.tril(u, -1) == 0)
    np.testing.assert_allclose(u @ np.swapaxes(u, 1, 2), C.pseudo_inertia(links), rtol=0, atol=1e-13)


def test_every_unconstrained_vector_is_consistent_and_maps_back(ur5):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((200, 14 * ur5.dof))
    phi = C.standard_from_unconstrained(z)
    eig = np.asarray(C.link_eigenvalues(phi))
    assert np.all(eig[..., 0] > 0)
    assert np.all(np.asarray(phi)[:, 10 * ur5.dof : 13 * ur5.dof] > 0)
    assert bool(jnp.all(C.is_physically_consistent(phi, tolerance=0.0)))
    np.testing.assert_allclose(C.unconstrained_from_standard(phi), z, rtol=0, atol=1e-10)
    # jit and vmap change nothing.
    np.testing.assert_allclose(jax.jit(C.standard_from_unconstrained)(z[0]), phi[0], rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(jax.vmap(C.standard_from_unconstrained)(z[:4]), phi[:4], rtol=1e-15, atol=1e-15)


def test_projection_keeps_consistent_and_repairs_inconsistent(ur5):
    phi = np.asarray(_per_joint_positive(ur5))
    np.testing.assert_allclose(C.project_to_consistent(phi), phi, rtol=1e-12, atol=1e-14)
    broken = phi.copy()
    broken[:10] = [1.0, 0, 0, 0, 0.1, 0, 0, 0.1, 0, 0.3]
    broken[10 * ur5.dof] = -0.2  # Ia1
    fixed = C.project_to_consistent(broken)
    assert bool(C.is_physically_consistent(fixed, tolerance=0.0))
    assert np.all(np.isfinite(C.unconstrained_from_standard(fixed)))


def _per_joint_positive(arm):
    n = arm.dof
    phi = np.asarray(arm.standard_parameters()).copy()
    phi[10 * n : 13 * n] = 0.5
    return phi


# -- consistent least squares against the LMI solution --------------------------------------------


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")  # cvxpy on Clarabel's "optimal_inaccurate"
@pytest.mark.parametrize("name", ["short", "rich"])
def test_consistent_least_squares_equals_the_lmi_solution(ur5, regression, fits, name):
    w, y, _ = regression["sets"][name]
    prior, k = regression["prior"], regression["base"]
    lmi, lmi_cost, lmi_seconds = _lmi_solution(w, y, prior, RHO)
    est, seconds = fits[name]
    phi = np.asarray(est.standard)
    lam = float(est.regularisation)
    assert lam == pytest.approx(RHO * np.sum(w * w) / w.shape[1], rel=1e-12)
    assert int(est.status) == Status.CONVERGED and bool(est.consistent)
    assert bool(C.is_physically_consistent(phi, tolerance=1e-12))
    assert bool(C.is_physically_consistent(lmi, tolerance=1e-8))
    assert float(est.cost) == pytest.approx(_cost(w, y, prior, lam, phi), rel=1e-10)
    cost_error = (float(est.cost) - lmi_cost) / lmi_cost
    base_error = np.max(np.abs(k @ (phi - lmi))) / np.max(np.abs(k @ lmi))
    # The constrained optimum sits on the boundary here (some J_i singular): the unconstrained
    # minimiser is inconsistent on both data sets, so the constraints are active.
    assert not bool(C.is_physically_consistent(est.least_squares))
    assert float(est.least_squares_cost) < lmi_cost
    gap = float(est.duality_gap)
    print(
        f"{name}: cost {float(est.cost):.10g} vs LMI {lmi_cost:.10g} (relative {cost_error:.1e}, certified gap "
        f"{gap / lmi_cost:.1e}), base combinations {base_error:.1e}, standard max |Δ| {np.max(np.abs(phi - lmi)):.1e}; "
        f"{int(est.iterations)} iterations, {seconds:.2f} s (first call, compile included) vs Clarabel {lmi_seconds:.2f} s"
    )
    assert abs(cost_error) <= COST_RTOL
    assert base_error <= BASE_RTOL
    # Weak duality: the fit's dual bound is below the LMI optimum (up to Clarabel's accuracy), and small.
    assert float(est.cost) - gap <= lmi_cost * (1 + COST_RTOL)
    assert 0 <= gap <= 1e-5 * lmi_cost


def _scaled_condition(w, kept):
    """Condition number of the column-normalised base regressor (the peers' excitation criterion)."""
    base = w[:, list(kept)]
    return float(np.linalg.cond(base / np.linalg.norm(base, axis=0)))


def test_consistency_helps_on_the_short_data_set(regression, fits):
    est, _ = fits["short"]
    truth, k = regression["truth"], regression["base"]
    w_rich, _, clean_rich = regression["sets"]["rich"]
    conditions = {name: _scaled_condition(w, regression["kept"]) for name, (w, _, _) in regression["sets"].items()}
    assert conditions["short"] > 30 * conditions["rich"]  # poorly exciting: base LS ill-conditioned
    unconstrained = np.asarray(est.least_squares)
    consistent = np.asarray(est.standard)
    assert not bool(C.is_physically_consistent(unconstrained))
    eig = np.asarray(C.link_eigenvalues(unconstrained))
    assert np.min(eig[:, 0]) < -1e-3 * np.max(eig)  # clearly, not by round-off
    assert bool(C.is_physically_consistent(consistent, tolerance=1e-12))

    def rms(phi):
        return float(np.sqrt(np.mean((w_rich @ phi - clean_rich) ** 2)))

    def base_error(phi):
        return float(np.linalg.norm(k @ (phi - truth)) / np.linalg.norm(k @ truth))

    print(
        f"scaled base-regressor condition: short {conditions['short']:.0f}, rich {conditions['rich']:.1f}; "
        f"held-out torque RMS error on the rich set: unconstrained {rms(unconstrained):.4f} N m, "
        f"consistent {rms(consistent):.4f} N m; base-parameter error {base_error(unconstrained):.3e} vs "
        f"{base_error(consistent):.3e}; min eigenvalue of J (unconstrained) {np.min(eig[:, 0]):.3g}"
    )
    assert rms(consistent) <= rms(unconstrained)
    assert base_error(consistent) <= base_error(unconstrained)


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_jit_and_the_optimistix_solver(ur5, regression, fits):
    w, y, _ = regression["sets"]["short"]
    est, _ = fits["short"]
    jitted = eqx.filter_jit(lambda w, y: C.consistent_least_squares(w, y, ur5))(jnp.asarray(w), jnp.asarray(y))
    np.testing.assert_allclose(jitted.standard, est.standard, rtol=1e-9, atol=1e-12)
    # Levenberg–Marquardt (optimistix) drops the map's curvature: consistent, but far slower to converge.
    lm = C.consistent_least_squares(w, y, ur5, solver="levenberg_marquardt", max_steps=300)
    assert bool(lm.consistent) and int(lm.iterations) <= 300
    assert float(lm.cost) >= float(est.cost) * (1 - COST_RTOL)
    print(f"LM, 300 steps: cost {float(lm.cost):.10g} vs Newton {float(est.cost):.10g}")


def test_bad_inputs_raise_before_compiling(ur5):
    w = np.zeros((6, 14 * ur5.dof))
    y = np.zeros(6)
    with pytest.raises(ValueError, match="trailing axis of 84"):
        C.consistent_least_squares(w[:, :-1], y, ur5)
    with pytest.raises(ValueError, match="leading shape"):
        C.consistent_least_squares(w, y[:-1], ur5)
    with pytest.raises(ValueError, match="regularisation must be positive"):
        C.consistent_least_squares(w, y, ur5, regularisation=0.0)
    with pytest.raises(ValueError, match="solver must be"):
        C.consistent_least_squares(w, y, ur5, solver="bfgs")
    with pytest.raises(ValueError, match="prior must have shape"):
        C.consistent_least_squares(w, y, ur5, prior=np.zeros(3))
    with pytest.raises(ValueError, match="14 n entries"):
        C.is_physically_consistent(np.zeros(13))


def test_covariance_is_least_squares_on_the_active_face(ur5, regression):
    """Data from an arm with a negative viscous friction fv3 (the truth's links well inside): the
    constrained optimum has fv3 = 0 and nothing else active, so it *is* the regularised least
    squares without the fv3 column, and its covariance must be that least squares' sandwich
    ``σ̂² A W'ᵀW' A`` (``A = (W'ᵀW' + λ𝟙)⁻¹``, ``σ̂² = cost / (rows − tr(A W'ᵀW'))``), fv3's row 0."""
    n = ur5.dof
    w, _, _ = regression["sets"]["rich"]  # the fits' shape: the same compiled solver
    truth = np.asarray(C.project_to_consistent(regression["truth"], floor=1e-2))  # links well inside
    fv3 = 11 * n + 2
    data_truth = truth.copy()
    data_truth[fv3] = -0.3
    y = w @ data_truth + 0.01 * np.random.default_rng(7).standard_normal(len(w))
    est = C.consistent_least_squares(w, y, ur5, prior=truth)
    assert int(est.status) == Status.CONVERGED
    assert int(est.active) == 1
    keep = np.arange(w.shape[1]) != fv3
    lam = float(est.regularisation)
    wk = w[:, keep]
    gram = wk.T @ wk
    a = np.linalg.inv(gram + lam * np.eye(len(gram)))
    reduced = a @ (wk.T @ y + lam * truth[keep])
    np.testing.assert_allclose(np.asarray(est.standard)[keep], reduced, rtol=0, atol=1e-6 * np.max(np.abs(reduced)))
    assert abs(float(est.standard[fv3])) <= 1e-6
    cost = np.sum((wk @ reduced - y) ** 2)
    expected = cost / (len(w) - np.trace(a @ gram)) * a @ gram @ a
    cov = np.asarray(est.covariance)
    assert np.max(np.abs(cov[fv3])) <= 1e-9 * np.max(np.abs(expected))
    # The identified combinations (the base parameters' K) to 1e-6 of their largest entry.
    k = regression["base"]
    got, want = k @ cov @ k.T, k[:, keep] @ expected @ k[:, keep].T
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))
    # Residuals correlated over neighbouring samples: the Newey–West (Bartlett) sandwich over samples
    # of n rows (the joints), here written out for the reduced least squares.
    lags = 2
    est = C.consistent_least_squares(
        w.reshape(-1, n, w.shape[1]), y.reshape(-1, n), ur5, prior=truth, correlation_lags=lags
    )
    scores = np.einsum("tjs,tj->ts", wk.reshape(-1, n, wk.shape[1]), (y - wk @ reduced).reshape(-1, n))
    meat = scores.T @ scores
    for lag in range(1, lags + 1):
        meat += (1 - lag / (lags + 1)) * (scores[lag:].T @ scores[:-lag] + scores[:-lag].T @ scores[lag:])
    expected = len(w) / (len(w) - np.trace(a @ gram)) * a @ meat @ a
    got, want = k @ np.asarray(est.covariance) @ k.T, k[:, keep] @ expected @ k[:, keep].T
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))
