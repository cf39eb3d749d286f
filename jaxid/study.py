"""The Monte Carlo study runner: an experiment config in, per-trial and summary tables out.

For each setting of an experiment:

1. the nominal arm (preset + overrides) and the excitation are built; ``parameter_sets``
   parameter sets are drawn (keys from ``(seed, setting, set index)``);
2. each parameter set is simulated **once** (``simulate_batch``, sharded over devices) and its
   noise draws are added to the stored record (keys from ``(seed, setting, trial)``), so results
   do not depend on the chunk size, on the device count, or on which other settings exist;
3. every estimator runs as one compiled, ``vmap``-ped call per chunk;
4. each finished chunk is written atomically (``chunks/<setting>/<index>.parquet``); a killed
   run resumes from the chunks on disk;
5. the per-trial table, the summary (bias, std, RMSE, √CRLB, coverage, failures, time), the
   Fourier-coefficient table (paper Figs. 2-3), estimator histories and the manifest are written.

Trial ``i`` of a setting with ``S`` parameter sets uses set ``i // ceil(trials / S)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .config import ConfigError, Experiment, Setting
from .estimators import ESTIMATOR_STATUS, get_estimator, parameter_values, resolve_unknowns
from .excitation import Multisine, table2
from .measurement import add_noise, noise_mean, noise_std
from .model import TwoLinkArm, point_mass, table1
from .simulation import STATUS_NAMES, Record, simulate_batch, transient_periods

__all__ = ["run_experiment", "RunExists", "setting_key", "trial_key", "build_arm", "build_excitation", "sample_arms"]


class RunExists(RuntimeError):
    """The run directory holds a finished run (or one of another config); pass ``overwrite=True``."""


# -- keys --------------------------------------------------------------------------------------


def _name_to_int(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") & 0x7FFFFFFF


def setting_key(seed: int, setting: str) -> jax.Array:
    """Root key of a setting: ``fold_in(key(seed), hash(setting))``."""
    return jax.random.fold_in(jax.random.key(seed), _name_to_int(setting))


def trial_key(seed: int, setting: str, trial: int) -> jax.Array:
    """Noise key of one trial, independent of chunking and of other settings."""
    return jax.random.fold_in(jax.random.fold_in(setting_key(seed, setting), 1), trial)


def _set_keys(seed: int, setting: str, sets: np.ndarray) -> jax.Array:
    base = jax.random.fold_in(setting_key(seed, setting), 2)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(sets))


# -- building blocks -------------------------------------------------------------------------


def build_arm(setting: Setting) -> TwoLinkArm:
    """The setting's nominal (true, unsampled) arm: preset plus ``parameters`` overrides."""
    arm = point_mass() if setting["model"] == "point_mass" else table1()
    params = setting["parameters"]
    if params:
        arm = arm.with_parameters(tuple(params), jnp.asarray([float(v) for v in params.values()]))
        arm._check_values()
    return arm


def build_excitation(setting: Setting, seed: int) -> Multisine:
    key = jax.random.fold_in(setting_key(seed, setting.name), 3)
    return table2(setting["lines"], setting["scale"], setting["phases"], key=key)


def sample_arms(setting: Setting, nominal: TwoLinkArm, keys: jax.Array) -> TwoLinkArm:
    """Batched true arms for the given parameter-set keys (relative perturbations of ``nominal``)."""
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
            k = jax.random.fold_in(key, j)
            s = spec[name]
            if s["dist"] == "uniform":
                rel = s["width"] * jax.random.uniform(k, minval=-1.0, maxval=1.0)
            elif s["dist"] == "normal":
                rel = s["std"] * jax.random.normal(k)
            else:
                rel = 0.0
            out.append(base[j] * (1 + rel))
        return jnp.stack(out)

    values = jax.vmap(draw)(keys)
    return arms.with_parameters(names, values)


# -- compiled pieces (cached so settings with the same static options share compiles) ------


@eqx.filter_jit
def _noisy(record: Record, keys, kind: str, level):
    return jax.vmap(lambda r, k: add_noise(r, key=k, kind=kind, level=level))(record, keys)


_ESTIMATOR_CACHE: dict = {}


