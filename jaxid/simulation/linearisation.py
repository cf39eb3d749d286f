"""Linearisation of the arm at an operating point, its frequency response, and the paper's eqs. 14-15.

About ``(q0, tau0 = G(q0))`` the arm obeys ``D0 δq'' + Fv δq' + K0 δq = δτ`` with
``D0 = D(q0)``, ``K0 = ∂G/∂q (q0)`` (by autodiff) and ``Fv`` the viscous friction. It is a
**fourth-order** system; its frequency response is ``H(jω) = (K0 − ω² D0 + jω Fv)⁻¹``.

Only ``q0 = (0, 0)`` (hanging) is stable without feedback; other postures are equilibria whose
linearisation may have unstable poles (``LinearArm.is_stable`` says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float

from ..linalg import inverse, inverse_2x2
from ..model import (
    LINEAR_PARAMETERS,
    PARAMETER_NAMES,
    AbstractArm,
    TwoLinkArm,
    gravity_torque,
    holding_torque,
    inverse_dynamics,
    mass_matrix,
    validate_unknowns,
)
from ..types import any_traced

__all__ = [
    "LinearArm",
    "linearise",
    "paper_state_matrices",
    "corrected_point_mass_state_matrices",
    "UNSTRUCTURED_NAMES",
    "resolve_unknowns",
    "linear_system",
    "parameter_values",
    "affine_impedance",
    "impedance_model",
    "is_affine",
]


def _inverse(z: Array) -> Array:
    """``z⁻¹`` over trailing ``(n, n)`` axes with no LAPACK call: the closed form for ``n = 2``
    (``jaxid.linalg.inverse_2x2``), unrolled elimination (``jaxid.linalg.inverse``) otherwise."""
    n = z.shape[-1]
    if n == 2:
        return inverse_2x2(z)
    flat = z.reshape(-1, n, n)
    return jax.vmap(inverse)(flat).reshape(z.shape)


class LinearArm(eqx.Module):
    """``D0 δq'' + Fv δq' + K0 δq = δτ`` about ``(q0, tau0)``; all fields are arrays.

    Attributes (``n`` joints: 2 for ``TwoLinkArm``, any for another ``AbstractArm``):
        mass: ``D0`` [kg m²], ``(n, n)``.
        damping: ``Fv`` [N m s/rad], ``(n, n)`` (diagonal for joint friction).
        stiffness: ``K0 = ∂G/∂q(q0)`` [N m/rad], ``(n, n)``.
        q0: operating point [rad], ``(n,)``.
        tau0: holding torque ``G(q0)`` [N m], ``(n,)``.
    """

    mass: Float[Array, "n n"]
    damping: Float[Array, "n n"]
    stiffness: Float[Array, "n n"]
    q0: Float[Array, " n"]
    tau0: Float[Array, " n"]

    def impedance(self, omega: Float[ArrayLike, "*k"]) -> Complex[Array, "*k n n"]:
        """``Z(jω) = K0 − ω² D0 + jω Fv`` for angular frequencies ``omega`` [rad/s]."""
        w = jnp.asarray(omega)[..., None, None]
        return self.stiffness - w**2 * self.mass + 1j * w * self.damping

    def frequency_response(self, omega: Float[ArrayLike, "*k"]) -> Complex[Array, "*k n n"]:
        """``H(jω) = Z(jω)⁻¹`` [rad/(N m)], mapping torque phasors to angle phasors.

        The closed-form 2x2 inverse for two joints (``jaxid.linalg.inverse_2x2``), unrolled
        elimination for more: no LAPACK call, so it is safe inside optimiser loops under a large
        ``vmap`` (see ``jaxid.linalg``).
        """
        return _inverse(self.impedance(omega))

    def state_space(self) -> tuple[Float[Array, "s s"], Float[Array, "s n"]]:
        """``x' = A x + B δτ`` with ``x = (δq, δq')``."""
        n = self.mass.shape[-1]
        dinv = _inverse(self.mass)
        zero, eye = jnp.zeros((n, n)), jnp.eye(n)
        a = jnp.block([[zero, eye], [-dinv @ self.stiffness, -dinv @ self.damping]])
        b = jnp.concatenate([zero, dinv], axis=0)
        return a, b

    def poles(self) -> Complex[Array, " s"]:
        """The ``2n`` eigenvalues of ``A`` [1/s]."""
        return jnp.linalg.eigvals(self.state_space()[0])

    def slowest_decay_rate(self) -> Float[Array, ""]:
        """``min |Re λ|`` over the poles [1/s]: the rate the last transient dies at."""
        return jnp.min(-jnp.real(self.poles()))

    def is_stable(self) -> Array:
        return jnp.all(jnp.real(self.poles()) < 0)


def linearise(arm: AbstractArm, q0: Float[ArrayLike, " n"] | None = None) -> LinearArm:
    """Linearise ``arm`` at rest at ``q0`` (``tau0 = holding_torque(arm, q0)``) by automatic differentiation.

    The matrices are the Jacobians of the one inverse-dynamics function at ``(q0, 0, 0)``:
    ``D0 = ∂τ/∂q''`` (rotor inertia included), ``Fv = ∂τ/∂q'`` (viscous friction plus the slope
    ``fc (2/π) k`` of a smooth Coulomb term at rest) and ``K0 = ∂τ/∂q``. For a rigid arm without the
    optional terms these are exactly ``D(q0)``, ``diag(fv)`` and ``∂G/∂q`` (Coriolis terms are
    quadratic in ``q'`` and vanish). Works under ``jit``/``vmap``/``grad`` (``arm`` and ``q0`` are traced).
    Any ``AbstractArm`` (``n = arm.dof`` joints; ``q0`` defaults to zeros, the hanging posture of
    the two-link arm, and the URDF's zero posture of a ``SerialArm``, which need not be an
    equilibrium that is stable without feedback: ``LinearArm.is_stable`` says).
    """
    q0 = jnp.zeros(arm.dof) if q0 is None else jnp.asarray(q0, dtype=float)
    if q0.shape != (arm.dof,):
        raise ValueError(f"q0 must have shape ({arm.dof},), got {q0.shape}; batch with vmap instead.")
    zero = jnp.zeros_like(q0)
    stiffness = jax.jacfwd(lambda q: gravity_torque(arm, q))(q0)
    damping = jax.jacfwd(lambda v: inverse_dynamics(arm, q0, v, zero))(zero)
    return LinearArm(
        mass=mass_matrix(arm, q0),
        damping=damping,
        stiffness=stiffness,
        q0=q0,
        tau0=holding_torque(arm, q0),
    )


def corrected_point_mass_state_matrices(arm: TwoLinkArm, q0: ArrayLike = (0.0, 0.0)) -> tuple[Array, Array]:
    """``(A, B)`` of ``δq'' = A δq + B δτ`` (friction left out, as in the paper) by autodiff.

    ``A = −D0⁻¹ K0`` and ``B = D0⁻¹``; for the point-mass arm these are what the paper's eqs.
    14 and 15 should read. Returns two ``(2, 2)`` arrays.
    """
    lin = linearise(arm, q0)
    dinv = inverse_2x2(lin.mass)
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


# -- parameterisations of the linearised arm ----------------------------------------------------
#
# The frequency-domain estimators and the Cramér–Rao bound work on the linearisation
# ``D0 δq'' + Fv δq' + K0 δq = δτ``. Its unknowns are either *physical* parameters of the arm
# (any of ``PARAMETER_NAMES``; the linearisation is re-derived by autodiff for each value), or an
# *unstructured* set of entries of ``D0``, ``K0`` and ``Fv`` themselves (``UNSTRUCTURED_NAMES``;
# ``D0`` and ``K0`` are symmetric, ``Fv`` diagonal), useful when the arm's geometry is not
# trusted (e.g. the table1 arm with unknown inertias and centres of mass).

#: Entries of the linearisation that an unstructured fit may take as unknowns: ``d11, d12, d22``
#: of ``D0`` [kg m²], ``k11, k12, k22`` of ``K0`` [N m/rad] and ``fv1, fv2`` of ``Fv`` [N m s/rad].
UNSTRUCTURED_NAMES: tuple[str, ...] = ("d11", "d12", "d22", "k11", "k12", "k22", "fv1", "fv2")

_MATRIX_ENTRIES = {
    "d11": ("mass", 0, 0),
    "d12": ("mass", 0, 1),
    "d22": ("mass", 1, 1),
    "k11": ("stiffness", 0, 0),
    "k12": ("stiffness", 0, 1),
    "k22": ("stiffness", 1, 1),
    "fv1": ("damping", 0, 0),
    "fv2": ("damping", 1, 1),
}


def resolve_unknowns(unknowns: Sequence[str], arm: AbstractArm | None = None) -> tuple[tuple[str, ...], bool]:
    """Check a set of unknowns; return ``(unknowns, unstructured)``.

    The set is *unstructured* when it names any entry of ``D0`` or ``K0`` (``d11 … k22``, the
    two-link arm's); then every name must be in ``UNSTRUCTURED_NAMES`` (``fv1``/``fv2`` are the
    diagonal of ``Fv``). Otherwise every name must be a physical parameter: one of ``arm``'s
    ``parameter_names`` (default the two-link arm's ``PARAMETER_NAMES``). Raises ``ValueError``
    saying what to change.
    """
    if isinstance(unknowns, str):
        unknowns = (unknowns,)
    unknowns = tuple(unknowns)
    allowed = PARAMETER_NAMES if arm is None or isinstance(arm, TwoLinkArm) else arm.parameter_names
    matrix = [u for u in unknowns if u in _MATRIX_ENTRIES and u not in ("fv1", "fv2") and u not in allowed]
    if matrix:
        if allowed is not PARAMETER_NAMES:
            raise ValueError(
                f"Unstructured unknowns ({matrix}) are defined for the two-link arm only; name parameters of this "
                f"arm instead ({type(arm).__name__}.parameter_names)."
            )
        return validate_unknowns(unknowns, UNSTRUCTURED_NAMES), True
    return validate_unknowns(unknowns, allowed), False


def linear_system(
    nominal: AbstractArm,
    unknowns: Sequence[str],
    theta: Float[ArrayLike, " p"],
    q0: Float[ArrayLike, " n"] | None = None,
) -> LinearArm:
    """The linearisation at ``q0`` of ``nominal`` with the unknowns set to ``theta``.

    Physical unknowns are written into the arm and the arm is linearised by autodiff; unstructured
    unknowns overwrite entries of the nominal linearisation (symmetrically for ``d12``, ``k12``).
    Traceable in ``theta`` (this is the model every frequency-domain estimator fits, and what the
    Cramér–Rao bound differentiates). Any ``AbstractArm`` with physical unknowns (its own
    ``parameter_names``, e.g. a ``SerialArm``'s standard parameters); unstructured ones are the
    two-link arm's.
    """
    unknowns, unstructured = resolve_unknowns(unknowns, nominal)
    theta = jnp.asarray(theta)
    if theta.shape != (len(unknowns),):
        raise ValueError(f"theta must have shape ({len(unknowns)},) for {list(unknowns)}, got {theta.shape}.")
    if not unstructured:
        return linearise(nominal.with_parameters(unknowns, theta), q0)
    lin = linearise(nominal, q0)
    for i, name in enumerate(unknowns):
        field, r, c = _MATRIX_ENTRIES[name]
        m = getattr(lin, field).at[r, c].set(theta[i]).at[c, r].set(theta[i])
        lin = eqx.tree_at(lambda a, field=field: getattr(a, field), lin, m)
    return lin


def parameter_values(
    arm: AbstractArm, unknowns: Sequence[str], q0: Float[ArrayLike, " n"] | None = None
) -> Float[Array, " p"]:
    """The true values of ``unknowns`` for ``arm`` (physical or unstructured; see ``linear_system``)."""
    unknowns, unstructured = resolve_unknowns(unknowns, arm)
    if not unstructured:
        return arm.parameter_vector(unknowns)
    lin = linearise(arm, q0)
    return jnp.stack(
        [getattr(lin, _MATRIX_ENTRIES[n][0])[_MATRIX_ENTRIES[n][1], _MATRIX_ENTRIES[n][2]] for n in unknowns]
    )


def is_affine(unknowns: Sequence[str]) -> bool:
    """Whether the impedance ``Z(ω; θ)`` is affine in ``θ`` (masses, inertias, friction, or
    unstructured entries; not lengths or centres of mass)."""
    unknowns, unstructured = resolve_unknowns(unknowns)
    return unstructured or all(u in LINEAR_PARAMETERS for u in unknowns)


def impedance_model(
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    omega: Float[ArrayLike, " L"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> Callable[[Array], Array]:
    """``θ ↦ Z(ω_k; θ)``, shape ``(L, 2, 2)`` complex, for the lines ``omega`` [rad/s].

    When ``Z`` is affine in ``θ`` (``is_affine``) it is precomputed once as
    ``Z0 + Σ_i θ_i Z_i`` (exact), which keeps iterative fits cheap; otherwise the arm is
    re-linearised at every call.
    """
    unknowns, _ = resolve_unknowns(unknowns)
    omega = jnp.asarray(omega)
    q0 = jnp.asarray(q0, dtype=float)

    def full(theta):
        return linear_system(nominal, unknowns, theta, q0).impedance(omega)

    if not is_affine(unknowns):
        return full

    z0, zi = affine_impedance(nominal, unknowns, omega, q0)
    return lambda theta: z0 + zi @ theta.astype(zi.dtype)


def affine_impedance(
    nominal: TwoLinkArm,
    unknowns: Sequence[str],
    omega: Float[ArrayLike, " L"],
    q0: Float[ArrayLike, " 2"] = (0.0, 0.0),
) -> tuple[Array, Array]:
    """``(Z0, Zθ)`` with ``Z(ω_k; θ) = Z0 + Zθ @ θ`` exactly, shapes ``(L, 2, 2)`` and
    ``(L, 2, 2, p)`` complex, for unknowns the impedance is affine in (``is_affine``; raises
    ``ValueError`` otherwise). ``Zθ`` is the Jacobian (forward mode, exact) at the nominal values,
    which are also the expansion point of ``Z0`` (an arm with zero masses is never built)."""
    unknowns, _ = resolve_unknowns(unknowns)
    if not is_affine(unknowns):
        raise ValueError(f"The impedance is not affine in {list(unknowns)}; use impedance_model.")
    args = (nominal, unknowns, jnp.asarray(omega), jnp.asarray(q0, dtype=float))
    # Inside a caller's program: one module-level compiled function (arrays traced, the unknowns
    # static), not a closure per call: ``ml`` computes it twice (its equation-error start and its
    # own fit), and a jitted function is traced and lowered once per shape there (issue 29). On
    # concrete inputs it runs op by op as before (the fused program rounds differently, ~1e-15).
    return _affine_impedance_jit(*args) if any_traced(args) else _affine_impedance(*args)


def _affine_impedance(nominal, unknowns, omega, q0):
    def split(theta):
        z = linear_system(nominal, unknowns, theta, q0).impedance(omega)
        return jnp.stack([jnp.real(z), jnp.imag(z)])

    theta_n = parameter_values(nominal, unknowns, q0)
    z_n, jac = split(theta_n), jax.jacfwd(split)(theta_n)
    zi = jac[0] + 1j * jac[1]  # (L, 2, 2, p), exact for an affine map
    return z_n[0] + 1j * z_n[1] - zi @ theta_n.astype(zi.dtype), zi


_affine_impedance_jit = eqx.filter_jit(_affine_impedance)
