"""Multiple shooting's normal equations, accumulated segment by segment, and a trust-region solver on them.

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

``gauss_newton``: Levenberg–Marquardt-damped Gauss–Newton (Nielsen's damping update) with a pluggable step
(``plain_step``; output_error_consistent's constrained one), stopping on a stationarity certificate (the
undamped linearised problem's largest decrease, relative to the cost), ``ftol`` or ``xtol``: the loop of
plain and physically consistent output error.

``trust_region``: ``scipy.optimize.least_squares(method="trf", x_scale="jac")`` without bounds, step
for step (scaling ``D`` = the largest column norms of ``J`` met so far; radius update; Moré's
iteration for the Levenberg–Marquardt parameter ``α`` of the step on the trust region's boundary,
``scipy.optimize._lsq.common.solve_lsq_trust_region``), with each ``α`` solved on the normal
equations instead of an SVD of ``J``. It stops as scipy does: ``ftol`` (relative cost decrease with a
gain ratio above 1/4), ``xtol`` (step norm against the unknowns' norm), ``gtol`` (largest gradient
entry), or after ``max_evaluations`` passes.
"""

from __future__ import annotations

from collections.abc import Callable
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
    "trust_region",
    "gauss_newton",
    "model_decrease",
    "plain_step",
    "undamped_decrease",
    "Step",
]


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
    d = factor._d
    ev, vec = np.linalg.eigh(factor.schur / np.outer(d, d))
    keep = ev > ev.max() * 1e-14
    inverse = ((vec[:, keep] / ev[keep]) @ vec[:, keep].T) / np.outer(d, d)
    sandwich = inverse @ meat @ inverse
    return 0.5 * (sandwich + sandwich.T), inverse


def _trust_region_step(ne: NormalEquations, scale_par, scale_x, radius, alpha, rtol=0.01, max_iter=10):
    """``scipy.optimize._lsq.common.solve_lsq_trust_region`` on the normal equations: the step ``δ``
    minimising ``|J δ + r|`` within ``|D δ| ≤ radius`` (``D = diag(scale)``), and its
    Levenberg–Marquardt parameter ``α`` (``(JᵀJ + α D²) δ = −Jᵀr``, Moré's iteration on
    ``φ(α) = |D δ(α)| − radius``)."""
    from scipy.linalg import LinAlgError

    d2_par, d2_x = scale_par**2, scale_x**2

    def step(a, factor=None):
        factor = factor or Factor(ne, a * d2_par, a * d2_x)
        d_par, d_x = factor.solve(-ne.g_par, -ne.g_x)
        norm = np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2))
        q_par, q_x = factor.solve(d2_par * d_par, d2_x * d_x)
        prime = -(np.sum(d2_par * d_par * q_par) + np.sum(d2_x * d_x * q_x)) / norm
        return d_par, d_x, norm - radius, prime

    try:
        gauss_newton = Factor(ne, 0 * d2_par, 0 * d2_x, strict=True)
        full_rank = True
    except LinAlgError:
        full_rank = False
    if full_rank:
        d_par, d_x, phi, prime = step(0.0, gauss_newton)
        if phi <= 0:
            return d_par, d_x, 0.0
    g_norm = np.sqrt(np.sum((ne.g_par / scale_par) ** 2) + np.sum((ne.g_x / scale_x) ** 2))
    upper = g_norm / radius
    lower = -phi / prime if full_rank else 0.0
    if alpha is None or (not full_rank and alpha == 0):
        alpha = max(0.001 * upper, (lower * upper) ** 0.5)
    for _ in range(max_iter):
        if alpha < lower or alpha > upper:
            alpha = max(0.001 * upper, (lower * upper) ** 0.5)
        d_par, d_x, phi, prime = step(alpha)
        if phi < 0:
            upper = alpha
        ratio = phi / prime
        lower = max(lower, alpha - ratio)
        alpha -= (phi + radius) * ratio / radius
        if abs(phi) < rtol * radius:
            break
    d_par, d_x, _, _ = step(alpha)
    shrink = radius / np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2))
    return d_par * shrink, d_x * shrink, alpha


