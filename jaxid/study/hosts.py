"""Multi-process (``jax.distributed``) helpers of the study runner.

In a one-process run every function here is the identity (or a no-op). With several processes,
each process computes its contiguous share of a chunk's trials, the shares are gathered back in
trial order, and only process 0 writes files.
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["to_host", "is_writer", "sync", "process_slice", "gather_processes"]


def to_host(x) -> np.ndarray:
    """A (possibly multi-process, sharded) array as a numpy array with the full global value."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def is_writer() -> bool:
    """Only process 0 writes files in a multi-process (``jax.distributed``) run."""
    return jax.process_index() == 0


def sync(name: str) -> None:
    """A barrier across processes (no-op in a one-process run)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def process_slice(tree):
    """This process's contiguous share of the trial axis, on its first local device.

    Returns ``(local tree, n, lo, hi)``: trials ``lo:hi`` of ``n`` are this process's (all of
    them in a one-process run).
    """
    n = jax.tree.leaves(tree)[0].shape[0]
    count, index = jax.process_count(), jax.process_index()
    if count == 1:
        # Gather onto one device without a round trip through host memory.
        return jax.device_put(tree, jax.local_devices()[0]), n, 0, n
    tree = jax.tree.map(to_host, tree)
    per = -(-n // count)
    lo, hi = min(index * per, n), min((index + 1) * per, n)
    if hi == lo:  # more processes than trials: compute a dummy trial, drop it when gathering
        local = jax.tree.map(lambda x: x[:1], tree)
        return jax.device_put(local, jax.local_devices()[0]), n, n, n
    local = jax.tree.map(lambda x: x[lo:hi], tree)
    return jax.device_put(local, jax.local_devices()[0]), n, lo, hi


def gather_processes(x, lo: int, hi: int, n: int) -> np.ndarray:
    """Concatenate every process's trials ``lo:hi`` back into the ``n`` trials, in order."""
    x = np.asarray(x)
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    count = jax.process_count()
    per = -(-n // count)
    padded = np.zeros((per, *x.shape[1:]), dtype=x.dtype)
    padded[: hi - lo] = x[: hi - lo]
    gathered = np.asarray(multihost_utils.process_allgather(padded, tiled=False))  # (count, per, ...)
    parts = [gathered[i, : max(0, min((i + 1) * per, n) - i * per)] for i in range(count)]
    return np.concatenate(parts, axis=0)
