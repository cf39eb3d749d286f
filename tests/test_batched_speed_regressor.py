"""The batched IDIM-LS's regressor entries (``jaxid.benchmark.batched``) are the standard regressor's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.benchmark.batched import _entries_regressor, _nonzero
from jaxid.model import load_arm
from jaxid.model.serial_dynamics import _joints
from jaxid.model.spatial import rnea_regressor_batched, rnea_regressor_entries

URDF = "data/robots/ur5_robot.urdf"


@pytest.fixture(scope="module")
def states():
    arm = load_arm(URDF)
    rng = np.random.default_rng(3)
    q, qd, qdd = (jnp.asarray(rng.normal(size=(40, arm.dof))) for _ in range(3))
    return arm, q, qd, qdd


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_entries_are_the_batched_regressor_s(states):
    arm, q, qd, qdd = states
    n = arm.dof
    gravity = jnp.broadcast_to(jnp.asarray(arm.gravity)[:, None], (3, q.shape[0]))
    full = np.asarray(rnea_regressor_batched(_joints(arm), q.T, gravity, qd.T, qdd.T))  # (n, 10 n, B)
    mask = np.triu(np.ones((n, n), dtype=bool))[..., None].repeat(10, axis=2).reshape(n, 10 * n)
    mask[:, ::3] = False  # some entries only
    got = np.asarray(rnea_regressor_entries(_joints(arm), q.T, gravity, qd.T, qdd.T, mask))
    np.testing.assert_array_equal(got, full.reshape(n * 10 * n, -1)[np.flatnonzero(mask)])
    with pytest.raises(ValueError, match="j > link i"):
        rnea_regressor_entries(_joints(arm), q.T, gravity, qd.T, qdd.T, np.ones((n, 10 * n), dtype=bool))


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_program_entries_are_the_standard_regressor_s(states):
    """``_entries_regressor``'s distinct rows, mapped back by ``sign * rows[index]``, are the standard
    regressor's entries (round-off: another association of the same sums), with and without the
    stage barriers (the same operations; XLA may contract a product and a sum into one rounding
    inside a fusion, so round-off apart), and it folds some duplicates."""
    arm, q, qd, qdd = states
    full = np.asarray(arm.standard_regressor(q, qd, qdd)).reshape(q.shape[0], -1)
    nonzero = _nonzero(arm)
    assert not np.any(full[:, ~nonzero.ravel()])  # the entries left out are zeros
    flat, index, sign, regressor = _entries_regressor(arm, nonzero)
    np.testing.assert_array_equal(flat, np.flatnonzero(nonzero))
    plain = jax.jit(lambda a, b, c: regressor(a, b, c))(q.T, qd.T, qdd.T)
    barred = jax.jit(lambda a, b, c, on: regressor(a, b, c, on))(q.T, qd.T, qdd.T, jnp.asarray(True))
    assert index.max() + 1 == plain.shape[0] < len(flat)  # some entries are another's (parallel joints)
    for rows in (plain, barred):
        got = sign[:, None] * np.asarray(rows)[index]
        np.testing.assert_allclose(got, full[:, flat].T, rtol=0, atol=1e-13 * np.max(np.abs(full)))