class Solution(NamedTuple):
    """What ``trust_region`` ends with: the unknowns, the normal equations and whatever the linearisation
    returned beside them (at the last accepted point), the passes made, the Jacobians used (accepted
    points, the start included), status and message."""

    par: np.ndarray
    states: np.ndarray
    normal: NormalEquations
    extra: object
    evaluations: int
    jacobians: int
    status: str
    message: str


_MESSAGES = {
    0: "The maximum number of function evaluations is exceeded.",
    1: "`gtol` termination condition is satisfied.",
    2: "`ftol` termination condition is satisfied.",
    3: "`xtol` termination condition is satisfied.",
    4: "Both `ftol` and `xtol` termination conditions are satisfied.",
}

#: ``gauss_newton``'s stationarity test: stop when the linearised problem (undamped) cannot lower ``½ |r|²``
#: by more than this fraction of it.
STATIONARITY = 1e-6


class Step(NamedTuple):
    """One damped step of ``gauss_newton`` (what its ``step`` returns): ``d_par``, ``d_x`` the step in the
    linearisation's unknowns (``φ`` and the states); ``carry`` what the loop keeps if the step is accepted
    (e.g. the standard parameters of a constrained step); ``bound`` a certified upper bound on the decrease
    of the **undamped** linearised problem at the current point (``None``: no certificate from this step);
    ``info`` whatever the caller wants back about the accepted steps."""

    d_par: np.ndarray
    d_x: np.ndarray
    carry: object = None
    bound: float | None = None
    info: object = None


def undamped_decrease(ne: NormalEquations) -> float:
    """``½ gᵀ (JᵀJ)⁻¹ g``: the decrease of ``½ |r|²`` the undamped Gauss–Newton model promises at ``ne``
    (over ``φ`` and the states; the pseudo-inverse's fallback of ``Factor`` where ``JᵀJ`` is singular)."""
    d_par, d_x = Factor(ne, np.zeros_like(ne.g_par), np.zeros_like(ne.g_x)).solve(-ne.g_par, -ne.g_x)
    return -0.5 * float(ne.g_par @ d_par + np.sum(ne.g_x * d_x))


def model_decrease(ne: NormalEquations, d_par: np.ndarray, d_x: np.ndarray) -> float:
    """The decrease of ``½ |r|²`` that the undamped Gauss–Newton model at ``ne`` predicts for the step ``(δφ, δx)``."""
    n_par, n_x = _normal_product(ne, d_par, d_x)
    return float(-(0.5 * (d_par @ n_par + np.sum(d_x * n_x)) + ne.g_par @ d_par + np.sum(ne.g_x * d_x)))


def plain_step(ne: NormalEquations, factor: Factor, mu: float, par: np.ndarray, carry=None) -> Step:
    """``gauss_newton``'s unconstrained step: ``(JᵀJ + μ D²) δ = −Jᵀr`` (``factor``), with the
    undamped model's largest decrease (``undamped_decrease``) as its stationarity bound."""
    d_par, d_x = factor.solve(-ne.g_par, -ne.g_x)
    return Step(d_par, d_x, carry, undamped_decrease(ne))


