"""The data types every stage shares: the measured ``Record``, an ``Estimate``, one ``Status`` enum.

This is the bottom layer: it imports nothing from jaxid. ``jaxid.simulation.Record`` and
``jaxid.estimate.Estimate`` (and the old status constants) re-export what is defined here.
"""

from __future__ import annotations

import difflib
import enum
import functools
from typing import Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

__all__ = [
    "any_traced",
    "compiled_when_concrete",
    "did_you_mean",
    "check_finite",
    "check_samples",
    "Status",
    "Record",
    "Estimate",
    "ParameterEstimate",
    "require_float64",
    "steps_per_period",
    "SIMULATION_STATUSES",
    "ESTIMATOR_STATUSES",
]


class Status(enum.IntEnum):
    """Outcome of a simulation or an estimate, stored as an ``int32`` array (batched: one per trial).

    One enum, one meaning per integer value. Simulations report ``SUCCESS``, ``DIVERGED``,
    ``MAX_STEPS`` or ``NOT_STEADY``; estimators report ``CONVERGED`` (the same value as ``SUCCESS``:
    both mean "ok"), ``FAILED``, ``MAX_ITERATIONS`` or ``SINGULAR``. The simulation codes keep their
    historical values 0-3; the estimator failure codes are 4-6 (they were 1-3, colliding with the
    simulation codes; result tables store only the labels, which are unchanged).
    ``Status.label(code)`` is the short label written to result tables, ``Status.message(code)``
    a one-line explanation.
    """

    SUCCESS = 0
    DIVERGED = 1
    MAX_STEPS = 2
    NOT_STEADY = 3
    FAILED = 4
    MAX_ITERATIONS = 5
    SINGULAR = 6
    CONVERGED = 0  # alias of SUCCESS (estimators)

    @classmethod
    def label(cls, code) -> str:
        """Short label (as in the result tables): ``ok``, ``diverged``, ``max_steps``, ``not_steady``,
        ``failed``, ``max_iterations``, ``singular``; ``str(code)`` for an unknown code."""
        try:
            return _LABELS[cls(int(code))]
        except ValueError:
            return str(int(code))

    @classmethod
    def message(cls, code) -> str:
        """One line saying what the code means and what to look at."""
        try:
            return _MESSAGES[cls(int(code))]
        except ValueError:
            return f"unknown status code {int(code)}"


_LABELS = {
    Status.SUCCESS: "ok",
    Status.DIVERGED: "diverged",
    Status.MAX_STEPS: "max_steps",
    Status.NOT_STEADY: "not_steady",
    Status.FAILED: "failed",
    Status.MAX_ITERATIONS: "max_iterations",
    Status.SINGULAR: "singular",
}

_MESSAGES = {
    Status.SUCCESS: "ok: the simulation reached its steady state / the estimator converged",
    Status.DIVERGED: "simulation diverged: a non-finite or runaway state (reduce the excitation scale)",
    Status.MAX_STEPS: "simulation stopped: the adaptive solver ran out of steps (raise max_steps)",
    Status.NOT_STEADY: "simulation not steady: the state still changes between periods (discard more periods)",
    Status.FAILED: "estimator failed: a non-finite estimate or covariance",
    Status.MAX_ITERATIONS: "estimator stopped at its iteration limit before converging (raise the limit)",
    Status.SINGULAR: "estimator singular: the unknowns are not identifiable from these data (rank-deficient)",
}

#: Simulation codes and their table labels (``jaxid.simulation.STATUS_NAMES``).
SIMULATION_STATUSES = {
    int(s): _LABELS[s] for s in (Status.SUCCESS, Status.DIVERGED, Status.MAX_STEPS, Status.NOT_STEADY)
}
#: Estimator codes and their table labels (``jaxid.estimate.ESTIMATOR_STATUS``).
ESTIMATOR_STATUSES = {
    int(s): _LABELS[s] for s in (Status.CONVERGED, Status.FAILED, Status.MAX_ITERATIONS, Status.SINGULAR)
}


def require_float64(who: str) -> None:
    """Raise ``ValueError`` unless JAX runs in float64 (``jax_enable_x64``).

    ``who`` names the public entry point in the message. Call it outside ``jit`` (it reads the
    global config, not the arguments).
    """
    if not jax.config.jax_enable_x64:
        raise ValueError(
            f'{who} needs float64: call jax.config.update("jax_enable_x64", True) before creating arrays '
            "(its tolerances are far below float32's reach)."
        )


