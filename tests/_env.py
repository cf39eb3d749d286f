"""The environment of a test's subprocess (a CLI run, a multi-device or multi-process study).

``child_env()`` is ``os.environ`` with ``XLA_FLAGS`` reduced to the suite's own compile flags
(``JAXID_TEST_XLA_FLAGS``, set by ``conftest.py``: ``FAST_COMPILE_FLAG`` where this jaxlib has it). The
child then compiles as the tests do, so that it shares their persistent-cache entries (the flags are in
an entry's key) and its numbers equal theirs bit for bit (another code generator can differ in the last
ulp), without flags a test set for itself. A child script that needs more flags (a host device count)
appends them to its ``XLA_FLAGS`` before importing jax.
"""

import os


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    flags = os.environ.get("JAXID_TEST_XLA_FLAGS", "")
    if flags:
        env["XLA_FLAGS"] = flags
    return env
