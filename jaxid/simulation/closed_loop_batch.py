"""Closed-loop simulation of a batch of trials in one compiled call: ``simulate_closed_loop_batch``.

A batch of true arms and noise keys shares one reference, controller, noise model and limits. The
batch is split over the local devices (``shard_map``) and each device runs its share ``chunk_size``
trials at a time (``lax.map`` over ``vmap``-ed chunks) of the one-trial kernel
(``jaxid.simulation.closed_loop_kernel._closed_loop``, the same program ``simulate_closed_loop`` runs). A
trial's record depends only on its own arm, key and initial state, never on the batch it shares.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Key, UInt32

from ..excitation.fourier import FourierTrajectory, JointLimits
from ..model.serial import SerialArm
from .closed_loop_kernel import Control, _check_options, _closed_loop
from .closed_loop_record import ClosedLoopRecord, MeasurementNoise
from .controllers import AbstractController

__all__ = ["simulate_closed_loop_batch"]

_ARM_LEAF_NDIM = {"inertial": 2, "viscous": 1, "coulomb": 1, "armature": 1, "offset": 1, "gravity": 1}


def _batched_arms(arms: SerialArm, batch: int) -> SerialArm:
    """Every leaf with a leading axis ``batch`` (unbatched leaves are broadcast)."""
    leaves = []
    for name, ndim in _ARM_LEAF_NDIM.items():
        leaf = getattr(arms, name)
        if leaf.ndim == ndim:
            leaf = jnp.broadcast_to(leaf, (batch, *leaf.shape))
        elif leaf.ndim != ndim + 1 or leaf.shape[0] != batch:
            raise ValueError(
                f"arms.{name} must be unbatched or have one leading batch axis of {batch}, got {leaf.shape}."
            )
        leaves.append(leaf)
    return eqx.tree_at(lambda a: tuple(getattr(a, f) for f in _ARM_LEAF_NDIM), arms, tuple(leaves))


@functools.lru_cache(maxsize=32)
def _runner(static_items, ndev: int, chunk: int, noisy: bool):
    static = dict(static_items)

    def local(arms, keys, initial_states, reference, controller, noise, limits):
        def one(trial):
            arm, key, y0 = trial
            return _closed_loop(arm, reference, controller, noise, limits, key if noisy else None, y0, **static)

        return jax.lax.map(one, (arms, keys, initial_states), batch_size=chunk)

    if ndev > 1:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
        spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
        local = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(spec, spec, spec, shared, shared, shared, shared),
            out_specs=spec,
            check_vma=False,
        )
    # XLA's default vector width, not ``jaxid.simulation.batch.CPU_COMPILER_OPTIONS`` (512-bit): compiled with
    # it, an open-loop batch (a torque shared by the trials) returned non-finite or diverged states
    # in one SIMD lane of a chunk (every 8th trial) in 6 of 26 identical runs on an AVX-512 CPU
    # (jax 0.10.2), never in 16 runs at the default width. Reproduced by scripts/check_vector_width.py
    # (Panda, OpenLoop, 1 kHz, chunk 256, 2 host devices) on the generic path (unrolled=False), batch
    # 1024 (two chunks per device), 0.5 s: at 512 bits 2 of 5 fresh runs had 32 diverged trials, all
    # lane 3 of 8 of one device's second chunk, and in 3 of 5 a second call of the same executable
    # gave other bits (a run-time fault); 5/5 bitwise equal at the default width. Not seen at batch
    # 512 (one chunk per device; 10 runs) nor on the unrolled fast path at batch 1024 (13 runs, every
    # one bitwise equal to the default width). Cause unknown: kept at the default width.
    # docs/performance.md, "The 512-bit vector option".
    return jax.jit(local)


def simulate_closed_loop_batch(
    arms: SerialArm,
    reference: FourierTrajectory,
    controller: AbstractController,
    *,
    duration: float,
    keys: Key[Array, " B"] | UInt32[Array, "B 2"] | None = None,
    sample_step: float = 1e-3,
    substeps: int = 1,
    noise: MeasurementNoise | None = None,
    control: Control = "hold",
    saturate: bool = False,
    initial_states: Float[ArrayLike, "B 2 n"] | None = None,
    limits: JointLimits | None = None,
    shard: bool = True,
    chunk_size: int = 256,
) -> ClosedLoopRecord:
    """``simulate_closed_loop`` over a batch of ``B`` true arms and noise keys, in one compiled call.

    The batch is split over the local devices (``shard_map``; on CPU expose the cores with
    ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before importing jax) and each device
    runs its share ``chunk_size`` trials at a time (``lax.map`` over ``vmap``-ed chunks), as
    ``jaxid.simulate_batch`` does, compiled with XLA's default options (not the 512-bit vectors of
    ``jaxid.simulation.batch.CPU_COMPILER_OPTIONS``: see ``_runner``). A batch that is not a multiple of the
    device count is padded with copies of its last trial (then dropped). A trial's record depends
    only on its own arm, key and initial state (the chunk width and device count change it by
    rounding at most).

    Args:
        arms: a ``SerialArm`` whose leaves carry a leading batch axis ``B`` (unbatched leaves, e.g.
            gravity, are shared), e.g. ``arm.with_parameters(names, values)`` with ``values (B, p)``.
        reference, controller, noise, limits: shared by the batch (unbatched); ``vmap``
            ``simulate_closed_loop`` yourself for per-trial references or controllers.
        keys: ``(B,)`` PRNG keys, one per trial (e.g. ``jax.vmap(lambda i: jax.random.fold_in(root, i))``);
            ``None``: no noise.
        initial_states: ``(B, 2, n)``; default every trial starts on the reference.
        shard: split over ``jax.devices()``; chunk_size: trials per ``vmap`` on a device (static).
        Other arguments as ``simulate_closed_loop``.

    Returns a ``ClosedLoopRecord`` with a leading batch axis ``B``. One compile per set of static
    options and shapes. Raises ``ValueError`` as ``simulate_closed_loop`` does, and for inconsistent
    batch sizes.
    """
    samples, limits = _check_options(
        arms, reference, controller, noise, keys, limits, substeps, control, saturate, duration, sample_step
    )
    if not isinstance(arms, SerialArm):
        raise ValueError(f"simulate_closed_loop_batch takes a batched SerialArm, got {type(arms).__name__}.")
    if isinstance(chunk_size, bool) or not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    n = arms.dof
    sizes = {}
    if arms.inertial.ndim == 3:
        sizes["arms"] = arms.inertial.shape[0]
    if keys is not None:
        sizes["keys"] = keys.shape[0] if keys.ndim >= 1 else None
    if initial_states is not None:
        initial_states = jnp.asarray(initial_states, dtype=float)
        if initial_states.ndim != 3 or initial_states.shape[1:] != (2, n):
            raise ValueError(f"initial_states must have shape (B, 2, {n}), got {initial_states.shape}.")
        sizes["initial_states"] = initial_states.shape[0]
    if not sizes or len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(
            f"simulate_closed_loop_batch needs one batch size B from arms (inertial (B, n, 10)), keys (B,) or "
            f"initial_states (B, 2, n); got {sizes or 'none'}."
        )
    batch = next(iter(sizes.values()))
    arms = _batched_arms(arms, batch)
    if initial_states is None:
        initial_states = jnp.broadcast_to(reference.initial_state(), (batch, 2, n))
    noisy = keys is not None
    if noisy and noise is None:
        noise = MeasurementNoise()
    if not noisy:
        keys = jnp.zeros((batch,), dtype=jnp.int32)  # placeholder leaf, unused
    static = dict(samples=samples, sample_step=float(sample_step), substeps=int(substeps), control=control)
    ndev = len(jax.devices()) if shard else 1
    pad = (-batch) % ndev
    chunk = min(chunk_size, (batch + pad) // ndev)
    trials = (arms, keys, initial_states)
    if pad:
        trials = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), trials)
    run = _runner(tuple(sorted(static.items())), ndev, chunk, noisy)
    record = run(*trials, reference, controller, noise, limits)
    if pad:
        record = jax.tree.map(lambda x: x[:batch], record)
    return record
