"""The checks of a whole resolved experiment, run before ``results/<experiment>/<run>/`` exists.

``parse_experiment`` checks each key on its own (names, types, choices). ``validate_experiment``
checks what needs the arm and the excitation: the parameter overrides against the arm's own
rules (``TwoLinkArm`` construction), the support of every sampled parameter, that the sample
step divides the period and samples every excited line below Nyquist, the noise level (at most
π rad; not zero for the Kalman filters, whose measurement covariance is σ²), and option
combinations that would otherwise fail only when an estimator is traced (the paper route on
shared lines). What only an estimator's trace can find fails at its first chunk; if no chunk was
written yet, ``run_study`` then removes the run directory it created. Every error is a one-line ``ConfigError`` naming the setting's key and
what to change. ``run_study`` (and so ``run_experiment`` and ``jaxid run``) calls it first.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from ..config.common import ConfigError, Experiment, Setting
from ..estimate import ESTIMATORS
from ..measure.noise import noise_std
from ..model import TwoLinkArm
from ..types import require_float64, steps_per_period
from .sampling import NORMAL_SPREAD, build_arm, build_excitation

__all__ = ["validate_experiment", "validate_setting", "NORMAL_SPREAD", "MAX_NOISE_STD"]

#: Largest angle-noise standard deviation [rad] a setting may ask for (half a turn: beyond it the
#: angles carry no information and a level this large is a unit mistake).
MAX_NOISE_STD = math.pi


def validate_experiment(exp: Experiment) -> None:
    """Check every setting of ``exp`` (``validate_setting``); raise ``ConfigError`` on the first problem.

    Builds each setting's nominal arm and excitation (cheap: no simulation, no compile). Needs
    float64 (``ValueError`` otherwise, as every public entry point).
    """
    require_float64("validate_experiment")
    for setting in exp.settings:
        validate_setting(exp, setting)


def validate_setting(exp: Experiment, setting: Setting) -> None:
    """The checks of ``validate_experiment`` for one setting (``ConfigError``, one line)."""
    where = f"{exp.source}: settings.{setting.name}" if exp.source else f"settings.{setting.name}"
    nominal = _check_parameters(setting, where)
    _check_sampling(setting, nominal, where)
    _check_sampling_grid(exp, setting, where)
    _check_noise(setting, where)
    _check_estimators(setting, where)


def _check_parameters(setting: Setting, where: str) -> TwoLinkArm:
    """The nominal arm; each override is checked alone first so the message names it."""
    params = setting["parameters"]
    preset = {k: v for k, v in setting.values.items() if k != "parameters"}
    for name, value in params.items():
        single = dataclasses.replace(setting, values={**preset, "parameters": {name: value}})
        try:
            build_arm(single)
        except ValueError as err:
            raise ConfigError(f"{where}.parameters.{name} = {value!r}: {err}") from None
    try:
        return build_arm(setting)
    except ValueError as err:
        raise ConfigError(f"{where}.parameters {params}: {err}") from None


def _legal(arm: TwoLinkArm, names: tuple[str, ...], values) -> bool:
    """Whether ``arm`` with ``names`` set to ``values`` passes the arm's own checks."""
    try:
        arm.with_parameters(names, jnp.asarray(values, dtype=float))
    except ValueError:
        return False
    return True


def _largest_spread(arm: TwoLinkArm, name: str, base: float) -> float:
    """The supremum of ``w`` with ``base (1 - sign(base) w)`` legal for ``name`` (bisection)."""
    lo, hi = 0.0, 1.0
    while _legal(arm, (name,), [base - abs(base) * hi]) and hi < 1e6:
        lo, hi = hi, 2 * hi
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _legal(arm, (name,), [base - abs(base) * mid]) else (lo, mid)
    return lo


def _below(bound: float) -> float:
    """``bound`` to 3 significant digits, never above it: the exact value when ``bound`` is one
    (to bisection accuracy), else rounded down (so "choose x < printed value" is always legal)."""
    if bound <= 0:
        return 0.0
    rounded = float(f"{bound:.3g}")
    if abs(rounded - bound) <= 1e-9 * bound:
        return rounded
    unit = 10.0 ** (math.floor(math.log10(bound)) - 2)
    return math.floor(bound / unit) * unit


