"""The Monte Carlo study runner: an experiment config in, per-trial and summary tables out.

For each setting of an experiment:

1. the nominal arm (a preset or the experiment's ``[arm]`` table, plus overrides) and the
   excitation are built; trial ``i`` uses parameter set ``i mod S`` (``S`` = ``parameter_sets``),
   whose parameters are drawn from its own key (``sampling``);
2. each parameter set is simulated **once** (``simulate_batch``, sharded over devices) with its
   own transient length, kept while chunks need it, and each trial's noise is added to its set's
   record (keys from ``(seed, setting, trial)``), so a trial's row depends on the seed, the
   setting, its index and its parameters only — not on the chunk size, the device count, the
   other sets or which other settings and trials exist;
3. every estimator runs as one compiled, ``vmap``-ped call per chunk (``compiled``);
4. each finished chunk is written atomically (``chunks/<setting>/<index>.parquet``); a killed
   run resumes from the chunks on disk (``files``);
5. the per-trial table, the summary (bias, std, RMSE, √CRLB, coverage, failures, time), the
   Fourier-coefficient table (paper Figs. 2-3), estimator histories and the manifest are written.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._platform import release_if_crowded
from ..config.common import Experiment, Setting
from ..estimate import ESTIMATOR_STATUS, ESTIMATORS, parameter_values, resolve_unknowns
from ..excitation.multisine import Multisine
from ..measure.noise import noise_mean, noise_std
from ..model import TwoLinkArm
from ..simulation.open_loop import STATUS_NAMES, Record, simulate_batch
from ..types import require_float64
from .compiled import clean_spectra, compiled, estimator_fn, freeze, noisy_records, noisy_spectra, spectral_estimator_fn
from .extras import write_setting_extras
from .files import RunExists, config_digest, new_manifest, prepare_run_dir, write_parquet, write_text
from .hosts import gather_processes, is_writer, process_slice, sync, to_host
from .sampling import (
    build_arm,
    build_excitation,
    parameter_set_of,
    sample_arms,
    set_discard_periods,
    set_keys,
    trial_key,
)
from .validate import validate_experiment

__all__ = ["run_study", "TIME_HISTORY", "SET_CACHE_BYTES"]

#: Estimators whose ``history`` is the estimate over the record's time (recursive filters); the
#: others' histories are iterations and are not drawn as convergence in time. (Derived from the
#: class fact ``history``; kept for callers of the old name.)
TIME_HISTORY = tuple(name for name, cls in ESTIMATORS.items() if cls.history == "time")

#: Host memory for simulated parameter-set records kept between chunks [bytes].
SET_CACHE_BYTES = 1 << 30


@dataclass
class _SettingPlan:
    setting: Setting
    nominal: TwoLinkArm
    excitation: Multisine
    sets: int  # S: trial i uses parameter set i mod S
    chunk: int
    n_chunks: int
    sigma: float


def _plan(exp: Experiment, setting: Setting) -> _SettingPlan:
    sets = setting["parameter_sets"] if setting["sample"] else 1
    n_chunks = math.ceil(setting.trials / exp.chunk)
    sigma = noise_std(setting["noise"], setting["noise_level"])
    return _SettingPlan(
        setting, build_arm(setting), build_excitation(setting, exp.seed), sets, exp.chunk, n_chunks, sigma
    )


@dataclass
class _SetRecords:
    """Noise-free records of simulated parameter sets, on the host, keyed by set index.

    A set is simulated once with its own transient length (``set_discard_periods``) and kept
    until the cache would exceed ``SET_CACHE_BYTES``; a set simulated again gives the same bits.
    """

    arms: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    discards: set = field(default_factory=set)
    seconds: float = 0.0

    def get(self, exp: Experiment, plan: _SettingPlan, sets: np.ndarray) -> tuple[TwoLinkArm, Record]:
        """Arms and records of ``sets`` (distinct indices), stacked on a leading axis, on device."""
        missing = [int(i) for i in sets if int(i) not in self.records]
        if missing:
            self._simulate(exp, plan, missing, keep=set(int(i) for i in sets))
        stack = lambda rows: jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *rows)
        return stack([self.arms[int(i)] for i in sets]), stack([self.records[int(i)] for i in sets])

    def _simulate(self, exp: Experiment, plan: _SettingPlan, missing: list[int], keep: set) -> None:
        s = plan.setting
        t0 = time.perf_counter()
        arms = sample_arms(s, plan.nominal, set_keys(exp.seed, s.name, np.asarray(missing)))
        discard = set_discard_periods(s, arms, plan.excitation)
        # One call: each set's own transient count is a per-trial (traced) input of simulate_batch.
        rec = simulate_batch(
            arms,
            plan.excitation,
            q0=s["q0"],
            discard_periods=discard,
            model=s["simulator"],
            solver=s["solver"],
            substeps=s["substeps"],
            sample_step=s["sample_step"],
            measured_periods=s["measured_periods"],
        )
        rec = jax.tree.map(to_host, rec)
        arms = jax.tree.map(np.asarray, arms)
        if self.records:
            per_set = sum(x[0].nbytes for x in jax.tree.leaves(rec))
            if (len(self.records) + len(missing)) * per_set > SET_CACHE_BYTES:
                for i in [i for i in self.records if i not in keep]:
                    del self.records[i], self.arms[i]
        for k, i in enumerate(missing):
            self.records[i] = jax.tree.map(lambda x, k=k: x[k], rec)
            self.arms[i] = jax.tree.map(lambda x, k=k: x[k], arms)
        self.discards.update(int(d) for d in discard)
        self.seconds += time.perf_counter() - t0


def _run_chunk(exp: Experiment, plan: _SettingPlan, index: int, cache: _SetRecords) -> tuple[pd.DataFrame, dict, list]:
    s = plan.setting
    start = index * plan.chunk
    trials = np.arange(start, min(start + plan.chunk, s.trials))
    # Every chunk runs at one width (the last one padded with copies of its last trial, dropped
    # from the results): one compiled program per setting, and a trial's bits do not depend on how
    # many trials share its chunk (XLA:CPU vectorises a batch of another width differently).
    width = len(trials)
    padded = np.concatenate([trials, np.full(min(plan.chunk, s.trials) - width, trials[-1])])
    set_of = parameter_set_of(padded, plan.sets)
    sets = np.unique(set_of)
    arms, rec = cache.get(exp, plan, sets)
    local = jnp.asarray(np.searchsorted(sets, set_of))
    take = lambda tree: jax.tree.map(lambda x: x[local], tree)
    trial_arms = take(arms)
    keys = jax.vmap(lambda i: trial_key(exp.seed, s.name, i))(jnp.asarray(padded))
    spectral = s["noise_path"] == "spectral"
    if spectral:
        # Noisy lines drawn from each set's clean spectrum: no per-trial record in memory.
        noisy = noisy_spectra(take(clean_spectra(rec, plan.excitation)), keys, s["noise_level"])
    else:
        noisy = noisy_records(take(rec), keys, s["noise"], s["noise_level"])
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
    (noisy_s, nominal_s), n, lo, hi = process_slice((noisy, nominal))
    # Let nothing else run while an estimator does: two executions in flight at once can stall
    # jaxlib's batched LAPACK kernels on a CPU (docs/lapack-deadlock.md).
    jax.block_until_ready((noisy_s, nominal_s))
    sim_status = np.asarray(rec.status)[np.asarray(local)][:width]
    frames, timing, histories = [], {}, []
    for name in s["estimators"]:
        opts = dict(s["estimator_options"].get(name, {}))
        if s["noise_mean_known"] and "measurement_offset" not in opts and ESTIMATORS[name].takes_noise_mean:
            # Time-domain estimators see the raw angles: give them the known noise mean (the
            # paper's uniform noise has mean level/2); the frequency-domain ones ignore the DC line.
            opts["measurement_offset"] = noise_mean(s["noise"], s["noise_level"])
        opts = freeze(opts)
        key = (name, unknowns, tuple(s["q0"]), opts)
        args = (noisy_s, nominal_s, plan.excitation, jnp.asarray(plan.sigma))
        make = spectral_estimator_fn if spectral else estimator_fn
        exe, compile_seconds = compiled((spectral, *key), make(*key), args)
        if compile_seconds:
            timing[f"compile:{name}"] = compile_seconds
        t0 = time.perf_counter()
        est = exe(*args)
        jax.block_until_ready(est.value)
        seconds = time.perf_counter() - t0
        timing[name] = seconds
        value = gather_processes(est.value, lo, hi, n)[:width]
        cov = gather_processes(est.covariance, lo, hi, n)[:width]
        status = gather_processes(est.status, lo, hi, n)[:width]
        std = np.sqrt(np.clip(np.diagonal(cov, axis1=-2, axis2=-1), 0, None))
        # A row is "ok" only with a finite estimate and a finite reported std: no table holds a NaN
        # without a status saying why.
        finite = np.all(np.isfinite(value), axis=1) & np.all(np.isfinite(std), axis=1)
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
                        "param_set": set_of[:width],
                        "estimator": name,
                        "parameter": par,
                        "truth": truth[:width, j],
                        "estimate": value[:, j],
                        "std": std[:, j],
                        "status": labels,
                        "seconds": seconds / len(padded),
                    }
                )
            )
        if est.history is not None and index == 0 and ESTIMATORS[name].history == "time":
            hist = gather_processes(est.history, lo, hi, n)[0]
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


def run_study(exp: Experiment, out: str | Path, *, overwrite: bool = False, progress: bool = True) -> Path:
    """Run (or resume) an experiment's trials into ``out``; return the run directory.

    Writes ``config.json``, ``manifest.json`` (``complete`` once every chunk and every setting's
    extras are on disk) and ``chunks/``; the tables and figures are built from these by
    ``jaxid.report.write_tables`` and ``jaxid.report.figures.make_figures`` (``jaxid.run_experiment``
    does all three).

    First checks the whole experiment (``validate_experiment``): a bad setting raises
    ``ConfigError`` (a ``ValueError``) naming its key before ``out`` is created or touched.
    Raises ``RunExists`` if ``out`` holds a finished run, or a run of a different config,
    unless ``overwrite``; ``ValueError`` unless JAX runs in float64 (``jax_enable_x64``).
    """
    require_float64("run_study")
    # Everything that can be checked is checked before the run directory exists.
    validate_experiment(exp)
    plans = [_plan(exp, s) for s in exp.settings]
    out = Path(out)
    digest = config_digest(exp)
    manifest_path = out / "manifest.json"
    prepare_run_dir(out, digest, overwrite)
    sync("jaxid-start")
    created = is_writer() and not out.exists()
    try:
        return _run(exp, plans, out, digest, manifest_path, progress)
    except ValueError:
        # A structural error only an estimator's trace finds (the last line of defence behind
        # validate_experiment): leave no directory behind if this call made it and wrote no chunk.
        if created and out.exists() and not any((out / "chunks").rglob("*.parquet")):
            shutil.rmtree(out)
        raise


def _run(exp: Experiment, plans: list, out: Path, digest: str, manifest_path: Path, progress: bool) -> Path:
    if is_writer():
        out.mkdir(parents=True, exist_ok=True)
    write_text(json.dumps(exp.resolved(), indent=2, default=str), out / "config.json")
    manifest = new_manifest(exp, digest, manifest_path)
    write_text(json.dumps(manifest, indent=2), manifest_path)

    bar = None
    if progress and is_writer():
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(p.n_chunks for p in plans), desc=exp.name, unit="chunk", file=sys.stderr)
    t_start = time.perf_counter()
    for plan in plans:
        s = plan.setting
        chunk_dir = out / "chunks" / s.name
        info = manifest["settings"].setdefault(
            s.name, {"digest": s.digest(), "run_seconds": 0.0, "simulate_seconds": 0.0, "estimator_seconds": {}}
        )
        if info.get("digest") != s.digest():
            raise RunExists(f"{out}: setting {s.name!r} on disk was run with other values; pass --overwrite.")
        info.update(noise_std=plan.sigma, chunks=plan.n_chunks, trials=s.trials, parameter_sets=plan.sets)
        cache = _SetRecords()
        # Decide what is left before computing anything (all processes decide alike).
        pending = [i for i in range(plan.n_chunks) if not (chunk_dir / f"{i:05d}.parquet").exists()]
        extras_missing = not (chunk_dir / "extras.json").exists()
        sync(f"jaxid-plan-{s.name}")
        if bar:
            bar.update(plan.n_chunks - len(pending))
        for index in pending:
            release_if_crowded()  # a long sweep's compiled programs within the memory-map limit
            path = chunk_dir / f"{index:05d}.parquet"
            t0 = time.perf_counter()
            df, timing, histories = _run_chunk(exp, plan, index, cache)
            write_parquet(df, path)
            if histories:
                write_parquet(pd.concat(histories, ignore_index=True), chunk_dir / "history.parquet")
            info["run_seconds"] += time.perf_counter() - t0
            info["simulate_seconds"] += cache.seconds
            cache.seconds = 0.0
            _record_discards(info, cache.discards)
            for name, sec in timing.items():
                group = "compile_seconds" if name.startswith("compile:") else "estimator_seconds"
                bucket = info.setdefault(group, {})
                label = name.removeprefix("compile:")
                bucket[label] = bucket.get(label, 0.0) + sec
            write_text(json.dumps(manifest, indent=2), manifest_path)
            if bar:
                bar.update(1)
        if extras_missing:
            _, rec0 = cache.get(exp, plan, np.arange(1))  # every process (a sharded simulation)
            if is_writer():  # only process 0 writes the extras: the others skip computing them
                write_setting_extras(exp, plan, out, jax.tree.map(lambda x: x[0], rec0))
    if bar:
        bar.close()
    sync("jaxid-done")
    manifest["complete"] = True
    manifest["wall_seconds"] = time.perf_counter() - t_start
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_text(json.dumps(manifest, indent=2), manifest_path)
    return out


def _record_discards(info: dict, discards: set) -> None:
    """Transient periods used by the setting's sets: one int, or the distinct values (sampled sets)."""
    seen = set(np.atleast_1d(info.get("discard_periods", [])).tolist()) | discards
    info["discard_periods"] = min(seen) if len(seen) == 1 else sorted(seen)
