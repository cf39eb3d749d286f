"""Keys, parameter sets and the transient rule of a study: everything a trial's inputs come from.

A trial's inputs are a function of ``(seed, setting name, trial index)`` and of nothing else:

- its noise key is ``trial_key(seed, setting, trial)``;
- its parameter set is ``parameter_set_of(trial, S) = trial mod S`` (``S`` = the setting's
  ``parameter_sets``), and set ``i``'s parameters are drawn from ``set_key(seed, setting, i)``,
  one ``fold_in`` per parameter *name* (adding a sampled parameter leaves the others' draws alone);
- its transient length is ``discard_periods`` of the config, or with ``"auto"`` the transient rule
  applied to *its own set's* arm (``set_discard_periods``), never to the other sets of the batch.

So adding trials or settings never changes existing trials, and neither do the chunk size or the
device count. (Adding parameter sets changes which set a trial gets, as it must.)
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from ..config.common import Setting
from ..excitation.multisine import Multisine, table2
from ..model import TwoLinkArm
from ..model.description import arm_from_description
from ..simulation.transient import transient_periods_each

__all__ = [
    "setting_key",
    "trial_key",
    "set_key",
    "set_keys",
    "parameter_set_of",
    "build_arm",
    "build_excitation",
    "sample_arms",
    "set_discard_periods",
    "NORMAL_SPREAD",
]


#: Normal draws ``base (1 + std z)`` use ``z`` clipped to ``±NORMAL_SPREAD`` (a tail of probability
#: 2e-9, so no study sees the clip), and ``validate_experiment`` checks that whole support.
NORMAL_SPREAD = 6.0


def _name_to_int(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") & 0x7FFFFFFF


def setting_key(seed: int, setting: str) -> jax.Array:
    """Root key of a setting: ``fold_in(key(seed), hash(setting))``."""
    return jax.random.fold_in(jax.random.key(seed), _name_to_int(setting))


def trial_key(seed: int, setting: str, trial: int | jax.Array) -> jax.Array:
    """Noise key of one trial, independent of chunking and of other settings."""
    return jax.random.fold_in(jax.random.fold_in(setting_key(seed, setting), 1), trial)


def set_key(seed: int, setting: str, index: int | jax.Array) -> jax.Array:
    """Key of parameter set ``index`` of a setting (its sampled parameters come from it alone)."""
    return jax.random.fold_in(jax.random.fold_in(setting_key(seed, setting), 2), index)


def set_keys(seed: int, setting: str, sets) -> jax.Array:
    """``set_key`` for an array of set indices (a batch of keys)."""
    base = jax.random.fold_in(setting_key(seed, setting), 2)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(sets))


def parameter_set_of(trials, sets: int) -> np.ndarray:
    """The parameter set of each trial index: ``trial mod sets`` (fixed by the index alone)."""
    return np.asarray(trials) % sets


def build_arm(setting: Setting) -> TwoLinkArm:
    """The setting's nominal (true, unsampled) arm: its ``model`` plus ``parameters`` overrides.

    ``model`` names a preset (``point_mass``, ``table1``) or ``"arm"``, the experiment's resolved
    ``[arm]`` table (``setting.arm``); either way the arm is built by the one loader,
    ``jaxid.model.description.arm_from_description``. Raises ``ValueError`` for ``model = "arm"``
    without a table, and for overrides the arm rejects.
    """
    if setting["model"] == "arm":
        if setting.arm is None:
            raise ValueError(
                f'setting {setting.name!r} has model = "arm" but no [arm] table; give the experiment an [arm] table.'
            )
        arm = arm_from_description(setting.arm)
    else:
        arm = arm_from_description({"preset": setting["model"]})
    params = setting["parameters"]
    if params:
        arm = arm.with_parameters(tuple(params), jnp.asarray([float(v) for v in params.values()]))
    return arm


def build_excitation(setting: Setting, seed: int) -> Multisine:
    """The setting's multisine (random phases keyed by ``(seed, setting)``)."""
    key = jax.random.fold_in(setting_key(seed, setting.name), 3)
    return table2(setting["lines"], setting["scale"], setting["phases"], key=key)


def sample_arms(setting: Setting, nominal: TwoLinkArm, keys: jax.Array) -> TwoLinkArm:
    """Batched true arms for the given parameter-set keys (relative perturbations of ``nominal``).

    ``uniform``: ``base (1 + width u)``, ``u`` uniform on [-1, 1]; ``normal``: ``base (1 + std z)``,
    ``z`` standard normal truncated at ``±NORMAL_SPREAD``.

    Parameter ``name`` of a set is drawn from ``fold_in(set key, hash(name))``: each value depends
    on its set's key and its own name only (not on the batch, nor on the other sampled names).
    """
    spec = setting["sample"]
    names = tuple(spec)
    n = keys.shape[0]
    arms = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)), nominal)
    if not names:
        return arms
    base = nominal.parameter_vector(names)

    def draw(key):
        out = []
        for j, name in enumerate(names):
            k = jax.random.fold_in(key, _name_to_int(name))
            s = spec[name]
            if s["dist"] == "uniform":
                rel = s["width"] * jax.random.uniform(k, minval=-1.0, maxval=1.0)
            elif s["dist"] == "normal":
                # Truncated at ±NORMAL_SPREAD std (a 2e-9 tail): the support validate_experiment
                # checks is the support drawn from.
                rel = s["std"] * jnp.clip(jax.random.normal(k), -NORMAL_SPREAD, NORMAL_SPREAD)
            else:
                rel = 0.0
            out.append(base[j] * (1 + rel))
        return jnp.stack(out)

    values = jax.vmap(draw)(keys)
    return arms.with_parameters(names, values)


def set_discard_periods(setting: Setting, arms: TwoLinkArm, excitation: Multisine) -> np.ndarray:
    """Transient periods to discard for each arm of a batch of parameter sets, ``(B,)`` ints.

    The config's ``discard_periods`` if it is an integer; with ``"auto"``, each set's own count
    from its own arm's slowest decay rate (``transient_periods_each``), so a trial's record never
    depends on which other sets it is simulated with.
    """
    if setting["discard_periods"] != "auto":
        return np.full(jax.tree.leaves(arms)[0].shape[0], int(setting["discard_periods"]))
    return transient_periods_each(arms, excitation, setting["q0"])
