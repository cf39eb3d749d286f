"""Imports go one way: from the stage that uses to the stage it uses (DESIGN, "Architecture").

Every module under ``jaxid/`` is parsed with ``ast`` (imports inside functions included, since
they run too) and checked against ``LAYERS``: a module may import from its own layer or a lower
one, never from a higher one, and the import graph has no cycles.

Importing ``jaxid.p.m`` also runs the package ``jaxid/p/__init__.py``; that counts as an import of
``jaxid.p`` for a module outside ``p`` (this is how ``estimate.crlb`` → ``estimate.base`` would close a cycle
through ``estimate/__init__`` from outside the package). The root package ``jaxid/__init__.py`` (which re-exports
everything) is not counted that way.

A new module must be added to ``LAYERS`` (the test says so); a package entry covers its
submodules (``"estimate"`` covers ``estimate.kalman.records``) unless a submodule is listed itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jaxid"

#: Layers from the bottom up; names are relative to ``jaxid`` ("__init__" is the package itself).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_platform", "_aliases", "types", "linalg", "excitation.phasors"),
    ("model", "model.urdf", "model.serial", "model.unrolled", "excitation", "excitation.multisine"),
    ("simulation.linearisation",),
    ("simulation", "measure", "estimate.kalman.filters", "excitation.fourier"),
    (
        "estimate",
        "estimate.linearised_estimators",
        "estimate.regressor_estimators",
        "estimate.nonlinear_estimators",
        "estimate.logs.stepping",
        "estimate.logs.ls_kernel",
    ),
    (
        "config",
        "config.fit_arm",
        "config.fit_checks",
        "study",
        "excitation.multisine_design",
        "excitation.multisine_criteria",
        "excitation.fourier_design",
        "excitation.fourier_information",
        "fit",
        "fit.writeback_choice",
        "fit.writeback_xml",
        "benchmark",
    ),
    ("report",),
    ("experiment", "cli", "__main__", "__init__"),
)

_LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, Path]:
    """Dotted names relative to ``jaxid`` ("__init__" for the root) → file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer(module: str) -> int | None:
    """The layer of a module: its own entry, else its closest listed package."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in _LAYER_OF:
            return _LAYER_OF[name]
    return None


def _package_of(module: str, path: Path) -> list[str]:
    parts = module.split(".") if module != "__init__" else []
    return parts if path.name == "__init__.py" else parts[:-1]


def _resolve(target: str) -> str | None:
    """The jaxid module a dotted name (relative to jaxid) refers to: itself or its closest parent."""
    parts = target.split(".") if target else []
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in MODULES:
            return name
    return "__init__" if not parts or parts == [""] else None


def imports_of(module: str, path: Path, source: str | None = None) -> set[str]:
    """The jaxid modules ``module`` imports anywhere in its file (functions included)."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    package = _package_of(module, path)
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name.removeprefix("jaxid").lstrip(".") for a in node.names if a.name.split(".")[0] == "jaxid"]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith("jaxid"):
                    continue
                base = node.module.removeprefix("jaxid").lstrip(".").split(".") if node.module != "jaxid" else []
            else:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
                base = base + (node.module.split(".") if node.module else [])
            base = [p for p in base if p]
            # ``from .pkg import sub`` imports the submodule when there is one
            for alias in node.names:
                sub = ".".join([*base, alias.name])
                targets.append(sub if sub in MODULES else ".".join(base))
        for target in targets:
            resolved = _resolve(target)
            if resolved is None:
                continue
            found.add(resolved)
            # running jaxid/p/__init__.py on the way (not the root's, not from inside p)
            parts = resolved.split(".")
            for n in range(1, len(parts)):
                parent = ".".join(parts[:n])
                if parent in MODULES and not module.startswith(parent + ".") and module != parent:
                    found.add(parent)
    found.discard(module)
    return found


GRAPH = {m: imports_of(m, p) for m, p in MODULES.items()}


def _upward() -> set[tuple[str, str]]:
    bad = set()
    for m, targets in GRAPH.items():
        for t in targets:
            lm, lt = layer(m), layer(t)
            if lm is not None and lt is not None and lt > lm:
                bad.add((m, t))
    return bad


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def _cycle_edges(component: list[str]) -> set[tuple[str, str]]:
    members = set(component)
    return {(m, t) for m in component for t in GRAPH[m] if t in members}


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if layer(m) is None)
    assert not missing, (
        f"modules without a layer: {missing}; add each to LAYERS in tests/test_imports.py "
        "(the layer of the stages it uses, or above)"
    )


def test_imports_go_downwards():
    bad = sorted(_upward())
    assert not bad, "upward imports (importer -> imported): " + ", ".join(
        f"{m} (layer {layer(m)}) -> {t} (layer {layer(t)})" for m, t in bad
    )


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycles: " + "; ".join(
        " <-> ".join(c) + f" (edges: {sorted(_cycle_edges(c))})" for c in cycles
    )


def test_the_checker_sees_function_local_relative_and_package_imports():
    fake = PACKAGE / "study" / "fake.py"
    source = "import numpy\n\ndef f():\n    from ..report import write_tables\n    from . import runner\n"
    assert imports_of("study.fake", fake, source) == {"report", "study.runner"}
    source = "from jaxid.estimate.base import register\n"
    design = PACKAGE / "excitation" / "multisine_design.py"
    assert imports_of("excitation.multisine_design", design, source) == {"estimate.base", "estimate"}
    assert layer("estimate.kalman.records") == layer("estimate") and layer("report") > layer("study")
    assert layer("estimate.kalman.filters") < layer("estimate") and layer("simulation.linearisation") < layer(
        "simulation"
    )


#: The longest a module under ``jaxid/`` may be (issue 29: modules split by job, a newcomer reads one at a time).
MAX_MODULE_LINES = 400


def test_every_module_is_under_the_line_limit():
    """Every module of ``jaxid/`` has at most ``MAX_MODULE_LINES`` lines (split a longer one by job)."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"
