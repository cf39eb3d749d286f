"""The paper's route (eqs. 48, 52-58, 63-69), reproduced as printed with only the indices repaired.

**This is a labelled reproduction, not an estimator to use** (DESIGN.md §3). The paper models
each joint's response with the *first-order* template of its eqs. 16-17,

    Q_j(s) = (b s + p) / (s² − 2σ0 s + ω0²) · U_j(s),

which is ``(sI − A)⁻¹ B`` for ``δq' = A δq + B δτ``; the arm is second order in ``δq``
(``δq'' = A δq + B δτ``, a quartic denominator), so the template is wrong for the real arm and the
fitted numbers have no exact physical meaning there.

What is computed, per joint ``j`` from **that joint's own lines** ``ω_ji`` (needs disjoint lines,
``table2("split")``):

1. the phasors ``Q̂ = Ĉ − jD̂`` of ``q_j`` at ``ω_ji`` by projection (eq. 48 / 60, averaged over
   the periods; ``fourier_coefficients``);
2. the linear system of eqs. 52-56 (joint 1) and 63-67 (joint 2): for each line two rows

       Ĉ ω² = Ĉ ω0² − 2 D̂ ω σ0 − p Re U + b ω Im U        (eq. 52 / 63)
       D̂ ω² = D̂ ω0² + 2 Ĉ ω σ0 + p Im U + b ω Re U        (eq. 53 / 64)

   with ``U`` the torque phasor of joint ``j`` at the line (``U = d_ji`` for the paper's zero
   phases, and the rows are then exactly the printed ones);
3. ``P = (ω0², σ0, p, b)`` by least squares (eqs. 58 / 69).

Index repairs: eqs. 55-56 print ``−2 D̂_112 ω_12`` in two rows (read ``−2 D̂_11i ω_1i``); eqs. 61-67
mix ``C_21i`` (defined by eq. 60 at joint 1's lines ``ω_1i``) with joint 2's lines ``ω_2i`` and
amplitudes ``d_2i``, and eq. 64 has ``ω_1i``. We read them consistently as joint 2's response
``q_2`` at joint 2's own lines ``ω_2i`` with amplitudes ``d_2i`` (the majority of the printed
indices). By eq. 17 the numbers fitted there are then ``(ω0², σ0, p4, b22)`` (the paper labels
them ``p3, b21``).

Mapping to masses (the paper gives none; this choice is jaxid's): the ``b``'s are the entries of
``B = D0⁻¹``, which for the point-mass arm are eq. 15,

    b11 = 1 / (l1² (m1 + m2 sin² q20)),
    b22 = (l1² (m1 + m2) + l2² m2 + 2 l1 l2 m2 cos q20) / (l1² l2² m2 (m1 + m2 sin² q20)),

solved for the masses:

    m2 = 1 / (l2² b22 − b11 (l1 cos q20 + l2)²),     m1 = 1 / (l1² b11) − m2 sin² q20.

(``b11`` and ``b21`` alone cannot work: at ``q20 = 0`` both depend on ``m1`` only.) The lengths come
from ``nominal``; for arms that are not point masses (table1) the formula is a further
approximation. On data made by the template itself (``paper_template_response``) the route
recovers the masses exactly; on the real arm it returns wrong masses (tests pin both).

The covariance is the least-squares one, ``s² (AᵀA)⁻¹`` with ``s²`` from the fit residual, mapped
to the masses to first order; it ignores that ``Ĉ, D̂`` are noisy regressors.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from ..excitation.multisine import Multisine
from ..excitation.phasors import respond, synthesise
from ..linalg import inverse_2x2
from ..measure.spectrum import Spectrum, fourier_coefficients
from ..model import TwoLinkArm, validate_unknowns
from ..simulation.linearisation import corrected_point_mass_state_matrices
from ..simulation.open_loop import Record
from .base import CONVERGED, FAILED, SINGULAR, Estimate, register
from .equation_error import solve_least_squares

__all__ = [
    "PaperFit",
    "paper",
    "paper_fit",
    "paper_masses",
    "paper_template_parameters",
    "paper_template_response",
]

PAPER_UNKNOWNS = ("m1", "m2")


class PaperFit(eqx.Module):
    """The per-joint least-squares fits of eqs. 58 and 69.

    Attributes:
        joint1: ``(ω0² [1/s²], σ0 [1/s], p1, b11)`` fitted from joint 1's lines (eq. 58).
        joint2: ``(ω0², σ0, p4, b22)`` fitted from joint 2's lines (eq. 69, indices repaired).
        covariance1, covariance2: ``(4, 4)`` least-squares covariances ``s² (AᵀA)⁻¹``.
        singular: ``(2,)`` bool, a rank-deficient system per joint.
    """

    joint1: Float[Array, " 4"]
    joint2: Float[Array, " 4"]
    covariance1: Float[Array, "4 4"]
    covariance2: Float[Array, "4 4"]
    singular: Array


def _own_lines(spectrum: Spectrum, excitation: Multisine, allow_shared_lines: bool) -> tuple[np.ndarray, np.ndarray]:
    h1, h2 = excitation.harmonics
    shared = sorted(set(h1) & set(h2))
    if shared and not allow_shared_lines:
        raise ValueError(
            f"The paper's route fits each joint from its own lines, but both joints are excited at harmonics "
            f"{shared}: joint 1's response there mixes both torques and the template does not hold. Use "
            "table2('split') (disjoint lines), or allow_shared_lines=True to reproduce the paper literally."
        )
    index = {k: i for i, k in enumerate(spectrum.lines)}
    missing = [k for k in (*h1, *h2) if k not in index]
    if missing:
        raise ValueError(f"The spectrum lacks the excitation's lines {missing}; compute it with this excitation.")
    return np.asarray([index[k] for k in h1]), np.asarray([index[k] for k in h2])


def _fit_joint(q: Array, u: Array, omega: np.ndarray):
    # Rows of eqs. 52-53 / 63-64 in the unknowns (ω0², σ0, p, b), generalised to phased U.
    c, d = jnp.real(q), -jnp.imag(q)
    ur, ui = jnp.real(u), jnp.imag(u)
    w = jnp.asarray(omega)
    rows_c = jnp.stack([c, -2 * d * w, -ur, w * ui], axis=1)
    rows_d = jnp.stack([d, 2 * c * w, ui, w * ur], axis=1)
    a = jnp.concatenate([rows_c, rows_d], axis=0)
    rhs = jnp.concatenate([c * w**2, d * w**2])
    theta, pinv, singular = solve_least_squares(a, rhs)
    resid = a @ theta - rhs
    dof = max(a.shape[0] - 4, 1)
    s2 = jnp.sum(resid**2) / dof
    cov = s2 * pinv @ pinv.T
    return theta, cov, singular


def paper_fit(spectrum: Spectrum, excitation: Multisine, *, allow_shared_lines: bool = False) -> PaperFit:
    """Eqs. 52-58 (joint 1) and 63-69 (joint 2) on a ``Spectrum``; see the module docstring.

    Raises ``ValueError`` if the joints share lines (unless ``allow_shared_lines``; then each joint
    is fitted at its lines with its own torque, as printed, ignoring the other joint's torque).
    """
    i1, i2 = _own_lines(spectrum, excitation, allow_shared_lines)
    omega = spectrum.omega
    p1, c1, s1 = _fit_joint(spectrum.Q[i1, 0], spectrum.U[i1, 0], omega[i1])
    p2, c2, s2 = _fit_joint(spectrum.Q[i2, 1], spectrum.U[i2, 1], omega[i2])
    return PaperFit(p1, p2, c1, c2, jnp.stack([s1, s2]))


def paper_masses(
    b11: Float[ArrayLike, "*b"],
    b22: Float[ArrayLike, "*b"],
    lengths: Float[ArrayLike, " 2"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> Float[Array, "*b 2"]:
    """``(m1, m2)`` [kg] from ``b11, b22`` by eq. 15 (point-mass arm) solved for the masses."""
    l1, l2 = jnp.asarray(lengths)[0], jnp.asarray(lengths)[1]
    q20 = jnp.asarray(q0, dtype=float)[1]
    c2, s2 = jnp.cos(q20), jnp.sin(q20)
    b11, b22 = jnp.asarray(b11), jnp.asarray(b22)
    m2 = 1.0 / (l2**2 * b22 - b11 * (l1 * c2 + l2) ** 2)
    m1 = 1.0 / (l1**2 * b11) - m2 * s2**2
    return jnp.stack([m1, m2], axis=-1)


@register("paper")
def paper(
    record: Record,
    excitation: Multisine,
    nominal: TwoLinkArm,
    *,
    unknowns: Sequence[str] = PAPER_UNKNOWNS,
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
    noise_std: float | Float[Array, ""] | None = None,
    method: str = "projection",
    allow_shared_lines: bool = False,
) -> Estimate:
    """The paper's estimator (a labelled reproduction): masses from per-joint template fits.

    Args:
        record: measured record (whole periods for the paper's projection, eq. 48).
        excitation: the applied ``Multisine``; the joints' lines must be disjoint (``"split"``).
        nominal: arm whose lengths ``l1, l2`` enter the mass mapping (point-mass formulas).
        unknowns: static subset of ``("m1", "m2")`` (the route estimates masses only).
        q0: operating point [rad] (``q20`` enters eq. 15).
        noise_std: unused (the paper's covariance comes from the fit residuals); accepted for the
            common interface.
        method: spectrum method (``"projection"`` is the paper's).
        allow_shared_lines: see ``paper_fit``.

    Returns:
        ``Estimate``; status ``SINGULAR`` if a joint's system is rank-deficient, ``FAILED`` if the
        mapping gives non-finite masses. Negative or wrong masses are *not* flagged: that is what
        the route returns on the real arm.
    """
    del noise_std
    unknowns = validate_unknowns(unknowns, PAPER_UNKNOWNS)
    spectrum = fourier_coefficients(record, excitation, method=method)
    fit = paper_fit(spectrum, excitation, allow_shared_lines=allow_shared_lines)
    b = jnp.stack([fit.joint1[3], fit.joint2[3]])
    masses = paper_masses(b[0], b[1], nominal.lengths, q0)
    jac = jax.jacfwd(lambda bb: paper_masses(bb[0], bb[1], nominal.lengths, q0))(b)
    cov_b = jnp.diag(jnp.stack([fit.covariance1[3, 3], fit.covariance2[3, 3]]))
    cov = jac @ cov_b @ jac.T
    pick = np.asarray([PAPER_UNKNOWNS.index(u) for u in unknowns])
    status: Int[Array, ""] = jnp.where(
        jnp.any(fit.singular), SINGULAR, jnp.where(jnp.all(jnp.isfinite(masses)), CONVERGED, FAILED)
    ).astype(jnp.int32)
    return Estimate(masses[pick], cov[pick][:, pick], status, unknowns)


# -- the paper's own model, for tests and demonstrations ----------------------------------------


def paper_template_parameters(arm: TwoLinkArm, q0: Float[ArrayLike, " 2"] = (0.0, 0.0)) -> dict[str, Array]:
    """The template's ``σ0, ω0², p1…p4`` and ``B = (b_ij)`` for ``arm`` (eqs. 16-17, by autodiff).

    Built from the corrected ``A = −D0⁻¹ K0`` and ``B = D0⁻¹`` (friction left out, as in the paper).
    """
    a, bm = corrected_point_mass_state_matrices(arm, q0)
    return {
        "sigma0": (a[0, 0] + a[1, 1]) / 2,
        "omega0_sq": a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0],
        "p1": a[0, 1] * bm[1, 0] - a[1, 1] * bm[0, 0],
        "p2": a[0, 1] * bm[1, 1] - a[1, 1] * bm[0, 1],
        "p3": a[1, 0] * bm[0, 0] - a[0, 0] * bm[1, 0],
        "p4": a[1, 0] * bm[0, 1] - a[0, 0] * bm[1, 1],
        "B": bm,
    }


def paper_template_response(
    arm: TwoLinkArm,
    excitation: Multisine,
    t: Float[ArrayLike, " M"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> Float[Array, "M 2"]:
    """Steady state of the paper's first-order template ``(sI − A)⁻¹ B`` (eqs. 16-17) [rad].

    ``q0 + Re Σ_k G(jω_k) U_k e^{jω_k t}`` with ``G(s) = (s I − A)⁻¹ B``, ``A = −D0⁻¹ K0``,
    ``B = D0⁻¹``. Data the paper's route fits exactly (the template is stable at the hanging
    posture: the eigenvalues of ``A`` are ``−ω_n²``).
    """
    a, bm = corrected_point_mass_state_matrices(arm, q0)
    omega = jnp.asarray(excitation.line_frequencies)
    s = 1j * omega[:, None, None]
    g = inverse_2x2(s * jnp.eye(2) - a) @ bm
    qk = respond(g, excitation.phasors())
    return jnp.asarray(q0, dtype=float) + synthesise(qk, omega, t)