def gauss_newton(
    linearise: Callable[[np.ndarray, np.ndarray], tuple[NormalEquations, object] | None],
    par: np.ndarray,
    states: np.ndarray,
    *,
    max_evaluations: int,
    evaluate: Callable[[np.ndarray, np.ndarray], float | None],
    step: Callable[[NormalEquations, "Factor", float, np.ndarray, object], Step] = plain_step,
    carry: object = None,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    damping: float = 1e-4,
    stationarity: float = STATIONARITY,
) -> tuple[Solution, object, list, float]:
    """Minimise ``½ |r|²`` over ``(φ, x)`` by Gauss–Newton damped à la Levenberg–Marquardt with Nielsen's
    update of the damping: the one loop of plain and physically consistent output error.

    At the iterate a pass gives the normal equations (``linearise``: ``(NormalEquations, extra)``, ``None``
    where not finite). ``step(ne, factor, μ, φ, carry)`` (``factor``: ``JᵀJ + μ D²`` factorised, ``D²`` the
    largest diagonal of ``JᵀJ`` met so far) proposes ``(δφ, δx)`` (``plain_step``: the damped Gauss–Newton
    step; ``output_error_consistent``'s: a constrained one). The trial point is simulated without the
    Jacobian (``evaluate``); its gain ratio ``ρ`` (actual over predicted decrease of the undamped model,
    ``model_decrease``) accepts it (any decrease; then one Jacobian pass there) and sets ``μ`` (Nielsen:
    accepted ``μ × max(1/3, 1 − (2ρ − 1)³)``; rejected ``μ × ν``, ``ν`` doubling with each rejection in a
    row), starting at ``damping``.

    Stops (status ``"ok"``) on **stationarity**, before the trial: the step's ``bound`` (a certified upper
    bound on the decrease of the undamped linearised problem at the iterate) at most ``stationarity``
    times the cost; or on ``ftol`` (a trial point with ``ρ > 1/4`` lowering the cost by less than ``ftol``
    times it) or ``xtol`` (the step's norm against the unknowns'), scipy's tests, where an accepted last
    step is still taken. Else ``"max_iterations"`` after ``max_evaluations`` passes (trial points and the
    start).

    Returns ``(Solution, carry, infos, μ)``: the solution at the last accepted point (``par``: its ``φ``),
    its ``carry``, the accepted steps' ``info`` and the last damping. Raises ``ValueError`` if the start is
    not finite."""
    first = linearise(par, states)
    if first is None:
        raise ValueError("output_error: the residuals are not finite at the start; check the start and the logs.")
    ne, extra = first
    evaluations = jacobians = 1
    d2_par, d2_x = (np.where(c > 0, c, 1.0) ** 2 for c in ne.column_norms())
    mu, nu = float(damping), 2.0
    termination, certified, infos = None, None, []
    while termination is None and evaluations < max_evaluations:
        proposal = step(ne, Factor(ne, mu * d2_par, mu * d2_x), mu, par, carry)
        if proposal.bound is not None and proposal.bound <= stationarity * ne.cost:
            termination, certified = 5, max(proposal.bound, 0.0) / ne.cost
            break
        d_par, d_x = proposal.d_par, proposal.d_x
        predicted = model_decrease(ne, d_par, d_x)
        trial_cost = evaluate(par + d_par, states + d_x)
        evaluations += 1
        reduction = -np.inf if trial_cost is None or not np.isfinite(trial_cost) else ne.cost - trial_cost
        ratio = reduction / predicted if predicted > 0 else (1.0 if reduction == predicted == 0 else 0.0)
        step_norm = np.sqrt(np.sum(d_par**2) + np.sum(d_x**2))
        x_norm = np.sqrt(np.sum(par**2) + np.sum(states**2))
        small_cost = reduction < ftol * ne.cost and ratio > 0.25
        small_step = step_norm < xtol * (xtol + x_norm)
        if small_cost or small_step:
            termination = 4 if small_cost and small_step else 2 if small_cost else 3
        trial = linearise(par + d_par, states + d_x) if reduction > 0 else None
        if trial is None:
            mu, nu = mu * nu, 2.0 * nu
            continue
        par, states, carry = par + d_par, states + d_x, proposal.carry
        ne, extra = trial
        jacobians += 1
        infos.append(proposal.info)
        mu, nu = mu * max(1 / 3, 1 - (2 * ratio - 1) ** 3), 2.0
        col_par, col_x = ne.column_norms()
        d2_par, d2_x = np.maximum(d2_par, col_par**2), np.maximum(d2_x, col_x**2)
    status = "max_iterations" if termination is None else "ok"
    message = (
        f"stationary: the linearised problem lowers the cost by at most {certified:.1e} of it"
        if termination == 5
        else _MESSAGES[termination or 0]
    )
    return Solution(par, states, ne, extra, evaluations, jacobians, status, message), carry, infos, mu


