"""The batched, device-sharded simulation runner behind ``simulate_batch``.

One compiled function per set of static options: the trial axis is split over the local devices
(``shard_map``), each device runs its share ``chunk`` trials at a time (``lax.map`` over
``vmap``-ed chunks). Every per-trial input — the arm, the excitation scale, the initial state and
the number of discarded periods — is a traced array, so a trial's record depends only on its own
inputs, never on the other trials of the batch, and a sweep compiles once. The chunk width and the
device count set how XLA vectorises the loop: they can move results by rounding (a ``vmap`` of width
1 compiles to scalar code, ~1e-17 rad apart from width 2 and up), never more.

On CPU the runner is compiled with ``CPU_COMPILER_OPTIONS``: XLA's CPU backend vectorises with
256-bit registers by default, and the simulator's elementwise step runs ~1.5x faster per trial with
512-bit ones where the processor has them (AVX-512; elsewhere LLVM keeps to the widest the processor
has). Per-element arithmetic is unchanged. An option that ``XLA_FLAGS`` sets (e.g.
``--xla_cpu_prefer_vector_width=256``) is left to ``XLA_FLAGS``; the options are not passed when
``simulate_batch`` is called inside an outer ``jit`` (JAX accepts compiler options only at the top
level: the outer ``jit``'s options apply).
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from ..excitation.multisine import Multisine
from ..model import TwoLinkArm
from ..types import Record, any_traced
from .paths import trajectory

__all__ = ["DEFAULT_OPTIONS", "CPU_COMPILER_OPTIONS", "compiler_options", "resolve_options", "run_batch"]

#: XLA options the CPU runner is compiled with (see the module docstring); edit or empty this dict
#: to change them, or set the same option in ``XLA_FLAGS`` (which wins). Checked for wrong SIMD lanes
#: and run-to-run differences on an AVX-512 CPU (``scripts/check_vector_width.py``, fresh processes):
#: none; the records are bitwise equal to those compiled with 256-bit vectors
#: (``docs/performance.md``, "The 512-bit vector option").
CPU_COMPILER_OPTIONS: dict[str, str] = {"xla_cpu_prefer_vector_width": "512"}

DEFAULT_OPTIONS = dict(
    model="nonlinear",
    solver="rk4",
    sample_step=0.01,
    substeps=1,
    measured_periods=1,
    rtol=1e-10,
    atol=1e-12,
    max_steps=2_000_000,
    steady_tolerance=1e-6,
)


def resolve_options(options: dict) -> dict:
    """``DEFAULT_OPTIONS`` updated by ``options``; raises ``ValueError`` naming unknown options."""
    unknown = set(options) - set(DEFAULT_OPTIONS)
    if unknown:
        raise ValueError(f"Unknown simulation option(s) {sorted(unknown)}; allowed: {sorted(DEFAULT_OPTIONS)}.")
    return {**DEFAULT_OPTIONS, **options}


def compiler_options(*trees) -> tuple[tuple[str, str], ...]:
    """The ``CPU_COMPILER_OPTIONS`` to compile the runner with, as sorted items: none on other
    backends, none that ``XLA_FLAGS`` sets, none when an input is traced (an outer ``jit``)."""
    if jax.default_backend() != "cpu" or any_traced(trees):
        return ()
    flags = os.environ.get("XLA_FLAGS", "")
    return tuple(sorted((k, v) for k, v in CPU_COMPILER_OPTIONS.items() if f"--{k}=" not in flags))


@functools.lru_cache(maxsize=64)
def _runner(options_items, ndev, chunk, compiler_items=()):
    options = dict(options_items)

    def one(arm, scale, y0, discard, excitation, q0):
        return trajectory(arm, excitation.replace(scale=scale), q0, y0, discard_periods=discard, **options)

    def local(arms, scales, initial_states, discards, excitation, q0):
        # This device's trials, ``chunk`` at a time.
        return jax.lax.map(
            lambda trial: one(*trial, excitation, q0), (arms, scales, initial_states, discards), batch_size=chunk
        )

    if ndev > 1:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:ndev]), ("trials",))
        spec, shared = jax.sharding.PartitionSpec("trials"), jax.sharding.PartitionSpec()
        local = jax.shard_map(
            local, mesh=mesh, in_specs=(spec, spec, spec, spec, shared, shared), out_specs=spec, check_vma=False
        )
    return jax.jit(local, compiler_options=dict(compiler_items) or None)


def run_batch(
    arms: TwoLinkArm,
    scales,
    initial_states,
    discards,
    excitation: Multisine,
    q0,
    *,
    ndev: int,
    chunk_size: int,
    options: dict,
) -> Record:
    """Run the checked batch: ``arms`` (batched), ``scales (B,)``, ``initial_states (B, 4)``,
    ``discards (B,)`` integer, over ``ndev`` devices in chunks of at most ``chunk_size``.

    ``options`` are the resolved static options of ``simulate`` plus ``n_per``. Pads the batch to a
    multiple of ``ndev`` (repeating the last trial) and strips the padding.
    """
    batch = scales.shape[0]
    pad = (-batch) % ndev
    chunk = min(chunk_size, (batch + pad) // ndev)
    trials = (arms, scales, initial_states, jnp.asarray(discards, dtype=jnp.int32))
    run = _runner(tuple(sorted(options.items())), ndev, chunk, compiler_options(trials, excitation, q0))
    if pad:
        trials = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), trials)
    rec = run(*trials, excitation, q0)
    if pad:
        rec = jax.tree.map(lambda x: x[:batch], rec)
    return rec