def steps_per_period(period: float, step: float) -> int:
    """``T / Δ`` as an integer; raises ``ValueError`` if the step does not divide the period."""
    n = period / step
    if not (n > 0 and abs(n - round(n)) < 1e-9 * max(1.0, n)):
        raise ValueError(
            f"The step {step:g} s does not divide the period {period:g} s into a whole number of samples "
            f"(T/Δ = {n:.6g}); choose Δ = T/N for an integer N, e.g. {period / max(1, round(n)):.6g} s "
            f"(N = {max(1, round(n))})."
        )
    return int(round(n))


class Record(eqx.Module):
    """Measured steady-state record over whole periods.

    Attributes:
        t: ``(M,)`` sample times [s], ``M = measured_periods · samples_per_period``.
        tau: ``(M, 2)`` applied joint torques [N m] (``tau0`` included).
        q: ``(M, 2)`` joint angles [rad] (noise-free until ``add_noise``).
        status: integer ``Status`` (``SUCCESS``, ``DIVERGED``, ``MAX_STEPS``, ``NOT_STEADY``).
        steady_change: largest change of the state ``(q, q')`` between consecutive period
            boundaries of the measured window, D T … (D + P) T [rad, rad/s].
        sample_step: static sampling step ``Δ`` [s].
        period: static period ``T`` [s].
        measured_periods: static number of measured periods ``P``.

    Under ``vmap`` every array gains a leading batch axis.
    """

    t: Float[Array, "*batch M"]
    tau: Float[Array, "*batch M 2"]
    q: Float[Array, "*batch M 2"]
    status: Int[Array, "*batch"]
    steady_change: Float[Array, "*batch"]
    sample_step: float = eqx.field(static=True)
    period: float = eqx.field(static=True)
    measured_periods: int = eqx.field(static=True)

    def __check_init__(self) -> None:
        # Shapes always (also under jit/vmap); the time grid only for concrete values. The angles
        # are not checked for NaN: a diverged simulation is a status, not an error.
        for name in ("sample_step", "period"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (hasattr(value, "__float__") and 0 < float(value) < float("inf")):
                raise ValueError(f"Record.{name} must be a positive finite number of seconds, got {value!r}.")
        periods = self.measured_periods
        if isinstance(periods, bool) or not (hasattr(periods, "__index__") and periods >= 1):
            raise ValueError(f"Record.measured_periods must be a positive integer, got {self.measured_periods!r}.")
        q, tau, t = self.q.shape, self.tau.shape, self.t.shape
        if q[-1:] != (2,) or tau != q or t != q[:-1]:
            raise ValueError(
                f"Record: q and tau must have shape (..., M, 2) (one column per joint) and t (..., M), "
                f"got t {t}, tau {tau}, q {q}."
            )
        _check_time_step("Record", self.t, self.sample_step)

    @property
    def samples_per_period(self) -> int:
        return steps_per_period(self.period, self.sample_step)

    def replace(self, **kwargs) -> Record:
        out = self
        for name, value in kwargs.items():
            out = eqx.tree_at(lambda r, name=name: getattr(r, name), out, value)
        return out


class Estimate(eqx.Module):
    """An estimate of the unknown parameters.

    Attributes:
        value: ``(p,)`` estimate, in the order of ``names``.
        covariance: ``(p, p)`` estimated covariance of ``value`` (from the data's noise level).
        status: integer ``Status`` (``CONVERGED``, ``FAILED``, ``MAX_ITERATIONS``, ``SINGULAR``).
        names: static tuple of parameter names.
        history: optional ``(n, p)`` estimate over time/iterations (recursive estimators).
    """

    value: Float[Array, " p"]
    covariance: Float[Array, "p p"]
    status: Int[Array, ""]
    names: tuple[str, ...] = eqx.field(static=True)
    history: Float[Array, "n p"] | None = None

    @property
    def std(self) -> Float[Array, "*trials p"]:
        """``(…, p)`` standard deviations: the square roots of the covariance's diagonal (clipped at 0)."""
        return jnp.sqrt(jnp.clip(jnp.diagonal(self.covariance, axis1=-2, axis2=-1), 0.0, None))

    @property
    def label(self):
        """The status as result tables write it (``Status.label``): a string, or a string array of
        the leading (trial) shape of a batched estimate."""
        status = np.asarray(self.status)
        if status.ndim == 0:
            return Status.label(status)
        return np.vectorize(Status.label, otypes=[object])(status)


@runtime_checkable
class ParameterEstimate(Protocol):
    """What every estimate is, from simulated records (``Estimate``) or from logs
    (``jaxid.Identification``): the one interface a table, an export or a comparison reads
    (``jaxid.report.parameter_table`` takes either).

    ``names``: the ``p`` parameter names; ``value`` ``(…, p)``; ``covariance`` ``(…, p, p)``;
    ``std`` ``(…, p)``; ``label``: the status as result tables write it (``"ok"``,
    ``"max_iterations"``, ``"failed"``, …). A batched ``Estimate`` has a leading trial axis on each
    array and one label per trial.
    """

    names: tuple[str, ...]

    @property
    def value(self): ...

    @property
    def covariance(self): ...

    @property
    def std(self): ...

    @property
    def label(self): ...


def did_you_mean(name: str, allowed) -> str:
    """The hint ending every "unknown name" message: ``" Did you mean 'x'?"`` or ``""``.

    A case-insensitive exact match wins; otherwise the closest name by ``difflib``.
    """
    allowed = [str(a) for a in allowed]
    folded = [a for a in allowed if a.lower() == str(name).lower()]
    close = folded or difflib.get_close_matches(str(name), allowed, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _concrete(x) -> bool:
    return x is not None and not isinstance(x, jax.core.Tracer)


def any_traced(tree) -> bool:
    """Whether any leaf of ``tree`` is a tracer (the call is inside ``jit``/``vmap``/…)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


def compiled_when_concrete(fn):
    """``fn`` run as one compiled program when called on concrete inputs, as itself when traced.

    Outside any transformation the call goes through ``eqx.filter_jit(fn)`` (arrays traced, other
    arguments static), so its loops and small operations are compiled once as one program, not
    op by op; a later call with the same shapes and static arguments reuses it. A
    ``lax.scan`` run op by op is even compiled again on every call (its body is a new closure each
    time). With a traced input (inside ``jit``/``vmap``/``grad``) ``fn`` is called as it is, so a
    caller's program is the same as without the wrapper. Checks that need concrete values belong
    in the caller, before this boundary (``check_finite`` skips tracers).
    """
    compiled = eqx.filter_jit(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if any_traced((args, kwargs)):
            return fn(*args, **kwargs)
        return compiled(*args, **kwargs)

    return call


def check_finite(who: str, **arrays) -> None:
    """Raise ``ValueError`` naming the first array (and index) holding NaN or inf.

    Concrete arrays only (tracers, inside ``jit``/``vmap``, and ``None`` are skipped). ``who``
    names the object in the message, e.g. ``"MeasuredLog"``.
    """
    import numpy as np

    for name, value in arrays.items():
        if not _concrete(value):
            continue
        bad = ~np.isfinite(np.asarray(value))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{who}.{name} has {int(bad.sum())} NaN/inf value(s), the first at index {first}; give finite values."
            )


def check_samples(who: str, t, sample_step: float, **arrays) -> None:
    """Check a sampled signal: ``t`` of shape ``(N,)``, every array ``(N, 2)`` (one column per
    joint), ``sample_step`` positive and finite and, for a concrete ``t``, ``t[k+1] - t[k] = Δ``.

    ``None`` arrays are skipped; shapes are checked also under ``jit``, values only when
    concrete. Raises ``ValueError`` naming ``who.<field>`` and what to change.
    """
    import numpy as np

    if isinstance(sample_step, bool) or not (isinstance(sample_step, (int, float)) and 0 < sample_step < np.inf):
        raise ValueError(f"{who}.sample_step must be a positive finite number of seconds, got {sample_step!r}.")
    shape = np.shape(t)
    if len(shape) != 1:
        raise ValueError(f"{who}.t must be one time vector of shape (N,), got shape {shape}.")
    for name, value in arrays.items():
        if value is not None and np.shape(value) != (shape[0], 2):
            raise ValueError(
                f"{who}.{name} must have shape (N, 2) = ({shape[0]}, 2) (one row per time stamp, one column "
                f"per joint), got {np.shape(value)}."
            )
    check_finite(who, t=t, **arrays)
    _check_time_step(who, t, sample_step)


def _check_time_step(who: str, t, sample_step: float) -> None:
    """For a concrete time vector (last axis), ``t[k+1] - t[k] = sample_step`` to 1e-6 of a step."""
    import numpy as np

    if _concrete(t) and np.shape(t)[-1:] > (1,):
        steps = np.diff(np.asarray(t, dtype=float), axis=-1).reshape(-1)
        tol = 1e-6 * sample_step + 1e-12 * float(np.max(np.abs(np.asarray(t))))
        bad = np.abs(steps - sample_step) > tol
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{who}.t steps by {steps[k]:.6g} s at index {k}, not sample_step = {sample_step:g} s; "
                "give a uniform time vector t[0] + k·sample_step (jaxid.load_log resamples a log onto one)."
            )