def _estimator_fn(name: str, unknowns: tuple, q0: tuple, options: tuple):
    key = (name, unknowns, q0, options)
    if key not in _ESTIMATOR_CACHE:
        fn = get_estimator(name)
        opts = dict(options)

        def one(record, nominal, excitation, sigma):
            return fn(record, excitation, nominal, unknowns=unknowns, q0=q0, noise_std=sigma, **opts)

        # Estimators run on one device per process. Splitting them over several XLA host devices
        # of one process can deadlock in jaxlib's batched LAPACK kernels (their batch-parallel
        # map waits for the intra-op thread pool that the other devices' executions hold); the
        # simulation, which needs no LAPACK, is the part sharded over devices.
        _ESTIMATOR_CACHE[key] = jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))
    return _ESTIMATOR_CACHE[key]


_COMPILED: dict = {}

#: Estimators whose ``history`` is the estimate over the record's time (recursive filters); the
#: others' histories are iterations and are not drawn as convergence in time.
TIME_HISTORY = ("rls", "ekf", "ukf")


def _accepts(name: str, option: str) -> bool:
    import inspect

    return option in inspect.signature(get_estimator(name)).parameters


def _compiled(key, jitted, args) -> tuple:
    """Ahead-of-time compile ``jitted`` for ``args`` once; return ``(executable, compile seconds)``."""
    leaves, treedef = jax.tree.flatten(args)
    sig = (key, treedef, tuple((x.shape, str(x.dtype), str(getattr(x, "sharding", ""))) for x in leaves))
    if sig in _COMPILED:
        return _COMPILED[sig], 0.0
    t0 = time.perf_counter()
    exe = jitted.lower(*args).compile()
    _COMPILED[sig] = exe
    return exe, time.perf_counter() - t0


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _host(x) -> np.ndarray:
    """A (possibly multi-process, sharded) array as a numpy array with the full global value."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _is_writer() -> bool:
    """Only process 0 writes files in a multi-process (``jax.distributed``) run."""
    return jax.process_index() == 0


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _process_slice(tree):
    """This process's contiguous share of the trial axis, on its first local device.

    Returns ``(local tree, n, lo, hi)``: trials ``lo:hi`` of ``n`` are this process's (all of
    them in a one-process run).
    """
    n = jax.tree.leaves(tree)[0].shape[0]
    count, index = jax.process_count(), jax.process_index()
    if count == 1:
        # Gather onto one device without a round trip through host memory.
        return jax.device_put(tree, jax.local_devices()[0]), n, 0, n
    tree = jax.tree.map(_host, tree)
    per = -(-n // count)
    lo, hi = min(index * per, n), min((index + 1) * per, n)
    if hi == lo:  # more processes than trials: compute a dummy trial, drop it when gathering
        lo, hi = 0, 1
        local = jax.tree.map(lambda x: x[:1], tree)
        return jax.device_put(local, jax.local_devices()[0]), n, n, n
    local = jax.tree.map(lambda x: x[lo:hi], tree)
    return jax.device_put(local, jax.local_devices()[0]), n, lo, hi


def _gather_processes(x, lo: int, hi: int, n: int) -> np.ndarray:
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


# -- the runner --------------------------------------------------------------------------------


@dataclass
class _SettingPlan:
    setting: Setting
    nominal: TwoLinkArm
    excitation: Multisine
    draws_per_set: int
    chunk: int
    n_chunks: int
    discard: int
    sigma: float


def _plan(exp: Experiment, setting: Setting) -> _SettingPlan:
    nominal = build_arm(setting)
    excitation = build_excitation(setting, exp.seed)
    sets = setting["parameter_sets"] if setting["sample"] else 1
    sets = min(sets, setting.trials)
    dps = math.ceil(setting.trials / sets)
    chunk = max(1, exp.chunk // dps) * dps if dps <= exp.chunk else exp.chunk
    n_chunks = math.ceil(setting.trials / chunk)
    if setting["discard_periods"] == "auto":
        arms = sample_arms(setting, nominal, _set_keys(exp.seed, setting.name, np.arange(sets)))
        discard = transient_periods(arms, excitation, setting["q0"])
    else:
        discard = int(setting["discard_periods"])
    sigma = noise_std(setting["noise"], setting["noise_level"])
    return _SettingPlan(setting, nominal, excitation, dps, chunk, n_chunks, discard, sigma)


def _simulate_sets(exp: Experiment, plan: _SettingPlan, sets: np.ndarray) -> tuple[TwoLinkArm, Record]:
    s = plan.setting
    arms = sample_arms(s, plan.nominal, _set_keys(exp.seed, s.name, sets))
    rec = simulate_batch(
        arms,
        plan.excitation,
        q0=s["q0"],
        discard_periods=plan.discard,
        model=s["simulator"],
        solver=s["solver"],
        substeps=s["substeps"],
        sample_step=s["sample_step"],
        measured_periods=s["measured_periods"],
    )
    return arms, rec


def _run_chunk(exp: Experiment, plan: _SettingPlan, index: int, cache: dict) -> tuple[pd.DataFrame, dict, list]:
    s = plan.setting
    start = index * plan.chunk
    trials = np.arange(start, min(start + plan.chunk, s.trials))
    set_of = trials // plan.draws_per_set
    sets = np.unique(set_of)
    key = tuple(sets.tolist())
    if cache.get("sets") != key:
        cache.clear()
        t0 = time.perf_counter()
        arms, rec = _simulate_sets(exp, plan, sets)
        jax.block_until_ready(rec.q)
        cache.update(sets=key, arms=arms, record=rec, sim_seconds=time.perf_counter() - t0)
    arms, rec = cache["arms"], cache["record"]
    local = np.searchsorted(sets, set_of)
    take = lambda tree: jax.tree.map(lambda x: x[local], tree)
    trial_arms = take(arms)
    trial_rec = take(rec)
    keys = jax.vmap(lambda i: trial_key(exp.seed, s.name, i))(jnp.asarray(trials))
    noisy = _noisy(trial_rec, keys, s["noise"], s["noise_level"])
    unknowns = tuple(s["unknowns"])
    q0 = jnp.asarray(s["q0"], dtype=float)
    truth = np.asarray(jax.vmap(lambda a: parameter_values(a, unknowns, q0))(trial_arms))
    # Estimators get the true known parameters and the *nominal* values of physical unknowns
    # (their starting guess where they need one), never the sampled truth.
    nominal = trial_arms
    if not resolve_unknowns(unknowns)[1]:
        nominal = trial_arms.with_parameters(
            unknowns, jnp.broadcast_to(plan.nominal.parameter_vector(unknowns), truth.shape)
        )
    (noisy_s, nominal_s), n, lo, hi = _process_slice((noisy, nominal))
    # Let nothing else run while an estimator does: two executions in flight at once can stall
    # jaxlib's batched LAPACK kernels on a CPU (see ``_estimator_fn``).
    jax.block_until_ready((noisy_s, nominal_s))
    sim_status = _host(trial_rec.status)
    frames, timing, histories = [], {}, []
    for name in s["estimators"]:
        opts = dict(s["estimator_options"].get(name, {}))
        if s["noise_mean_known"] and "measurement_offset" not in opts and _accepts(name, "measurement_offset"):
            # Time-domain estimators see the raw angles: give them the known noise mean (the
            # paper's uniform noise has mean level/2); the frequency-domain ones ignore the DC line.
            opts["measurement_offset"] = noise_mean(s["noise"], s["noise_level"])
        opts = _freeze(opts)
        key = (name, unknowns, tuple(s["q0"]), opts)
        args = (noisy_s, nominal_s, plan.excitation, jnp.asarray(plan.sigma))
        exe, compile_seconds = _compiled(key, _estimator_fn(*key), args)
        if compile_seconds:
            timing[f"compile:{name}"] = compile_seconds
        t0 = time.perf_counter()
        est = exe(*args)
        jax.block_until_ready(est.value)
        seconds = time.perf_counter() - t0
        timing[name] = seconds
        value = _gather_processes(est.value, lo, hi, n)
        cov = _gather_processes(est.covariance, lo, hi, n)
        status = _gather_processes(est.status, lo, hi, n)
        std = np.sqrt(np.clip(np.diagonal(cov, axis1=-2, axis2=-1), 0, None))
        finite = np.all(np.isfinite(value), axis=1)
        labels = np.where(
            sim_status != 0,
            np.asarray(["sim_" + STATUS_NAMES.get(int(x), str(x)) for x in sim_status]),
            np.where(finite, np.asarray([ESTIMATOR_STATUS.get(int(x), str(x)) for x in status]), "nonfinite"),
        )
        for j, par in enumerate(unknowns):
            frames.append(
                pd.DataFrame(
                    {
                        "setting": s.name,
                        "trial": trials,
                        "param_set": set_of,
                        "estimator": name,
                        "parameter": par,
                        "truth": truth[:, j],
                        "estimate": value[:, j],
                        "std": std[:, j],
                        "status": labels,
                        "seconds": seconds / len(trials),
                    }
                )
            )
        if est.history is not None and index == 0 and name in TIME_HISTORY:
            hist = _gather_processes(est.history, lo, hi, n)[0]
            duration = s["measured_periods"] * plan.excitation.period
            steps = hist.shape[0]
            for j, par in enumerate(unknowns):
                histories.append(
                    pd.DataFrame(
                        {
                            "setting": s.name,
                            "estimator": name,
                            "parameter": par,
                            "time": duration * (np.arange(steps) + 1) / steps,
                            "estimate": hist[:, j],
                            "truth": truth[0, j],
                        }
                    )
                )
    return pd.concat(frames, ignore_index=True), timing, histories


def _atomic_write_parquet(df: pd.DataFrame, path: Path) -> None:
    if not _is_writer():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _atomic_write_text(text: str, path: Path) -> None:
    if not _is_writer():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5
        )
        return out.stdout.strip() or None
    except Exception:
        return None


def _versions() -> dict:
    import diffrax
    import equinox
    import optimistix

    from . import __version__

    return {
        "jaxid": __version__,
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "equinox": equinox.__version__,
        "diffrax": diffrax.__version__,
        "optimistix": optimistix.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
    }


def run_experiment(
    exp: Experiment,
    out: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    figures: bool = True,
) -> Path:
    """Run (or resume) an experiment into ``out``; return the run directory.

    Raises ``RunExists`` if ``out`` holds a finished run, or a run of a different config,
    unless ``overwrite``. Needs float64 (``jax_enable_x64``).
    """
    if not jax.config.jax_enable_x64:
        raise RuntimeError("jaxid studies run in float64: call jax.config.update('jax_enable_x64', True) first.")
    out = Path(out)
    resolved = exp.resolved()
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]
    manifest_path = out / "manifest.json"
    if _is_writer() and out.exists() and any(out.iterdir()):
        old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        if overwrite:
            import shutil

            shutil.rmtree(out)
        elif old.get("complete"):
            raise RunExists(f"{out} holds a finished run; pass --overwrite to replace it or --out for a new directory.")
        elif old.get("config_digest") not in (None, digest):
            raise RunExists(
                f"{out} holds an unfinished run of a different configuration; pass --overwrite or choose another --out."
            )
    _sync("jaxid-start")
    if _is_writer():
        out.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(json.dumps(resolved, indent=2, default=str), out / "config.json")
    manifest = {
        "experiment": exp.name,
        "config_source": exp.source,
        "config_digest": digest,
        "seed": exp.seed,
        "complete": False,
        "versions": _versions(),
        "devices": [str(d) for d in jax.devices()],
        "device_count": len(jax.devices()),
        "platform": platform.platform(),
        "git_revision": _git_revision(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {},
    }
    if _is_writer() and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        manifest["settings"] = old.get("settings", {})
        manifest["resumed"] = True
    _atomic_write_text(json.dumps(manifest, indent=2), manifest_path)

    plans = [_plan(exp, s) for s in exp.settings]
    total = sum(p.n_chunks for p in plans)
    bar = None
    if progress and _is_writer():
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=exp.name, unit="chunk", file=sys.stderr)
    t_start = time.perf_counter()
    for plan in plans:
        s = plan.setting
        chunk_dir = out / "chunks" / s.name
        info = manifest["settings"].setdefault(
            s.name, {"digest": s.digest(), "run_seconds": 0.0, "simulate_seconds": 0.0, "estimator_seconds": {}}
        )
        if info.get("digest") != s.digest():
            raise RunExists(f"{out}: setting {s.name!r} on disk was run with other values; pass --overwrite.")
        info.update(discard_periods=plan.discard, noise_std=plan.sigma, chunks=plan.n_chunks, trials=s.trials)
        cache: dict = {}
        # Decide what is left before computing anything (all processes decide alike).
        pending = [i for i in range(plan.n_chunks) if not (chunk_dir / f"{i:05d}.parquet").exists()]
        extras_missing = not (chunk_dir / "extras.json").exists()
        _sync(f"jaxid-plan-{s.name}")
        if bar:
            bar.update(plan.n_chunks - len(pending))
        for index in pending:
            path = chunk_dir / f"{index:05d}.parquet"
            t0 = time.perf_counter()
            df, timing, histories = _run_chunk(exp, plan, index, cache)
            _atomic_write_parquet(df, path)
            if histories:
                _atomic_write_parquet(pd.concat(histories, ignore_index=True), chunk_dir / "history.parquet")
            info["run_seconds"] += time.perf_counter() - t0
            info["simulate_seconds"] = cache.get("sim_seconds", 0.0)
            for name, sec in timing.items():
                group = "compile_seconds" if name.startswith("compile:") else "estimator_seconds"
                bucket = info.setdefault(group, {})
                label = name.removeprefix("compile:")
                bucket[label] = bucket.get(label, 0.0) + sec
            _atomic_write_text(json.dumps(manifest, indent=2), manifest_path)
            if bar:
                bar.update(1)
        if extras_missing:
            _write_setting_extras(exp, plan, out, cache)
    if bar:
        bar.close()
    _sync("jaxid-done")
    if not _is_writer():
        return out
    from .report import write_tables

    write_tables(out, exp)
    manifest["complete"] = True
    manifest["wall_seconds"] = time.perf_counter() - t_start
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    _atomic_write_text(json.dumps(manifest, indent=2), manifest_path)
    if figures:
        from .plots import make_figures

        make_figures(out)
    return out


def _write_setting_extras(exp: Experiment, plan: _SettingPlan, out: Path, cache: dict) -> None:
    """Per-setting tables that need the model: CRLB and the Fourier-coefficient comparison."""
    s = plan.setting
    path = out / "chunks" / s.name / "extras.json"
    extras = {"crlb": {}, "coefficients": []}
    unknowns = tuple(s["unknowns"])
    try:
        from .crlb import linear_crlb

        cov = linear_crlb(
            plan.nominal,
            plan.excitation,
            unknowns,
            noise_std=plan.sigma,
            sample_step=s["sample_step"],
            periods=s["measured_periods"],
            q0=s["q0"],
        )
        cov = np.asarray(cov)
        extras["crlb"] = {u: float(np.sqrt(cov[i, i])) for i, u in enumerate(unknowns)}
    except Exception as err:  # reported, never silently dropped
        extras["crlb_error"] = f"{type(err).__name__}: {err}"
    if s["simulator"] == "nonlinear" and not resolve_unknowns(unknowns)[1]:
        try:
            from .estimators.nonlinear import nonlinear_crlb

            cov = np.asarray(
                nonlinear_crlb(
                    plan.nominal,
                    plan.excitation,
                    unknowns,
                    plan.sigma,
                    q0=s["q0"],
                    sample_step=s["sample_step"],
                    measured_periods=s["measured_periods"],
                )
            )
            extras["crlb_nonlinear"] = {u: float(np.sqrt(cov[i, i])) for i, u in enumerate(unknowns)}
        except Exception as err:
            extras["crlb_nonlinear_error"] = f"{type(err).__name__}: {err}"
    extras["coefficients"] = _coefficients_table(exp, plan, cache)
    extras["noise_mean"] = noise_mean(s["noise"], s["noise_level"])
    _atomic_write_text(json.dumps(extras, indent=1, default=float), path)


def _coefficients_table(exp: Experiment, plan: _SettingPlan, cache: dict) -> list[dict]:
    """Theoretical (linearised, exact) vs extracted (noise-free and one noisy record) line coefficients."""
    try:
        from .spectrum import fourier_coefficients
    except ImportError:
        return []
    from .linearisation import linearise

    s = plan.setting
    if cache.get("sets", (None,))[0] == 0:  # parameter set 0 is still in memory
        rec = cache["record"]
    else:
        _, rec = _simulate_sets(exp, plan, np.arange(1))
    rec0 = jax.tree.map(lambda x: _host(x[:1])[0], rec)
    noisy = add_noise(rec0, key=trial_key(exp.seed, s.name, 0), kind=s["noise"], level=s["noise_level"])
    lin = linearise(plan.nominal, jnp.asarray(s["q0"], dtype=float))
    omega = jnp.asarray(plan.excitation.line_frequencies)
    theory = np.asarray(jnp.einsum("kij,kj->ki", lin.frequency_response(omega), plan.excitation.phasors()))
    clean = np.asarray(fourier_coefficients(rec0, plan.excitation).Q)
    dirty = np.asarray(fourier_coefficients(noisy, plan.excitation).Q)
    rows = []
    for i, k in enumerate(plan.excitation.lines):
        for j in range(2):
            for source, x in (
                ("theory (linearised)", theory),
                ("extracted, noise-free", clean),
                ("extracted, noisy", dirty),
            ):
                rows.append(
                    {
                        "setting": s.name,
                        "harmonic": k,
                        "joint": j + 1,
                        "source": source,
                        "C": float(np.real(x[i, j])),
                        "D": float(-np.imag(x[i, j])),
                    }
                )
    return rows


def check_run_dir(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise ConfigError(
            f"{run_dir} is not a jaxid run directory (no config.json); give the directory `jaxid run` wrote."
        )
    return run_dir
