"""``jaxid.fit.selection``: the two folds (halves of every training run) and the pooled left-out score."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxid.fit import selection
from jaxid.measure.logs import MeasuredLog


def _log(name, samples, step=0.01):
    t = jnp.arange(samples) * step
    q = jnp.stack([jnp.sin(t), jnp.cos(t)], axis=1)
    return MeasuredLog(t, q, 2.0 * q, None, f"{name}.csv", step, ("a", "b", "c", "d"), samples)


def test_the_folds_are_the_halves_of_every_run():
    logs = {"a": _log("a", 1001), "b": _log("b", 600)}
    first, second = selection.training_folds(logs)
    assert [label for label, _ in first] == ["a[first half]", "b[first half]"]
    assert [label for label, _ in second] == ["a[second half]", "b[second half]"]
    for (_, head), (_, tail), log in zip(first, second, logs.values(), strict=True):
        t = np.asarray(log.t)
        # Together the halves cover the run; they share only the middle sample.
        assert float(head.t[0]) == t[0] and float(tail.t[-1]) == t[-1]
        assert head.samples + tail.samples == log.samples + 1
        assert float(head.t[-1]) == float(tail.t[0])


def test_the_score_pools_the_left_out_folds(monkeypatch):
    # Each fold's "fit" returns the fold count it was trained without; the score of a parameter value on a
    # fold is (value + fold)² per sample, over 10 samples: the pooled RMSE is exact arithmetic.
    fitted = [["fold0"], ["fold1"]]
    evaluated = [[0], [1]]

    def fit(train):
        return np.array([1.0 if train == ["fold1"] else 2.0])

    def score(model, theta, logs):
        return (float(theta[0]) + logs[0]) ** 2 * 10, 10

    monkeypatch.setattr(selection, "fold_score", score)
    cv = selection.cross_validate(fitted, evaluated, fit, model=None, nominal=np.array([0.0]))
    # Left out fold 0: fitted on fold 1 → θ = 1, error 1; left out fold 1: fitted on fold 0 → θ = 2, error 3.
    assert cv["score"] == pytest.approx(math.sqrt((1.0 + 9.0) / 2))
    assert cv["nominal"] == pytest.approx(math.sqrt((0.0 + 1.0) / 2))
    assert cv["folds"] == 2


def test_a_fold_that_cannot_be_fitted_is_left_out(monkeypatch):
    def fit(train):
        if train == ["fold1"]:
            raise ValueError("rank deficient")
        return np.array([1.0])

    monkeypatch.setattr(selection, "fold_score", lambda model, theta, logs: (4.0, 1))
    cv = selection.cross_validate([["fold0"], ["fold1"]], [[0], [1]], fit, model=None)
    assert cv["folds"] == 1 and cv["score"] == pytest.approx(2.0) and math.isnan(cv["nominal"])
    none = selection.cross_validate([["a"], ["b"]], [[0], [1]], lambda train: np.array([np.nan]), model=None)
    assert none["folds"] == 0 and none["score"] == math.inf
