"""``jaxid._platform.thread_map``: the log estimators' independent programs on one thread per core.

A compiled program runs on the thread that calls it, so ``thread_map`` is what puts a second core to
work; these tests check that it really runs calls at once (a barrier that only concurrent calls pass,
not a timing), keeps their order, raises their errors, and that the estimators' numbers do not depend
on it (``rowwise`` and a pass of output error with one thread and with two, bit for bit).
"""

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from jaxid import _platform
from jaxid._platform import host_threads, thread_map
from jaxid.estimate.logs.data import rowwise
from jaxid.estimate.logs.shooting_passes import PassRequest, run_passes
from jaxid.estimate.logs.stepping import stage_torques


def test_host_threads_is_the_affinity_mask():
    assert host_threads() == len(__import__("os").sched_getaffinity(0))


def test_calls_run_at_once_in_order_and_raise(monkeypatch):
    monkeypatch.setattr(_platform, "host_threads", lambda: 2)
    barrier = threading.Barrier(2, timeout=30)  # broken unless two calls wait on it at the same time

    def meet(x):
        barrier.wait()
        return x * x, threading.get_ident()

    out = thread_map(meet, [3, 4])
    assert [v for v, _ in out] == [9, 16]
    assert out[0][1] != out[1][1]
    assert thread_map(lambda x: -x, range(7)) == [0, -1, -2, -3, -4, -5, -6]

    def fail(x):
        if x == 2:
            raise ValueError("item 2")
        return x

    with pytest.raises(ValueError, match="item 2"):
        thread_map(fail, range(4))
    monkeypatch.setattr(_platform, "host_threads", lambda: 1)
    assert thread_map(lambda x: threading.get_ident(), range(3)) == [threading.get_ident()] * 3


def _square_rows(x, y):
    return jnp.sin(x) * y


@pytest.mark.parametrize("threads", [1, 2])
def test_rowwise_is_the_same_on_any_number_of_threads(monkeypatch, threads):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2, 2500, 3))
    monkeypatch.setattr(_platform, "host_threads", lambda: threads)
    out = rowwise(_square_rows, x, y, block=1024)
    np.testing.assert_array_equal(out, np.sin(x) * y)


def _regressor(q, qd, qdd):
    """A one-joint pendulum ``J q'' + c q' + m g l sin q = τ`` as a regressor ``(1, 3)``."""
    return jnp.stack([qdd, qd, jnp.sin(q)], axis=-1)


def test_a_shooting_pass_is_the_same_on_one_thread_and_two(monkeypatch):
    rng = np.random.default_rng(1)
    segments, length = 5, 8
    tau = rng.normal(size=(segments * length + 1, 1))
    torques = np.asarray(stage_torques(jnp.asarray(tau)))[: segments * length].reshape(segments, length, 3, 1)
    measured = rng.normal(scale=0.1, size=(segments, length, 1))
    states = rng.normal(scale=0.1, size=(segments, 2))
    theta = np.array([0.5, 0.1, 2.0])
    static = dict(regressor=_regressor, known=None, sample_step=0.01, stride=1, substeps=1)
    request = PassRequest(torques, measured, theta, states, np.ones(1), static)
    out = {}
    for threads in (1, 2):
        monkeypatch.setattr(_platform, "host_threads", lambda t=threads: t)
        out[threads] = run_passes(True, [request], chunk_segments=2)[0]  # three chunks, run on the threads
    for a, b in zip(out[1], out[2], strict=True):
        np.testing.assert_array_equal(a, b)
    assert out[1].res.shape[0] == segments
