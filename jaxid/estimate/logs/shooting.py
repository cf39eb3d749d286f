"""Multiple shooting's normal equations, accumulated segment by segment, and their factorisation.

The unknowns are the fitted parameters ``φ`` (``P``: ``θ``, or the ``z`` of a parametrisation
``θ = g(z)``) and one initial state ``x_s`` (``m = 2 n`` entries) per segment ``s = 1 … S``. A segment's
angle residuals ``r_s`` depend on ``θ`` and ``x_s``; a continuity gap ``c_s = W (e_s(θ, x_s) − x_{s+1})``
(``e_s`` the segment's end state, ``W`` diagonal) on ``θ``, ``x_s`` and ``x_{s+1}``. So ``JᵀJ`` is bordered
block-tridiagonal::

    [ A    B_1  B_2  …  ]   A (P × P)      = Σ R_θᵀR_θ + Σ E_θᵀW²E_θ
    [ B_1ᵀ C_11 C_12    ]   B_s (P × m)    = R_θᵀR_x + E_θᵀW²E_x (s links on) − E_θ,s−1ᵀW² (s continues one)
    [ B_2ᵀ C_21 C_22 …  ]   C_ss (m × m)   = R_xᵀR_x + E_xᵀW²E_x (links on) + W² (continues one)
    [  …         …   …  ]   C_s+1,s        = −W² E_x,s (the gap's Jacobian in x_{s+1} is −W)

(in ``z``: ``A → GᵀAG``, ``B_s → GᵀB_s``, ``G = ∂θ/∂z``). ``normal_equations`` assembles it from the
per-segment products that the compiled chunk program returns (``Blocks``); ``Factor`` solves
``(JᵀJ + α D²) δ = r`` by a banded Cholesky factorisation of the state block (half-bandwidth
``2 m − 1``, ``scipy.linalg.cholesky_banded``) and a dense solve of the ``P × P`` Schur complement
``A − B C⁻¹ Bᵀ``. Host-side numpy/scipy, O(S m (P + m)) memory and time per solve.
The solvers on these normal equations are ``jaxid.estimate.logs.shooting_solvers``; ``model_decrease``,
``undamped_decrease`` and ``parameter_step`` are their measures of a step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "Blocks",
    "NormalEquations",
    "Factor",
    "normal_equations",
    "shooting_cost",
    "schur_complement",
    "segment_sandwich",
    "sandwich",
    "covariance_envelope",
    "model_decrease",
    "parameter_step",
    "undamped_decrease",
    "decrease_holds",
    "MISFIT_NOTE",
]

#: How the notes of a multiple-shooting fit that stopped short of its tests (``output_error``) give the RMS of its
#: angle residuals in units of the angle noise ``σ`` (``jaxid fit``'s ``not_converged`` warning reads it).
MISFIT_NOTE = "the angle residuals' RMS is"


class Blocks(NamedTuple):
    """One pass over all ``S`` segments, reduced per segment (``θ`` columns; ``k`` residuals per segment).

    res ``(S, k)``, ends ``(S, m)``, e_theta ``(S, m, p)``, e_x ``(S, m, m)``: residuals, end states and their
    Jacobians; rtr ``(p, p)`` = ``Σ R_θᵀR_θ``, rtg ``(p,)`` = ``Σ R_θᵀr``; rtx ``(S, p, m)`` = ``R_θᵀR_x``,
    rxx ``(S, m, m)`` = ``R_xᵀR_x``, rxg ``(S, m)`` = ``R_xᵀr``."""

    res: np.ndarray
    ends: np.ndarray
    e_theta: np.ndarray
    e_x: np.ndarray
    rtr: np.ndarray
    rtg: np.ndarray
    rtx: np.ndarray
    rxx: np.ndarray
    rxg: np.ndarray
    #: ``(S, p)`` the per-segment ``R_θᵀr`` before ``rtg`` sums them (the sandwich's scores); ``None``
    #: inside a compiled chunk.
    scores: np.ndarray | None = None
    #: ``(S, k, p + m)`` the angle rows ``[R_θ, R_x]`` themselves, where the pass keeps them (a fit's rows within
    #: ``shooting_passes.ROWS_BYTES``; ``None`` otherwise): ``shooting_inputs`` starts from them at the solution.
    rows: np.ndarray | None = None


class NormalEquations(NamedTuple):
    """``JᵀJ`` (``a``, ``b``, ``c_diag``, ``c_sub``: module docstring), ``Jᵀr`` (``g_par``, ``g_x``), the cost
    ``½ |r|²`` and the scaled continuity gaps ``c_s`` (``(S, m)``, zero for a log's last segment)."""

    a: np.ndarray
    b: np.ndarray
    c_diag: np.ndarray
    c_sub: np.ndarray
    g_par: np.ndarray
    g_x: np.ndarray
    cost: float
    gaps: np.ndarray

    def column_norms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(|J_φ columns|, |J_x columns| (S, m))``: square roots of the diagonal of ``JᵀJ``."""
        return np.sqrt(np.diag(self.a)), np.sqrt(np.einsum("sii->si", self.c_diag))


def shooting_cost(res: np.ndarray, ends: np.ndarray, states: np.ndarray, linked: np.ndarray, weight: np.ndarray):
    """``(½ |r|², c)``: the cost of residuals ``res`` and the scaled continuity gaps ``c`` (``(S, m)``) of end
    states ``ends`` against the next segments' ``states`` (``normal_equations``' arguments)."""
    nxt = np.concatenate([states[1:], states[-1:]])
    gaps = linked.astype(float)[:, None] * weight * (ends - nxt)
    return 0.5 * (float(np.sum(res**2)) + float(np.sum(gaps**2))), gaps


def normal_equations(
    blocks: Blocks,
    states: np.ndarray,
    linked: np.ndarray,
    weight: np.ndarray,
    dtheta: np.ndarray | None = None,
) -> NormalEquations:
    """Assemble ``JᵀJ`` and ``Jᵀr`` from a pass (module docstring).

    states ``(S, m)``: the initial states the pass started from. linked ``(S,)`` bool: segment ``s``
    continues into ``s + 1`` (same log). weight ``(m,)``: the diagonal of ``W``. dtheta ``(p, P)``:
    ``∂θ/∂z`` of a parametrisation (``None``: ``φ = θ``)."""
    link = linked.astype(float)
    w2 = weight**2
    cost, gaps = shooting_cost(blocks.res, blocks.ends, states, linked, weight)  # c_s, (S, m)
    wc = weight * gaps  # W c_s
    e_t, e_x = blocks.e_theta, blocks.e_x
    e_t_w = e_t * link[:, None, None]
    a = blocks.rtr + np.einsum("smp,m,smq->pq", e_t_w, w2, e_t)
    g_theta = blocks.rtg + np.einsum("smp,sm->p", e_t, wc)
    b = blocks.rtx + np.einsum("smp,m,sml->spl", e_t_w, w2, e_x)
    b[1:] -= np.swapaxes(e_t_w[:-1], 1, 2) * w2
    c_diag = blocks.rxx + np.einsum("sml,m,smk->slk", e_x * link[:, None, None], w2, e_x)
    c_diag[1:] += link[:-1, None, None] * np.diag(w2)
    c_sub = -(link[:-1, None, None] * w2[:, None]) * e_x[:-1]
    g_x = blocks.rxg + np.einsum("sml,sm->sl", e_x, wc)
    g_x[1:] -= wc[:-1]
    if dtheta is not None:
        a = dtheta.T @ a @ dtheta
        b = np.einsum("pk,spm->skm", dtheta, b)
        g_theta = dtheta.T @ g_theta
    return NormalEquations(a, b, c_diag, c_sub, g_theta, g_x, cost, gaps)


def _banded(c_diag: np.ndarray, c_sub: np.ndarray, damping_x: np.ndarray) -> np.ndarray:
    """The state block ``C`` (+ ``diag(damping_x)``) in LAPACK's lower banded storage ``(2 m, S m)``."""
    s, m, _ = c_diag.shape
    ab = np.zeros((2 * m, s * m))
    lo_a, lo_b = np.tril_indices(m)
    cols = (m * np.arange(s))[:, None]
    ab[lo_a - lo_b, cols + lo_b] = c_diag[:, lo_a, lo_b]
    if s > 1:
        full_a, full_b = np.indices((m, m)).reshape(2, -1)
        ab[m + full_a - full_b, cols[:-1] + full_b] = c_sub[:, full_a, full_b]
    ab[0] += damping_x.reshape(-1)
    return ab


