"""Multisine excitation: phasors, presets, crest factor and input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxid


@pytest.mark.parametrize("lines", ["same", "split"])
@pytest.mark.parametrize("phases", ["zero", "schroeder", "random"])
def test_torque_equals_phasor_reconstruction(lines, phases):
    ex = jaxid.table2(lines, scale=1.7, phases=phases, key=jax.random.key(0))
    t = np.linspace(0.0, 2 * ex.period, 1001)
    u = ex.phasors()  # (L, 2), x(t) = Re{U e^{jωt}}
    recon = np.real(np.exp(1j * np.outer(t, ex.line_frequencies)) @ np.asarray(u))
    np.testing.assert_allclose(ex.torque(t), recon, rtol=1e-12, atol=1e-12)
    # Periodic with period T.
    np.testing.assert_allclose(ex.torque(t[:50] + ex.period), ex.torque(t[:50]), atol=1e-11)


# The paper's Table 2 (written out here, not taken from the package): harmonics of f0 = 0.01 Hz and
# the amplitudes of the torque's cosines; "The above torque has been applied to both joints".
PAPER_HARMONICS = (3, 5, 7, 9, 11, 13, 17, 21, 27, 42)
PAPER_AMPLITUDES = (0.2, 1.5, 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.4, 2.0)


def test_table2_presets():
    same, split = jaxid.table2("same"), jaxid.table2("split")
    assert same.harmonics == (PAPER_HARMONICS, PAPER_HARMONICS)
    assert split.harmonics == (PAPER_HARMONICS, tuple(k + 1 for k in PAPER_HARMONICS))
    np.testing.assert_array_equal(same.amplitudes, [PAPER_AMPLITUDES, PAPER_AMPLITUDES])
    np.testing.assert_array_equal(split.amplitudes, [PAPER_AMPLITUDES, PAPER_AMPLITUDES])
    assert same.fundamental == pytest.approx(2 * np.pi * 0.01, rel=1e-15)
    assert same.period == pytest.approx(100.0)
    # The torque itself, against the cosine sums of Table 2.
    t = np.linspace(0.0, 100.0, 1013)
    w0 = 2 * np.pi * 0.01
    tau = sum(d * np.cos(k * w0 * t) for k, d in zip(PAPER_HARMONICS, PAPER_AMPLITUDES, strict=True))
    tau2 = sum(d * np.cos((k + 1) * w0 * t) for k, d in zip(PAPER_HARMONICS, PAPER_AMPLITUDES, strict=True))
    np.testing.assert_allclose(same.torque(t), np.stack([tau, tau], -1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(split.torque(t), np.stack([tau, tau2], -1), rtol=0, atol=1e-12)
    # "split" puts each joint on its own lines: the other joint's phasor there is zero.
    u = np.asarray(split.phasors())
    assert np.all((u[:, 0] == 0) != (u[:, 1] == 0))
    np.testing.assert_allclose(np.abs(u).sum(axis=0), [sum(PAPER_AMPLITUDES)] * 2)
    np.testing.assert_allclose(jaxid.table2(scale=2.0).torque(3.0), 2 * same.torque(3.0))


def test_random_phases_are_keyed():
    a = jaxid.table2(phases="random", key=jax.random.key(1))
    b = jaxid.table2(phases="random", key=jax.random.key(1))
    c = jaxid.table2(phases="random", key=jax.random.key(2))
    np.testing.assert_array_equal(a.phases, b.phases)
    assert not np.allclose(a.phases, c.phases)
    with pytest.raises(ValueError, match="needs key"):
        jaxid.table2(phases="random")


def test_schroeder_lowers_crest_factor():
    for lines in ("same", "split"):
        zero = jaxid.table2(lines, phases="zero").crest_factor()
        schroeder = jaxid.table2(lines, phases="schroeder").crest_factor()
        # Measured: 3.89 -> 2.62 (same), 2.62 / 2.87 (split).
        assert np.all(schroeder < 0.75 * zero), (schroeder, zero)
    # A single cosine has crest factor sqrt(2).
    one = jaxid.Multisine(((1,), (2,)), [[1.0], [3.0]])
    np.testing.assert_allclose(one.crest_factor(), np.sqrt(2), rtol=1e-6)


def test_bad_harmonics_raise():
    amps = np.ones((2, 2))
    with pytest.raises(ValueError, match="not an integer"):
        jaxid.Multisine(((1, 2.5), (3, 4)), amps)
    with pytest.raises(ValueError, match="more than once"):
        jaxid.Multisine(((3, 3), (1, 2)), amps)
    with pytest.raises(ValueError, match="must be >= 1"):
        jaxid.Multisine(((0, 2), (1, 2)), amps)
    with pytest.raises(ValueError, match="same number of lines"):
        jaxid.Multisine(((1, 2), (3,)), amps)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        jaxid.Multisine(((1, 2), (3, 4)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="positive angular frequency"):
        jaxid.Multisine(((1, 2), (3, 4)), amps, fundamental=-1.0)
    with pytest.raises(ValueError, match="'same' or 'split'"):
        jaxid.table2("both")
    with pytest.raises(ValueError, match="zero', 'schroeder' or 'random'"):
        jaxid.table2(phases="minimal")


def test_sweep_over_amplitudes_compiles_once():
    ex = jaxid.table2()
    traced_peak = []

    @jax.jit
    def peak(e):
        traced_peak.append(1)
        return ex.replace(amplitudes=e.amplitudes, scale=e.scale).torque(np.arange(100) * 0.5).max(axis=0)

    traced = []
    ex_ok = jax.jit(lambda e: (traced.append(1), e.torque(1.0))[1])
    for s in (0.5, 1.0, 2.0):
        ex_ok(ex.replace(scale=s, amplitudes=ex.amplitudes * s))
        # Zero phases: every cosine peaks at t = 0, so the peak is the scaled sum of Table 2's amplitudes.
        np.testing.assert_allclose(peak(ex.replace(scale=s)), [s * sum(PAPER_AMPLITUDES)] * 2, rtol=1e-14)
    assert len(traced) == 1
    assert len(traced_peak) == 1


def test_a_multisine_on_any_number_of_joints():
    """One row of harmonics per joint: the phasors synthesise the torque on every joint."""
    exc = jaxid.Multisine([[1, 4], [2, 5], [3, 7]], [[1.0, 0.5], [0.3, 0.2], [0.7, 0.1]], [[0, 1], [2, 3], [4, 5]])
    assert exc.joints == 3 and exc.lines == (1, 2, 3, 4, 5, 7) and exc.max_harmonic == 7
    t = jnp.linspace(0.0, exc.period, 97)
    from jaxid.excitation.phasors import synthesise

    np.testing.assert_allclose(synthesise(exc.phasors(), exc.line_frequencies, t), exc.torque(t), atol=1e-12)
    with pytest.raises(ValueError, match="amplitudes must have shape \\(3, 2\\)"):
        jaxid.Multisine([[1, 4], [2, 5], [3, 7]], jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="same number of lines"):
        jaxid.Multisine([[1, 4], [2]], jnp.ones((2, 2)))
