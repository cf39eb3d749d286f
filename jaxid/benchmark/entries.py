"""Chosen entries of an arm's standard regressor for a batch of states, as straight-line scalar code.

``entries_function(arm, mask)`` builds ``regressor(q, qd, qdd)`` (each ``(n, B)``, batch-minor) that
gives the *distinct* entries of ``mask`` (``(n, 14 n)``) of ``arm.standard_regressor`` as ``(count,
B)``, and the map back: entry ``e`` (in the order of ``np.flatnonzero(mask)``) is ``sign[e] *
rows[index[e]]``. It is the recursion of ``jaxid.model.spatial.rnea_regressor_batched`` (each
link's velocity, acceleration and the joint axes ``s_{j,i}`` carried forward, column ``k`` of
``A_i`` as ``B_k a_i + v_i ×* B_k v_i``, entry ``s_{j,i}ᵀ A_i[:, k]``), written one scalar row of
the batch at a time with the arm's constants folded in at trace time: a product with a constant zero
is not formed, a product with ``±1`` is the row itself or its negation, constants combine, the
gravity is a constant base acceleration. For an arm whose URDF frames are axis-aligned (the UR5's,
the Panda's) most entries of the joint transforms, the inertia basis and the joint axes are zeros,
so this is a fraction of the dense recursion's operations (4.6 against 15 MFLOP for the UR5's 163
entries at 2 500 samples). Two entries that come out as the same row up to sign (the UR5's parallel
joints: 40 of its 163) are one row, so the caller low-passes it once.

**Stage barriers.** XLA's CPU fusion inlines a shared elementwise producer into every consumer's
loop, so a straight-line program of ``(B,)`` rows with much fan-out recomputes each link's cone once
per entry (8x the operations, the sines and cosines included). ``barrier``: a runtime boolean
(pass ``jnp.asarray(True)`` as an argument of the compiled program) that routes each stage's rows
(the joints' sines and cosines; per link the velocity, acceleration and axes; per link the columns
of ``A_i``) through a ``lax.cond`` on it, whose result XLA materialises once; the other branch
(the negation) is never taken. ``barrier=None``: no barriers (the same numbers).

Equal to ``standard_regressor`` to round-off (another association of the same sums;
``tests/test_batched_speed_regressor.py``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..model.serial_dynamics import _TWO_OVER_PI, _joints
from ..model.spatial import _INERTIA_BASIS

__all__ = ["entries_function"]


def _const(x) -> bool:
    return isinstance(x, float)


class _Rows:
    """The scalar algebra: a value is a Python float (a trace-time constant) or a ``(B,)`` row."""

    def neg(self, a):
        return -a

    def add(self, a, b):
        if _const(a) and a == 0.0:
            return b
        if _const(b) and b == 0.0:
            return a
        return a + b

    def sub(self, a, b):
        if _const(b) and b == 0.0:
            return a
        if _const(a) and a == 0.0:
            return self.neg(b)
        return a - b

    def mul(self, a, b):
        if _const(b) and not _const(a):
            a, b = b, a
        if _const(a) and not _const(b):
            if a == 0.0:
                return 0.0
            if a == 1.0:
                return b
            if a == -1.0:
                return self.neg(b)
        return a * b

    def dot(self, coefficients, values):
        """``Σ_c coefficients[c] · values[c]`` in order, zero terms left out."""
        out = 0.0
        for a, v in zip(coefficients, values, strict=True):
            out = self.add(out, self.mul(a, v))
        return out

    def cross(self, a, b):
        m = self.mul
        return [self.sub(m(a[1], b[2]), m(a[2], b[1])), self.sub(m(a[2], b[0]), m(a[0], b[2])),
                self.sub(m(a[0], b[1]), m(a[1], b[0]))]  # fmt: skip

    def transform(self, x, vector):
        return [self.dot(x[r], vector) for r in range(len(x))]


def _stage(flag, fn, *groups):
    """``fn(*groups)`` (lists of scalars in, a list of scalars out) as one stage (module docstring):
    with a runtime boolean ``flag``, its rows are computed inside the true branch of a ``lax.cond`` on
    ``flag`` (the other branch, zeros, is never taken), so XLA materialises them once and does not
    fuse the stage into its consumers; constants stay trace-time constants. ``flag=None``: inline."""
    if flag is None:
        return fn(*groups)
    flat = [x for g in groups for x in g]
    where = [k for k, x in enumerate(flat) if not _const(x)]
    pattern = {}

    def run(arrays):
        full = list(flat)
        for k, x in zip(where, arrays, strict=True):
            full[k] = x
        parts, start = [], 0
        for g in groups:
            parts.append(full[start : start + len(g)])
            start += len(g)
        out = fn(*parts)
        pattern["out"] = [x if _const(x) else None for x in out]
        return [x for x in out if not _const(x)]

    arrays = [flat[k] for k in where]
    shapes = jax.eval_shape(run, arrays)
    constants = pattern["out"]
    rows = iter(jax.lax.cond(flag, run, lambda _: [jnp.zeros(x.shape, x.dtype) for x in shapes], arrays))
    return [next(rows) if x is None else x for x in constants]


def _matrix(r: _Rows, joint, q, c, s):
    """``X(q)`` of ``joint`` as a 6×6 list of scalars: constants where ``x0, xc, xs`` are, rows else."""
    f = float
    if joint.revolute:
        return [[r.add(r.add(f(joint.x0[a, b]), r.mul(f(joint.xc[a, b]), c)), r.mul(f(joint.xs[a, b]), s))
                 for b in range(6)] for a in range(6)]  # fmt: skip
    return [[r.add(f(joint.x0[a, b]), r.mul(f(joint.xc[a, b]), q)) for b in range(6)] for a in range(6)]


def _values(arm, mask: np.ndarray, q, qd, qdd, flag, keep=None):
    """The scalar of every entry of ``mask`` (order of ``np.flatnonzero``); with ``keep`` (indices
    into that order), the ``(len(keep), B)`` stack of those entries instead. Stages (``_stage``):
    the sines and cosines; per joint its link's acceleration, velocity and axes ``s_{j,i}``; per link
    the columns of ``A_i`` it needs; the entries."""
    n = arm.dof
    r = _Rows()
    joints = _joints(arm)
    f = float
    basis = [[[f(x) for x in row] for row in _INERTIA_BASIS[k]] for k in range(10)]
    wanted = [np.flatnonzero(mask[:, 10 * i : 10 * (i + 1)].any(axis=0)) for i in range(n)]
    qs, qds, qdds = list(q), list(qd), list(qdd)
    trig = _stage(flag, lambda qs: [jnp.cos(x) for x in qs] + [jnp.sin(x) for x in qs], qs)

    def forward(joint, acc, v, axes, state):
        """Link ``i``'s ``acc + v + axes`` from link ``i − 1``'s (``v = []``, ``axes = []`` at the base)."""
        q, c, s, qd, qdd = state
        motion = [f(m) for m in joint.motion]
        x = _matrix(r, joint, q, c, s)
        acc = [r.add(a, r.mul(m, qdd)) for a, m in zip(r.transform(x, acc), motion, strict=True)]
        own = [r.mul(m, qd) for m in motion]
        v = own if not v else [r.add(a, b) for a, b in zip(r.transform(x, v), own, strict=True)]
        bias = r.transform([[f(b) for b in row] for row in joint.bias], v)
        acc = [r.add(a, r.mul(b, qd)) for a, b in zip(acc, bias, strict=True)]
        axes = [e for k in range(0, len(axes), 6) for e in r.transform(x, axes[k : k + 6])]
        return acc + v + axes + motion

    def columns_of(ks, acc, v):
        """``A_i[:, k]`` for ``k`` in ``ks``: ``B_k a + v ×* (B_k v)``, ``B_k v = (n, f)``: ``(ω × n + u × f, ω × f)``."""
        omega, u = v[:3], v[3:]
        out = []
        for k in ks:
            ia, iv = r.transform(basis[k], acc), r.transform(basis[k], v)
            bias_force = [r.add(a, b) for a, b in zip(r.cross(omega, iv[:3]), r.cross(u, iv[3:]), strict=True)]
            bias_force += r.cross(omega, iv[3:])
            out += [r.add(a, b) for a, b in zip(ia, bias_force, strict=True)]
        return out

    acc = [0.0, 0.0, 0.0] + [-f(g) for g in np.asarray(arm.gravity)]
    v, axes = [], []  # axes: s_{j,i}, j ≤ i (joint j's axis in link i's frame), 6 scalars each
    links = []  # per link (axes, columns)
    for i, joint in enumerate(joints):
        state = [qs[i], trig[i], trig[n + i], qds[i], qdds[i]]
        out = _stage(flag, functools.partial(forward, joint), acc, v, axes, state)
        acc, v, axes = out[:6], out[6:12], out[12:]
        links.append((axes, _stage(flag, functools.partial(columns_of, wanted[i]), acc, v)))

    def entries(qds, qdds, *flat_links):
        values = {}
        for i in range(n):
            axes, columns = flat_links[2 * i], flat_links[2 * i + 1]
            for c, k in enumerate(wanted[i]):
                for j in range(i + 1):
                    if mask[j, 10 * i + k]:
                        values[(j, 10 * i + k)] = r.dot(axes[6 * j : 6 * j + 6], columns[6 * c : 6 * c + 6])
        sign = [_TWO_OVER_PI * jnp.arctan(arm.coulomb_slope * x) for x in qds]
        for block, joint_rows in enumerate((qdds, qds, sign, [1.0] * n)):
            for j in range(n):
                values[(j, 10 * n + block * n + j)] = joint_rows[j]
        out = [values.get((int(j), int(c)), 0.0) for j, c in zip(*np.nonzero(mask), strict=True)]
        if keep is None:
            return out
        batch = qds[0].shape
        return [jnp.stack([jnp.full(batch, out[e], qds[0].dtype) if _const(out[e]) else out[e] for e in keep])]

    return _stage(flag, entries, qds, qdds, *(g for link in links for g in link))


def _distinct(values: np.ndarray):
    """``(keep, index, sign)`` of the rows of ``values`` ``(count, S)``: rows equal bit for bit (up to
    sign) are one, the first of them kept; row ``e`` is ``sign[e] * values[keep][index[e]]``."""
    keep, index, sign, seen = [], [], [], {}
    for e, row in enumerate(values):
        for s, key in ((1.0, row.tobytes()), (-1.0, (-row).tobytes())):
            if key in seen:
                index.append(seen[key])
                sign.append(s)
                break
        else:
            seen[row.tobytes()] = len(keep)
            keep.append(e)
            index.append(len(keep) - 1)
            sign.append(1.0)
    return np.asarray(keep), np.asarray(index), np.asarray(sign)


def entries_function(arm, mask: np.ndarray, states: int = 64):
    """``(regressor, index, sign)`` (module docstring): ``regressor(q, qd, qdd, barrier=None)`` with
    ``q, qd, qdd`` ``(n, B)`` gives the distinct rows ``(count, B)``; the entries of ``mask``
    (``(n, 14 n)``, order of ``np.flatnonzero``) are ``sign[:, None] * rows[index]``. Distinct: two
    entries whose rows are equal bit for bit (up to sign) at ``states`` random states, as the same
    operations on the same rows give (the UR5's parallel joints: 40 of its 163 entries)."""
    n = arm.dof
    mask = np.asarray(mask, dtype=bool).reshape(n, 14 * n)

    def every(q, qd, qdd):
        values = _values(arm, mask, q, qd, qdd, None)
        return jnp.stack([jnp.full(q.shape[1:], x, q.dtype) if _const(x) else x for x in values])

    rng = np.random.default_rng(0)
    q, qd, qdd = rng.uniform(-np.pi, np.pi, (n, states)), rng.normal(size=(n, states)), rng.normal(size=(n, states))
    keep, index, sign = _distinct(np.asarray(jax.jit(every)(q, qd, qdd)))

    def regressor(q, qd, qdd, barrier=None):
        return _values(arm, mask, q, qd, qdd, barrier, keep)[0]

    return regressor, index, sign
