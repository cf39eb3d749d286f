"""The benchmark's estimators table (``jaxid.report.benchmark``): coverage of the reported std and
the reason written beside a coverage outside 0.85-0.99, on a synthetic run whose errors are chosen
so that every figure is known exactly (no simulation, no estimator)."""

import json

import numpy as np
import pandas as pd
import pytest

from jaxid.report.benchmark import COVERAGE_RANGE, write_benchmark_tables

TRIALS = 20
#: Per estimator: (errors of trial i, reported std, statuses) for both parameters.
HONEST = np.where(np.arange(TRIALS) % 2 == 0, 0.5, -0.5)
HONEST[-1] = 3.0  # one trial of 20 outside 1.96 × 1.0: coverage exactly 0.95
CASES = {
    # 19 of 20 inside; |bias| √20 / std = 0.175 × 4.47 / 0.77 ≈ 1.0 < 2.09: not significant.
    "honest": (HONEST, 1.0, ["ok"] * TRIALS),
    # Every |error| ≥ 2 > 1.96 × 0.5: coverage 0; the Monte Carlo std (0.51) matches the reported 0.5.
    "biased": (2.5 + np.where(np.arange(TRIALS) % 2 == 0, 0.5, -0.5), 0.5, ["ok"] * TRIALS),
    # Zero mean, |error| = 1 > 1.96 × 0.25: coverage 0, Monte Carlo std / reported ≈ 4.1.
    "overconfident": (np.where(np.arange(TRIALS) % 2 == 0, 1.0, -1.0), 0.25, ["ok"] * TRIALS),
    # Five ok trials, all outside: coverage 0 on too few trials to say why.
    "few": (np.full(TRIALS, 5.0), 1.0, ["ok"] * 5 + ["max_iterations"] * (TRIALS - 5)),
    # No trial ok: every figure empty, and the note says so.
    "none": (np.zeros(TRIALS), 1.0, ["max_iterations"] * TRIALS),
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    (run / "config.json").write_text(json.dumps({"experiment": {"kind": "benchmark"}, "settings": {"s": {}}}))
    rows = []
    for estimator, (errors, std, statuses) in CASES.items():
        for trial in range(TRIALS):
            for parameter, truth in (("a", 1.0), ("b", -2.0)):
                ok = statuses[trial] == "ok"
                rows.append(
                    {
                        "setting": "s",
                        "trial": trial,
                        "estimator": estimator,
                        "parameter": parameter,
                        "truth": truth,
                        "estimate": truth + errors[trial] if ok else np.nan,
                        "std": std if ok else np.nan,
                        "status": statuses[trial],
                        "seconds": 0.1,
                        "cpu_seconds": 0.1,
                        "heldout_rmse": 0.0,
                    }
                )
    (run / "chunks" / "s").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(run / "chunks" / "s" / "0000.parquet", index=False)
    out = write_benchmark_tables(run).set_index("estimator")
    return out, pd.read_csv(run / "summary.csv"), (run / "estimators.md").read_text()


def test_coverage_is_the_fraction_of_trials_inside_the_reported_interval(table):
    out, summary, _ = table
    coverage = summary.set_index(["estimator", "parameter"])["coverage95"]
    assert coverage["honest", "a"] == coverage["honest", "b"] == 0.95
    assert coverage["biased", "a"] == coverage["overconfident", "b"] == coverage["few", "a"] == 0.0
    assert out.loc["honest", "median_coverage95"] == out.loc["honest", "min_coverage95"] == 0.95
    assert out.loc["honest", "coverage_in_range"] == 1.0 and out.loc["biased", "coverage_in_range"] == 0.0
    assert COVERAGE_RANGE[0] <= 0.95 <= COVERAGE_RANGE[1]


def test_the_note_says_why_coverage_is_outside_the_range(table):
    out, _, markdown = table
    assert out.loc["honest", "coverage_note"] == ""
    assert out.loc["honest", "biased_fraction"] == 0.0
    # Biased: every parameter's bias significant, the reported std right.
    biased = out.loc["biased"]
    assert biased["biased_fraction"] == 1.0
    assert biased["median_bias_over_std"] == pytest.approx(2.5 / np.std(CASES["biased"][0], ddof=1))
    assert biased["median_std_over_reported"] == pytest.approx(np.std(CASES["biased"][0], ddof=1) / 0.5)
    assert biased["coverage_note"].startswith("biased") and "std too" not in biased["coverage_note"]
    # Overconfident: no bias, the reported std ~4 times too small.
    over = out.loc["overconfident"]
    assert over["biased_fraction"] == 0.0
    assert over["median_std_over_reported"] == pytest.approx(np.std(CASES["overconfident"][0], ddof=1) / 0.25)
    assert over["coverage_note"].startswith("reported std too small")
    assert out.loc["few", "coverage_note"] == "too few trials (5 ok) to judge"
    assert out.loc["none", "coverage_note"] == "no trial ok: nothing to judge"
    assert out.loc["none", "ok"] == 0 and np.isnan(out.loc["none", "median_coverage95"])
    assert "coverage_note" in markdown.splitlines()[0]


def test_honest_share_in_range_is_the_binomial_probability():
    """``honest_in_range``: at 20 trials a coverage is in 0.85-0.99 when 17-19 of 20 intervals cover
    (``1 − 0.95²⁰ − P(X ≤ 16)``); at 1000 trials essentially always."""
    from math import comb

    from jaxid.report.benchmark import honest_in_range

    exact = sum(comb(20, k) * 0.95**k * 0.05 ** (20 - k) for k in (17, 18, 19))
    assert honest_in_range(20) == pytest.approx(exact, rel=1e-12)
    assert honest_in_range(1000) > 0.999


def test_a_good_median_with_many_parameters_failing_gets_a_note():
    """Five parameters over 1000 trials: three honest (coverage 0.95), two never covered and biased. The
    median (0.95) is in range but 40 % of the parameters are not: the note says so and why."""
    from jaxid.report.benchmark import coverage_diagnosis

    summary = pd.DataFrame(
        {
            "coverage95": [0.95, 0.95, 0.95, 0.0, 0.0],
            "n_ok": 1000,
            "std": 1.0,
            "reported_std": 1.0,
            "bias": [0.0, 0.01, -0.01, 3.0, 3.0],
            "rmse": [1.0, 1.0, 1.0, 3.2, 3.2],
        }
    )
    out = coverage_diagnosis(summary)
    assert out["coverage_in_range"] == 0.6 and out["biased_fraction"] == 0.4
    assert out["coverage_note"].startswith("median in range, but 40% of parameters outside 0.85-0.99 (lowest 0):")
    assert "biased" in out["coverage_note"]
    honest = coverage_diagnosis(summary.iloc[:3])
    assert honest["coverage_note"] == ""


def test_a_pipe_in_a_note_does_not_split_its_markdown_cell(table):
    """The biased note holds ``|bias|/std``: every row of the Markdown table still has the header's cells."""
    _, _, markdown = table
    header, _, *rows = markdown.strip().splitlines()
    cells = header.count(" | ")
    assert rows and all(r.replace("\\|", "").count(" | ") == cells for r in rows)
    assert any("\\|bias\\|/std" in r for r in rows)