def _normal_product(ne: NormalEquations, d_par: np.ndarray, d_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``JᵀJ δ`` for ``δ = (δφ, δx)``."""
    out_par = ne.a @ d_par + np.einsum("spm,sm->p", ne.b, d_x)
    out_x = np.einsum("spm,p->sm", ne.b, d_par) + np.einsum("sml,sl->sm", ne.c_diag, d_x)
    out_x[1:] += np.einsum("sml,sl->sm", ne.c_sub, d_x[:-1])
    out_x[:-1] += np.einsum("slm,sl->sm", ne.c_sub, d_x[1:])
    return out_par, out_x


class Factor:
    """``JᵀJ + diag(damping)`` factorised: banded Cholesky of the state block, Cholesky of the
    Jacobi-scaled Schur complement. ``strict``: raise ``LinAlgError`` where either is not positive
    definite (the undamped problem is rank-deficient); otherwise fall back to a ridge of 1e-12 of the
    state block's largest diagonal entry and a least-squares solve of the Schur complement."""

    def __init__(self, ne: NormalEquations, damping_par: np.ndarray, damping_x: np.ndarray, *, strict: bool = False):
        from scipy.linalg import LinAlgError, cho_factor, cho_solve_banded, cholesky_banded

        ab = _banded(ne.c_diag, ne.c_sub, damping_x)
        try:
            self._states = cholesky_banded(ab, lower=True, check_finite=False)
        except LinAlgError:
            if strict:
                raise
            ab[0] += 1e-12 * ab[0].max()
            self._states = cholesky_banded(ab, lower=True, check_finite=False)
        s, p, m = ne.b.shape
        self._shape = (s, m)
        self._border = np.swapaxes(ne.b, 0, 1).reshape(p, s * m)
        self._solve_banded = lambda rhs: cho_solve_banded((self._states, True), rhs, check_finite=False)
        self._c_inv_bt = self._solve_banded(self._border.T)
        #: ``A − B C⁻¹ Bᵀ`` (+ the damping of ``φ``).
        self.schur = ne.a - self._border @ self._c_inv_bt + np.diag(damping_par)
        d = np.sqrt(np.abs(np.diag(self.schur)))
        self._d = np.where(d > 0, d, 1.0)
        scaled = self.schur / np.outer(self._d, self._d)
        try:
            self._schur = cho_factor(scaled, check_finite=False)
        except LinAlgError:
            if strict:
                raise
            self._schur, self._scaled = None, scaled

    def eliminate(self, r_par: np.ndarray, r_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(r_φ − B y, y)``, ``y = C⁻¹ r_x``: the right-hand side of the Schur system ``S δφ = r_φ − B y``
        (``schur``) and what ``states`` needs."""
        y = self._solve_banded(r_x.reshape(-1))
        return r_par - self._border @ y, y

    def states(self, y: np.ndarray, d_par: np.ndarray) -> np.ndarray:
        """``δx = y − C⁻¹Bᵀ δφ`` ``(S, m)`` for any ``δφ`` (e.g. a constrained one): the states' best response."""
        return (y - self._c_inv_bt @ d_par).reshape(self._shape)

    def solve(self, r_par: np.ndarray, r_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(δφ, δx)`` with ``(JᵀJ + diag(damping)) δ = r``: ``y = C⁻¹ r_x``, ``S δφ = r_φ − B y``,
        ``δx = y − C⁻¹Bᵀ δφ``."""
        from scipy.linalg import cho_solve

        y = self._solve_banded(r_x.reshape(-1))
        rhs = (r_par - self._border @ y) / self._d
        if self._schur is None:
            d_par = np.linalg.lstsq(self._scaled, rhs, rcond=None)[0] / self._d
        else:
            d_par = cho_solve(self._schur, rhs, check_finite=False) / self._d
        return d_par, (y - self._c_inv_bt @ d_par).reshape(self._shape)


def schur_complement(ne: NormalEquations) -> np.ndarray:
    """The ``φ`` block of ``JᵀJ`` after eliminating the initial states: ``A − B C⁻¹ Bᵀ`` (``P × P``);
    its inverse is the ``φ`` block of ``(JᵀJ)⁻¹``."""
    return Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x)).schur


def segment_sandwich(ne: NormalEquations, blocks: Blocks, logs: np.ndarray, lags: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sandwich, inverse)`` ``(p, p)``: the ``θ`` covariance ``H⁻¹ M H⁻¹`` (``θ`` block) of the shooting fit
    with scores clustered by segment, and ``H⁻¹``'s ``θ`` block (the plain ``(JᵀJ)⁻¹``).

    ``ne`` in ``θ`` (no parametrisation), ``blocks`` the pass at the solution (``scores``: per segment).
    Segment ``s``'s angle residuals give the score ``u_s = (R_θᵀr_s, R_xᵀr_s)`` in ``(θ, x_s)``; the ``θ``
    rows of ``H⁻¹ = (JᵀJ)⁻¹`` map it to ``S⁻¹ w_s``, ``w_s = u_θ,s − (C⁻¹Bᵀ)_sᵀ u_x,s``
    (``S`` the Schur complement), and ``M = Σ_{|l| ≤ L} (1 − |l|/(L+1)) Σ_s w_s w_{s+l}ᵀ`` over
    neighbouring segments of the same log (``logs (S,)``: each segment's log index; ``L = lags``): the
    Newey–West estimate of the scores' covariance when the errors of a simulation (driven by a noisy
    torque, continued from segment to segment) stay correlated over several segments. The continuity
    rows are constraints, not data: they shape ``H``, not ``M``. Rank-deficient ``S``: its
    pseudo-inverse on the Jacobi-scaled matrix (eigenvalues below 1e-14 of the largest dropped)."""
    factor = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x))
    s, p, m = ne.b.shape
    w = blocks.scores - np.einsum("smp,sm->sp", factor._c_inv_bt.reshape(s, m, p), blocks.rxg)
    meat = w.T @ w
    for lag in range(1, lags + 1):
        same = logs[lag:] == logs[:-lag]
        cross = (w[lag:] * same[:, None]).T @ w[:-lag]
        meat += (1.0 - lag / (lags + 1.0)) * (cross + cross.T)
    return sandwich(factor, meat)


def sandwich(factor: Factor, meat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(S⁻¹ M S⁻¹, S⁻¹)`` for the Schur complement ``S`` of ``factor`` and a meat ``M`` ``(p, p)``: ``S⁻¹`` its
    pseudo-inverse on the Jacobi-scaled matrix (eigenvalues below 1e-14 of the largest dropped)."""
    d = factor._d
    ev, vec = np.linalg.eigh(factor.schur / np.outer(d, d))
    keep = ev > ev.max() * 1e-14
    inverse = ((vec[:, keep] / ev[keep]) @ vec[:, keep].T) / np.outer(d, d)
    cov = inverse @ meat @ inverse
    return 0.5 * (cov + cov.T), inverse


def covariance_envelope(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The covariance at least ``a`` and at least ``b`` (Loewner order) that is the larger of the two along each
    direction where both are diagonal: with ``a = L Lᵀ`` (on the range of ``a``, Jacobi-scaled, eigenvalues below
    1e-14 of the largest dropped) and ``L⁺ b L⁺ᵀ = V Λ Vᵀ``, ``L V max(Λ, 1) Vᵀ Lᵀ``. ``a`` the model's covariance,
    ``b`` the residuals' (``output_error``'s ``covariance="inputs"``)."""
    d = np.sqrt(np.abs(np.diag(a)))
    d = np.where(d > 0, d, 1.0)
    w, u = np.linalg.eigh(a / np.outer(d, d))
    keep = w > w.max() * 1e-14
    half = u[:, keep] * np.sqrt(w[keep])
    whiten = u[:, keep] / np.sqrt(w[keep])
    lam, v = np.linalg.eigh(whiten.T @ (b / np.outer(d, d)) @ whiten)
    basis = half @ v
    out = (basis * np.maximum(lam, 1.0)) @ basis.T * np.outer(d, d)
    return 0.5 * (out + out.T)


def parameter_step(ne: NormalEquations, dof: int) -> float:
    """``max_i |δφ_i| / σ_i``: the undamped Gauss–Newton step in the fitted parameters (the states
    eliminated: their best response included) against the parameters' standard deviations
    ``σ_i² = σ̂² [(A − B C⁻¹ Bᵀ)⁻¹]_ii``, ``σ̂² = 2 cost / dof`` (white residuals). ``inf`` where the
    Schur complement is not positive definite (the parameters are not all determined)."""
    factor = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x))
    d_par, _ = factor.solve(-ne.g_par, -ne.g_x)
    d = np.sqrt(np.abs(np.diag(factor.schur)))
    if factor._schur is None or not np.all(d > 0):
        return float("inf")
    scaled_inverse = np.diag(np.linalg.inv(factor.schur / np.outer(d, d)))
    if not np.all(scaled_inverse > 0):
        return float("inf")
    std = np.sqrt(2 * ne.cost / max(dof, 1) * scaled_inverse) / d
    return float(np.max(np.abs(d_par) / std))


