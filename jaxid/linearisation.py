"""Linearisation of the arm at an operating point, its frequency response, and the paper's eqs. 14-15.

About ``(q0, tau0 = G(q0))`` the arm obeys ``D0 δq'' + Fv δq' + K0 δq = δτ`` with
``D0 = D(q0)``, ``K0 = ∂G/∂q (q0)`` (by autodiff) and ``Fv`` the viscous friction. It is a
**fourth-order** system; its frequency response is ``H(jω) = (K0 − ω² D0 + jω Fv)⁻¹``.

Only ``q0 = (0, 0)`` (hanging) is stable without feedback; other postures are equilibria whose
linearisation may have unstable poles (``LinearArm.is_stable`` says so).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float

from .model import TwoLinkArm, gravity_torque, mass_matrix

__all__ = [
    "LinearArm",
    "linearise",
    "paper_state_matrices",
    "corrected_point_mass_state_matrices",
]


class LinearArm(eqx.Module):
    """``D0 δq'' + Fv δq' + K0 δq = δτ`` about ``(q0, tau0)``; all fields are arrays.

    Attributes:
        mass: ``D0`` [kg m²], ``(2, 2)``.
        damping: ``Fv`` [N m s/rad], ``(2, 2)`` (diagonal).
        stiffness: ``K0 = ∂G/∂q(q0)`` [N m/rad], ``(2, 2)``.
        q0: operating point [rad], ``(2,)``.
        tau0: holding torque ``G(q0)`` [N m], ``(2,)``.
    """

    mass: Float[Array, "2 2"]
    damping: Float[Array, "2 2"]
    stiffness: Float[Array, "2 2"]
    q0: Float[Array, "2"]
    tau0: Float[Array, "2"]

    def impedance(self, omega: Float[ArrayLike, "*k"]) -> Complex[Array, "*k 2 2"]:
        """``Z(jω) = K0 − ω² D0 + jω Fv`` for angular frequencies ``omega`` [rad/s]."""
        w = jnp.asarray(omega)[..., None, None]
        return self.stiffness - w**2 * self.mass + 1j * w * self.damping

    def frequency_response(self, omega: Float[ArrayLike, "*k"]) -> Complex[Array, "*k 2 2"]:
        """``H(jω) = Z(jω)⁻¹`` [rad/(N m)], mapping torque phasors to angle phasors."""
        return jnp.linalg.inv(self.impedance(omega))

    def state_space(self) -> tuple[Float[Array, "4 4"], Float[Array, "4 2"]]:
        """``x' = A x + B δτ`` with ``x = (δq, δq')``."""
        dinv = jnp.linalg.inv(self.mass)
        zero, eye = jnp.zeros((2, 2)), jnp.eye(2)
        a = jnp.block([[zero, eye], [-dinv @ self.stiffness, -dinv @ self.damping]])
        b = jnp.concatenate([zero, dinv], axis=0)
        return a, b

    def poles(self) -> Complex[Array, "4"]:
        """The four eigenvalues of ``A`` [1/s]."""
        return jnp.linalg.eigvals(self.state_space()[0])

    def slowest_decay_rate(self) -> Float[Array, ""]:
        """``min |Re λ|`` over the poles [1/s]: the rate the last transient dies at."""
        return jnp.min(-jnp.real(self.poles()))

    def is_stable(self) -> Array:
        return jnp.all(jnp.real(self.poles()) < 0)


def linearise(arm: TwoLinkArm, q0: Float[ArrayLike, "2"] = (0.0, 0.0)) -> LinearArm:
    """Linearise ``arm`` at rest at ``q0`` (tau0 = G(q0)) by automatic differentiation.

    Works under ``jit``/``vmap``/``grad`` (``arm`` and ``q0`` are traced).
    """
    q0 = jnp.asarray(q0, dtype=float)
    if q0.shape != (2,):
        raise ValueError(f"q0 must have shape (2,), got {q0.shape}; batch with vmap instead.")
    stiffness = jax.jacfwd(lambda q: gravity_torque(arm, q))(q0)
    return LinearArm(
        mass=mass_matrix(arm, q0),
        damping=jnp.diag(arm.friction),
        stiffness=stiffness,
        q0=q0,
        tau0=gravity_torque(arm, q0),
    )


def corrected_point_mass_state_matrices(arm: TwoLinkArm, q0: ArrayLike = (0.0, 0.0)) -> tuple[Array, Array]:
    """``(A, B)`` of ``δq'' = A δq + B δτ`` (friction left out, as in the paper) by autodiff.

    ``A = −D0⁻¹ K0`` and ``B = D0⁻¹``; for the point-mass arm these are what the paper's eqs.
    14 and 15 should read. Returns two ``(2, 2)`` arrays.
    """
    lin = linearise(arm, q0)
    dinv = jnp.linalg.inv(lin.mass)
    return -dinv @ lin.stiffness, dinv


def paper_state_matrices(arm: TwoLinkArm, q0: ArrayLike = (0.0, 0.0)) -> tuple[Array, Array]:
    """The paper's eqs. 14 (``a_ij``) and 15 (``b_ij``) **exactly as printed**.

    Kept only to show the paper's errors (DESIGN.md §3): ``a11`` has a misplaced bracket,
    ``a21`` misses a term (zero at ``q20 = 0``), ``a22`` is wrong altogether (it has no ``g``;
    it equals ``b22 − b11``). Eq. 15 is right for the point-mass arm. Uses ``m_i`` and ``l_i``
    only (the point-mass model).

    Angle convention: the printed ``a_ij`` measure ``q1`` from the **horizontal** (as the paper's
    eq. 7 does, with ``G ∝ cos q1``), so they are evaluated at the paper's angle
    ``q1 − π/2``; ``q0`` is given in jaxid's convention (from the downward vertical), the same
    as for ``corrected_point_mass_state_matrices``. With that, the disagreements are exactly:
    ``a11`` and ``a21`` only where ``q20 ≠ 0``, ``a22`` everywhere; ``a12`` and all ``b_ij`` agree
    (``tests/test_model.py::test_paper_eqs_14_15_against_autodiff``).
    """
    q0 = jnp.asarray(q0, dtype=float)
    q0 = q0.at[0].add(-jnp.pi / 2)  # jaxid (from the downward vertical) -> paper (from the horizontal)
    m1, m2 = arm.masses[0], arm.masses[1]
    l1, l2 = arm.lengths[0], arm.lengths[1]
    g = arm.gravity
    q10, q20 = q0[0], q0[1]
    s10, c10 = jnp.sin(q10), jnp.cos(q10)
    s20, c20 = jnp.sin(q20), jnp.cos(q20)
    den = m1 + m2 - m2 * c20**2
    # Eq. 14 as printed: g*(2 m1 sin q10) + m2 sin q10 - m2 sin(q10 + 2 q20), over l1 (2m1 + m2 - m2 cos 2q20).
    a11 = (g * (2 * m1 * s10) + m2 * s10 - m2 * jnp.sin(q10 + 2 * q20)) / (l1 * (2 * m1 + m2 - m2 * jnp.cos(2 * q20)))
    a12 = -g * m2 * (jnp.sin(q10 + 2 * q20) + s10) / (l1 * (2 * m1 + m2 - m2 * jnp.cos(2 * q20)))
    a21 = (
        g
        * (l2 * m2 * c20**2 * s10 - l2 * m2 * s10 - l2 * m1 * s10 + l1 * m1 * c10 * s20 + l2 * m2 * c10 * c20 * s20)
        / (l1 * l2 * den)
    )
    a22 = (l1**2 * m1 + l1**2 * m2 + 2 * l1 * l2 * m2 * c20) / (l1**2 * l2**2 * m2 * den)
    b11 = 1 / (l1**2 * den)
    b12 = -(l2 + l1 * c20) / (l1**2 * l2 * den)
    b22 = (l1**2 * m1 + l1**2 * m2 + l2**2 * m2 + 2 * l1 * l2 * m2 * c20) / (l1**2 * l2**2 * m2 * den)
    a = jnp.array([[a11, a12], [a21, a22]])
    b = jnp.array([[b11, b12], [b12, b22]])
    return a, b
