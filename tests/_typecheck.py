"""The runtime type checker the suite runs jaxid under (jaxtyping's import hook with beartype).

``pyproject.toml`` passes ``--jaxtyping-packages=jaxid,_typecheck.typechecker``: every function and
class of the package gets ``@jaxtyped(typechecker=typechecker)``, so argument and return dtypes and
shapes (``Float[Array, "M 2"]``, shared dimension names across arguments) are checked on every call
the tests make.

Beartype reads the annotations with PEP 484's numeric tower (an ``int`` is a valid ``float``), and
two package conventions are added, for parameters only (return values and module fields keep their
exact annotation):

- a parameter annotated with an array-like type (jaxtyping's ``ArrayLike``, which, like JAX's,
  leaves Python sequences out) also accepts a tuple or list: jaxid converts such arguments with
  ``jnp.asarray`` and its defaults are tuples (``q0=(0.0, 0.0)``). Only annotations that admit a
  NumPy array are widened; one that says ``Array`` only stays strict;
- a parameter annotated with string ``Literal`` choices (``method``, ``solver``, ``kind``) accepts
  any string: the package checks the value itself and its one-line error names the choices.
"""

import contextlib
import inspect
import typing

import jaxtyping
import numpy as np
from beartype import BeartypeConf, beartype

__all__ = ["typechecker", "package_errors"]

_jaxtyped = jaxtyping.jaxtyped


def _jaxtyped_if_annotated(fn=None, *, typechecker=None, **kwargs):
    """``jaxtyping.jaxtyped``, except that a plain function without a single annotation is returned
    as it is: its wrapper would check nothing (no parameter or return hint) yet binds the call's
    arguments and pushes a shape memo on every call (``jaxid.benchmark.entries``' scalar algebra makes
    ~200 000 such calls while tracing in ``test_batched_speed_regressor.py``: 1.5 of its 13.7 s)."""
    if fn is None:
        return lambda f: _jaxtyped_if_annotated(f, typechecker=typechecker, **kwargs)
    if inspect.isfunction(fn) and not getattr(fn, "__annotations__", None):
        return fn
    return _jaxtyped(fn, typechecker=typechecker, **kwargs)


def install() -> None:
    """Make the import hook's ``@jaxtyping.jaxtyped(typechecker=...)`` skip unannotated functions
    (``tests/conftest.py`` calls it before importing jaxid)."""
    jaxtyping.jaxtyped = _jaxtyped_if_annotated


def _admits_ndarray(hint) -> bool:
    if hint is np.ndarray or getattr(hint, "array_type", None) is np.ndarray:
        return True
    return any(_admits_ndarray(arg) for arg in typing.get_args(hint))


def _has_str_literal(hint) -> bool:
    if typing.get_origin(hint) is typing.Literal:
        return all(isinstance(a, str) for a in typing.get_args(hint))
    return any(_has_str_literal(arg) for arg in typing.get_args(hint))


_CONF = BeartypeConf(is_pep484_tower=True)


def _resolve(hint, namespace):
    if isinstance(hint, str):
        try:
            return eval(hint, namespace)  # noqa: S307 - the package's own annotations
        except Exception:
            return None
    return hint


def typechecker(obj):
    """``beartype`` with array-like parameters widened to ``| tuple | list`` (see the module docstring)."""
    annotations = getattr(obj, "__annotations__", None)
    if callable(obj) and not isinstance(obj, type) and annotations:
        namespace = getattr(obj, "__globals__", {})
        widened = {}
        for name, hint in annotations.items():
            value = _resolve(hint, namespace)
            if name == "return" or value is None:
                widened[name] = hint
            elif _admits_ndarray(value):
                widened[name] = value | tuple | list
            elif _has_str_literal(value):
                widened[name] = value | str
            else:
                widened[name] = hint
        obj.__annotations__ = widened
    return beartype(obj, conf=_CONF)


@contextlib.contextmanager
def package_errors():
    """Turn the runtime checks off inside the block: for tests of the package's own error messages
    for a bad argument (what a user sees, without the checker), which the checker would pre-empt."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)