def undamped_decrease(ne: NormalEquations) -> float:
    """``½ gᵀ (JᵀJ)⁻¹ g``: the decrease of ``½ |r|²`` the undamped Gauss–Newton model promises at ``ne``
    (over ``φ`` and the states; the pseudo-inverse's fallback of ``Factor`` where ``JᵀJ`` is singular)."""
    d_par, d_x = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x)).solve(-ne.g_par, -ne.g_x)
    return -0.5 * float(ne.g_par @ d_par + np.sum(ne.g_x * d_x))


def decrease_holds(ne: NormalEquations, bound: float) -> bool:
    """Whether ``bound``, a computed undamped decrease ``½ gᵀ(JᵀJ)⁻¹g`` at ``ne``, can certify stationarity: at least
    ``½ |g|² / tr(JᵀJ)``, below which the decrease of a gradient ``g = Jᵀr`` (in the range of ``JᵀJ``) never lies
    (``λ_max ≤ tr``). Less, e.g. 0 with a gradient that is not 0, means the factorisation lost it (an ill-conditioned
    ``JᵀJ``): no certificate."""
    col_par, col_x = ne.column_norms()
    trace = float(np.sum(col_par**2) + np.sum(col_x**2))
    g2 = float(ne.g_par @ ne.g_par + np.sum(ne.g_x**2))
    return g2 == 0.0 or (trace > 0.0 and bound >= 0.5 * g2 / trace)


def model_decrease(ne: NormalEquations, d_par: np.ndarray, d_x: np.ndarray) -> float:
    """The decrease of ``½ |r|²`` that the undamped Gauss–Newton model at ``ne`` predicts for the step ``(δφ, δx)``."""
    n_par, n_x = _normal_product(ne, d_par, d_x)
    return float(-(0.5 * (d_par @ n_par + np.sum(d_x * n_x)) + ne.g_par @ d_par + np.sum(ne.g_x * d_x)))