def _check_sampling(setting: Setting, nominal: TwoLinkArm, where: str) -> None:
    """Every value a sampled parameter can take keeps the arm legal.

    A draw is ``base (1 + rel)`` with ``rel`` uniform on ``[-width, width]`` or normal with
    standard deviation ``std`` truncated at ``NORMAL_SPREAD`` std (``sample_arms``). The arm's
    rules are lower bounds increasing in every parameter (positive masses and lengths,
    non-negative friction, ``J + m r² >= 0``), so the lowest corner of the support is the worst
    case.
    """
    spec = setting["sample"]
    if not spec:
        return
    names = tuple(spec)
    base = np.asarray(nominal.parameter_vector(names), dtype=float)
    spreads = []
    for name, b in zip(names, base, strict=True):
        s = spec[name]
        key = f"{where}.sample.{name}"
        if s["dist"] == "fixed":
            spreads.append(0.0)
            continue
        word = "width" if s["dist"] == "uniform" else "std"
        value = s[word]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f'{key}.{word} must be a positive finite number (relative to the nominal value), got {value!r}; use dist = "fixed" for no spread.'
            )
        if b == 0:
            raise ConfigError(
                f"{key}: the nominal {name} is 0 and the spread is relative to it, so every draw is 0; "
                f"set parameters.{name} to a non-zero value or drop sample.{name}."
            )
        reach = value if s["dist"] == "uniform" else NORMAL_SPREAD * value
        if not _legal(nominal, (name,), [b - abs(b) * reach]):
            largest = _largest_spread(nominal, name, float(b))
            if s["dist"] == "uniform":
                fix = f"choose width < {_below(largest):g}"
            else:
                fix = (
                    f"choose std < {_below(largest / NORMAL_SPREAD):g} (draws reach mean ± {NORMAL_SPREAD:g} "
                    f"std), or a uniform width < {_below(largest):g}"
                )
            raise ConfigError(
                f"{key}: {s['dist']} with {word} = {value:g} reaches {name} = {b - abs(b) * reach:.4g} "
                f"(nominal {b:.4g}), which the arm rejects; {fix}."
            )
        spreads.append(reach)
    low = base - np.abs(base) * np.asarray(spreads)
    if not _legal(nominal, names, low):
        raise ConfigError(
            f"{where}.sample: the lowest values of {list(names)} together ({dict(zip(names, np.round(low, 6).tolist(), strict=True))}) "
            "make an inertia about a joint J + m r² negative; reduce their widths."
        )


def _check_sampling_grid(exp: Experiment, setting: Setting, where: str) -> None:
    """``sample_step`` divides the period and samples every excited line below Nyquist."""
    excitation = build_excitation(setting, exp.seed)
    step = setting["sample_step"]
    try:
        n = steps_per_period(excitation.period, step)
    except ValueError as err:
        raise ConfigError(f"{where}.sample_step: {err}") from None
    k = excitation.max_harmonic
    if 2 * k >= n:
        period = excitation.period
        raise ConfigError(
            f"{where}.sample_step = {step:g} s gives {n} samples per period ({period:g} s), so the highest "
            f"excited line k = {k} ({k / period:.4g} Hz) is at or above the Nyquist frequency "
            f"{0.5 / step:.4g} Hz; choose sample_step < {period / (2 * k):.4g} s (a divisor of the period)."
        )


def _check_noise(setting: Setting, where: str) -> None:
    """A zero noise level where estimators weight by it, and levels beyond any angle scale."""
    level = setting["noise_level"]
    std = noise_std(setting["noise"], level)
    if std > MAX_NOISE_STD:
        raise ConfigError(
            f"{where}.noise_level = {level:g} gives an angle-noise std of {std:.3g} rad, more than half a "
            f"turn (π rad); the level is in rad: choose noise_level <= {level * MAX_NOISE_STD / std:.3g}."
        )
    if level == 0:
        # The recursive filters that use σ take σ² as their measurement covariance: with σ = 0
        # every trial comes out non-finite (the frequency-domain and regression estimators floor
        # their weights and stay finite on noise-free data).
        weighted = [
            n for n in setting["estimators"] if ESTIMATORS[n].uses_noise_std and ESTIMATORS[n].history == "time"
        ]
        if weighted:
            raise ConfigError(
                f"{where}.noise_level = 0, but {weighted} use σ² as their measurement covariance and give "
                "non-finite estimates at σ = 0; give noise_level > 0 or drop these estimators."
            )


def _check_estimators(setting: Setting, where: str) -> None:
    """Option and unknown combinations that an estimator would reject only when traced."""
    names = setting["estimators"]
    options = setting["estimator_options"]
    if (
        "paper" in names
        and setting["lines"] == "same"
        and not options.get("paper", {}).get("allow_shared_lines", False)
    ):
        raise ConfigError(
            f'{where}: the paper estimator fits each joint from its own lines, which lines = "same" shares; '
            'set lines = "split" or estimator_options.paper.allow_shared_lines = true (the paper, literally).'
        )
