"""A setting's extras (bounds and coefficient table) are compiled: the same numbers as the library
calls they wrap (called directly here), written by the study runner's ``write_setting_extras``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.config import parse_experiment
from jaxid.estimate.crlb import linear_crlb
from jaxid.estimate.nonlinear import nonlinear_crlb
from jaxid.excitation.phasors import respond
from jaxid.measure.noise import add_noise
from jaxid.measure.spectrum import fourier_coefficients
from jaxid.simulation import simulate
from jaxid.simulation.linearisation import linearise
from jaxid.study import extras
from jaxid.study.runner import _plan
from jaxid.study.sampling import trial_key

UNKNOWNS = ["m1", "m2", "fv1", "fv2"]


@pytest.fixture(scope="module")
def setting_extras(tmp_path_factory):
    exp = parse_experiment(
        {
            "experiment": {"name": "extras", "seed": 3, "trials": 2, "chunk": 2},
            "defaults": {
                "unknowns": UNKNOWNS,
                "lines": "split",
                "sample_step": 0.05,
                "discard_periods": 2,
                "noise": "uniform",
                "noise_level": 0.02,
                "q0": [0.1, -0.2],
            },
            "settings": {"a": {"scale": 0.3}},
        }
    )
    plan = _plan(exp, exp.settings[0])
    s = plan.setting
    record = simulate(plan.nominal, plan.excitation, q0=s["q0"], sample_step=0.05, discard_periods=2)
    out = tmp_path_factory.mktemp("extras")
    extras._UNIT_CRLB.clear()  # computed here, not found from an earlier test's setting
    extras.write_setting_extras(exp, plan, out, jax.tree.map(np.asarray, record))
    written = json.loads((out / "chunks" / "a" / "extras.json").read_text())
    return exp, plan, record, written


@pytest.mark.slow  # over 2 s warm with its fixtures: the quick tier leaves it out (README, Development)
def test_bounds_equal_the_library_calls(setting_extras):
    _, plan, _, written = setting_extras
    s = plan.setting
    assert "crlb_error" not in written and "crlb_nonlinear_error" not in written
    # The library functions called directly (each compiled on its own, at the setting's σ rather
    # than the unit σ the runner scales): the runner's wrappers must pass the same arguments.
    lin = jax.jit(
        lambda a, e: linear_crlb(a, e, UNKNOWNS, noise_std=plan.sigma, sample_step=0.05, periods=1, q0=s["q0"])
    )(plan.nominal, plan.excitation)
    nl = jax.jit(lambda a, e: nonlinear_crlb(a, e, UNKNOWNS, plan.sigma, q0=s["q0"], sample_step=0.05))(
        plan.nominal, plan.excitation
    )
    for name, cov in (("crlb", lin), ("crlb_nonlinear", nl)):
        got = np.array([written[name][u] for u in UNKNOWNS])
        np.testing.assert_allclose(got, np.sqrt(np.diag(np.asarray(cov))), rtol=1e-12, atol=0)
    # The two bounds are different quantities (linearised vs nonlinear model): not one copied.
    assert not np.allclose([written["crlb"][u] for u in UNKNOWNS], [written["crlb_nonlinear"][u] for u in UNKNOWNS])


def test_coefficient_table_equals_the_eager_library_calls(setting_extras):
    exp, plan, record, written = setting_extras
    s = plan.setting
    noisy = add_noise(record, key=trial_key(exp.seed, "a", 0), kind="uniform", level=0.02)
    lin = linearise(plan.nominal, jnp.asarray(s["q0"]))
    expected = {
        "theory (linearised)": respond(
            lin.frequency_response(jnp.asarray(plan.excitation.line_frequencies)), plan.excitation.phasors()
        ),
        "extracted, noise-free": fourier_coefficients(record, plan.excitation).Q,
        "extracted, noisy": fourier_coefficients(noisy, plan.excitation).Q,
    }
    rows = written["coefficients"]
    assert len(rows) == 3 * 2 * len(plan.excitation.lines)
    lines = list(plan.excitation.lines)
    for row in rows:
        x = complex(expected[row["source"]][lines.index(row["harmonic"]), row["joint"] - 1])
        scale = float(np.max(np.abs(np.asarray(expected[row["source"]]))))
        assert abs(row["C"] - x.real) <= 1e-12 * scale and abs(row["D"] + x.imag) <= 1e-12 * scale, row
    assert written["noise_mean"] == pytest.approx(0.01)
