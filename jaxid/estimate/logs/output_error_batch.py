"""Output error on many independent fits in lockstep: ``output_error_batch``.

A fit of ``output_error`` spends its time in passes over its segments (a Jacobian pass of a poorly exciting Panda
trial, 8 segments of 0.5 s: 0.4-0.9 s at 1-2 RK4 substeps; the host's algebra between passes: under 3 %). One
compiled program over more segments costs less per segment, so many fits can run together: each fit's solver is a
generator of pass requests (``shooting_solvers.gauss_newton_steps``, ``trust_region_steps``); every round, each
unfinished fit asks for one pass, and the requests that share a program (the kind of pass, the model, step, stride,
substeps and segment shape) run as one ``shooting_passes.run_pass_groups`` call over all their segments (the
programs of different groups side by side on the host's cores), each at its fit's own ``θ``. A fit's iterates are
its own: the chunks have one shape (``chunk_segments``), so its bits do not depend on the other fits in the call,
and they equal ``output_error``'s on it alone up to round-off (whose chunks have another shape;
``tests/test_output_error_streaming.py``), which the solver's stopping tests can amplify to their tolerance (the
Panda's converged fits: 2.4e-7 relative at most; fits stopped at their limit: 1e-3); a fit that fails (its start
cannot be simulated) is that fit's error, not the batch's. On 2 CPU cores this is slower than the fits on the
host's threads (docs/performance.md, "Output error's fits in lockstep"): it is for accelerators, where one program
over many segments pays.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np

from ..._platform import thread_map
from .data import FilteredLog, Regressor
from .idim import Identification
from .output_error import CHUNK_SEGMENTS, output_error, output_error_fit
from .shooting_passes import run_pass_groups
from .shooting_solvers import LINEARISE

__all__ = ["output_error_batch"]

#: What a fit's failure raises (returned as its result, not raised).
FAILURES = (ValueError, np.linalg.LinAlgError, FloatingPointError)


def output_error_batch(
    logs: Sequence[Sequence[FilteredLog]],
    regressor: Regressor,
    names: Sequence[str],
    *,
    starts: Sequence[Identification],
    chunk_segments: int = CHUNK_SEGMENTS,
    **options,
) -> list[Identification | Exception]:
    """``output_error(logs[i], regressor, names, start=starts[i], **options)`` for every fit ``i``, in lockstep
    (module docstring): each round's passes of all unfinished fits run as one program over their segments,
    in chunks of exactly ``chunk_segments`` (the last padded: one shape, so a fit's bits do not depend on the
    others in the call).

    Returns, per fit, its ``Identification`` or the error (``ValueError``, ``LinAlgError``,
    ``FloatingPointError``) that ``output_error`` raises on it alone (returned, not raised: a status).
    Raises ``ValueError`` for a different number of logs and starts, and ``TypeError`` for an option
    ``output_error`` does not take (before any pass)."""
    if len(logs) != len(starts):
        raise ValueError(f"output_error_batch: {len(logs)} fits but {len(starts)} starts; give one start per fit.")
    signature = inspect.signature(output_error)
    signature.bind(logs[0] if logs else (), regressor, names, **options)  # an unknown option: TypeError
    results: dict = {}
    fits, pending = {}, {}

    def advance(i, out=None):
        """Fit ``i``'s next request (``out``: the output of its pending pass, ``None`` to start it), or its
        result where it ends: ``(request, None)`` or ``(None, result)``."""
        try:
            answer = None if out is None else fits[i].problem.answer(*pending[i], out)
            return fits[i].steps.send(answer), None
        except StopIteration as stop:
            try:
                return None, fits[i].finish(stop.value)
            except FAILURES as err:
                return None, err
        except FAILURES as err:
            return None, err

    for i, (fit_logs, start) in enumerate(zip(logs, starts, strict=True)):
        fit_logs = [fit_logs] if isinstance(fit_logs, FilteredLog) else list(fit_logs)
        arguments = signature.bind(fit_logs, regressor, names, start=start, chunk_segments=chunk_segments, **options)
        arguments.apply_defaults()
        try:
            fits[i] = output_error_fit(**arguments.arguments)
        except FAILURES as err:
            results[i] = err
            continue
        request, results[i] = advance(i)
        if request is not None:
            pending[i] = request
    while pending:
        groups: dict[tuple, list] = {}
        for i, (kind, par, states) in pending.items():
            request = fits[i].problem.request(par, states)
            groups.setdefault((kind, request.key()), []).append((i, request))
        # Every group's chunks over the host's cores together (a round may hold several groups: passes with and
        # without the Jacobian, fits of different substep counts).
        batches = [(kind == LINEARISE, [request for _, request in members]) for (kind, _), members in groups.items()]
        outs = {}
        for members, done in zip(groups.values(), run_pass_groups(batches, chunk_segments, fixed=True), strict=True):
            outs.update((i, out) for (i, _), out in zip(members, done, strict=True))
        # Each fit's host-side step (normal equations, factorisations) on the host's cores.
        stepped = dict(zip(outs, thread_map(lambda job: advance(*job), list(outs.items())), strict=True))
        pending = {i: request for i, (request, _) in stepped.items() if request is not None}
        results.update((i, result) for i, (request, result) in stepped.items() if request is None)
    return [results[i] for i in range(len(logs))]