def trust_region(
    linearise: Callable[[np.ndarray, np.ndarray], tuple[NormalEquations, object] | None],
    par: np.ndarray,
    states: np.ndarray,
    *,
    max_evaluations: int,
    evaluate: Callable[[np.ndarray, np.ndarray], float | None] | None = None,
    ftol: float = 1e-8,
    xtol: float = 1e-10,
    gtol: float = 1e-8,
) -> Solution:
    """Minimise ``½ |r|²`` over ``(φ, x)``: ``scipy.optimize.least_squares(method="trf", x_scale="jac")``
    without bounds, step for step, its trust-region subproblem solved on the normal equations
    (module docstring).

    ``linearise(φ, x)`` returns ``(NormalEquations, extra)`` at that point, or ``None`` where the residuals
    are not finite (the radius then shrinks). A pass at a trial point gives its Jacobian too, so an
    accepted point costs no second pass. With ``evaluate(φ, x)`` (the cost ``½ |r|²`` alone, or ``None`` where
    not finite: a pass without the Jacobian) a trial point is first only evaluated, and linearised once
    accepted: rejected steps then cost a residual pass, not a Jacobian. The iterates are the same. Raises ``ValueError`` if the start is not finite. ``status``:
    ``"ok"`` (a tolerance met) or ``"max_iterations"`` (``max_evaluations`` passes made)."""
    first = linearise(par, states)
    if first is None:
        raise ValueError("output_error: the residuals are not finite at the start; check the start and the logs.")
    ne, extra = first
    evaluations = jacobians = 1
    scale_par, scale_x = (np.where(c > 0, c, 1.0) for c in ne.column_norms())
    radius = float(np.sqrt(np.sum((par * scale_par) ** 2) + np.sum((states * scale_x) ** 2))) or 1.0
    alpha = 0.0
    termination = None
    while True:
        if max(np.abs(ne.g_par).max(initial=0.0), np.abs(ne.g_x).max(initial=0.0)) < gtol:
            termination = 1
        if termination is not None or evaluations >= max_evaluations:
            break
        reduction, trial = -1.0, None
        while reduction <= 0 and evaluations < max_evaluations:
            d_par, d_x, alpha = _trust_region_step(ne, scale_par, scale_x, radius, alpha)
            n_par, n_x = _normal_product(ne, d_par, d_x)
            predicted = -(0.5 * (d_par @ n_par + np.sum(d_x * n_x)) + ne.g_par @ d_par + np.sum(ne.g_x * d_x))
            if evaluate is None:
                trial = linearise(par + d_par, states + d_x)
                trial_cost = None if trial is None else trial[0].cost
            else:
                trial, trial_cost = None, evaluate(par + d_par, states + d_x)
            evaluations += 1
            step_h = float(np.sqrt(np.sum((scale_par * d_par) ** 2) + np.sum((scale_x * d_x) ** 2)))
            if trial_cost is None or not np.isfinite(trial_cost):
                radius = 0.25 * step_h
                continue
            reduction = ne.cost - trial_cost
            if predicted > 0:
                ratio = reduction / predicted
            else:
                ratio = 1.0 if predicted == reduction == 0 else 0.0
            new_radius = radius
            if ratio < 0.25:
                new_radius = 0.25 * step_h
            elif ratio > 0.75 and step_h > 0.95 * radius:
                new_radius = 2.0 * radius
            step_norm = np.sqrt(np.sum(d_par**2) + np.sum(d_x**2))
            x_norm = np.sqrt(np.sum(par**2) + np.sum(states**2))
            small_cost = reduction < ftol * ne.cost and ratio > 0.25
            small_step = step_norm < xtol * (xtol + x_norm)
            if small_cost or small_step:
                termination = 4 if small_cost and small_step else 2 if small_cost else 3
                break
            alpha *= radius / new_radius
            radius = new_radius
        if reduction > 0 and trial is None:
            trial = linearise(par + d_par, states + d_x)
            if trial is None:  # finite residuals but a Jacobian that is not: a rejected step
                radius = 0.25 * step_h
                continue
        if reduction > 0:
            par, states = par + d_par, states + d_x
            ne, extra = trial
            jacobians += 1
            col_par, col_x = ne.column_norms()
            scale_par, scale_x = np.maximum(scale_par, col_par), np.maximum(scale_x, col_x)
    status = "max_iterations" if termination is None else "ok"
    return Solution(par, states, ne, extra, evaluations, jacobians, status, _MESSAGES[termination or 0])
