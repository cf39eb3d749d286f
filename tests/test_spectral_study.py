"""The spectral noise path through the study runner: config checks, same statistics as the
time-domain path, results independent of the chunk size."""

import numpy as np
import pandas as pd
import pytest

import jaxid
from jaxid.config import parse_experiment
from jaxid.config.common import ConfigError


def _raw(path: str, trials: int = 300, chunk: int = 300, **defaults):
    return {
        "experiment": {"name": f"spectral_{path}", "seed": 3, "trials": trials, "chunk": chunk},
        "defaults": {
            "lines": "split",
            "scale": 0.25,
            "noise": "gaussian",
            "noise_level": 0.01,
            "noise_path": path,
            "estimators": ["equation_error", "ml"],
            "sample_step": 0.05,
            "discard_periods": 2,
            **defaults,
        },
        "settings": {"a": {}},
    }


def test_spectral_path_config_checks():
    parse_experiment(_raw("spectral"))
    with pytest.raises(ConfigError, match="Gaussian noise only"):
        parse_experiment(_raw("spectral", noise="uniform"))
    with pytest.raises(ConfigError, match="need the noisy record"):
        parse_experiment(_raw("spectral", estimators=["equation_error", "rls"]))
    with pytest.raises(ConfigError, match="method"):
        parse_experiment(_raw("spectral", estimator_options={"ml": {"method": "lstsq"}}))
    with pytest.raises(ConfigError, match="noise_path"):
        parse_experiment(_raw("frequency"))


@pytest.mark.slow
def test_spectral_path_matches_the_time_path(tmp_path):
    runs = {}
    for path, chunk in (("time", 300), ("spectral", 300), ("spectral", 128)):
        out = jaxid.run_experiment(
            parse_experiment(_raw(path, chunk=chunk)), tmp_path / f"{path}{chunk}", progress=False, figures=False
        )
        runs[path, chunk] = (pd.read_parquet(out / "trials.parquet"), pd.read_csv(out / "summary.csv"))
    # Chunk size does not change a trial: bit for bit, except equation_error's reported std (from
    # its covariance), which moves by up to 2 ulp with the chunk's vmap width (XLA vectorises a
    # reduction in it differently for another width).
    a, b = runs["spectral", 300][0], runs["spectral", 128][0]
    cols = ["setting", "trial", "estimator", "parameter", "estimate", "status"]
    a, b = (x.sort_values(cols[:4]).reset_index(drop=True) for x in (a, b))
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)
    np.testing.assert_allclose(b["std"], a["std"], rtol=1e-15, atol=0)
    # Same statistics as noise on every sample (different realisations): RMSE within Monte Carlo
    # error (300 trials: ~4 % each), and all trials ok.
    t, s = runs["time", 300][1], runs["spectral", 300][1]
    merged = t.merge(s, on=["setting", "estimator", "parameter"], suffixes=("_time", "_spectral"))
    ratio = merged["rmse_spectral"] / merged["rmse_time"]
    assert np.all(np.abs(ratio - 1) < 0.2), merged[["estimator", "parameter", "rmse_time", "rmse_spectral"]]
    assert (runs["spectral", 300][0]["status"] == "ok").all()
    ml = merged[merged.estimator == "ml"]
    assert np.all(ml["rmse_spectral"] < 1.3 * ml["sqrt_crlb_spectral"])  # ML on the bound
