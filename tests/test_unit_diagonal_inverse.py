"""The one scaled-inverse kernel of the bounds (``jaxid.estimate.crlb.unit_diagonal_inverse``): both
inverters (``jnp.linalg.inv``, the unrolled ``jaxid.linalg.inverse`` of ``cramer_rao_bound``) against
numpy's inverse of a badly scaled information matrix, and ``inverse_information`` is that kernel."""

import jax.numpy as jnp
import numpy as np

from jaxid import linalg
from jaxid.estimate.crlb import cramer_rao_bound, inverse_information, unit_diagonal_inverse


def test_both_inverters_agree_on_a_badly_scaled_information():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 6)) * np.array([1e-3, 1.0, 1e2, 1.0, 1e-2, 10.0])  # column scales 1e-3 … 1e2
    info = a.T @ a
    exact = np.linalg.inv(info)
    for out in (
        unit_diagonal_inverse(info),
        unit_diagonal_inverse(info, linalg.inverse),
        cramer_rao_bound(jnp.asarray(info)),
    ):
        np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-9, atol=0)
    np.testing.assert_array_equal(np.asarray(inverse_information(info)), np.asarray(unit_diagonal_inverse(info)))
