"""The layers point one way: no import cycle, no private name used across packages, each layer
imports only the ones below it, results never import the renderers, the dashboard only
tracekit's public API. Read from the source (``ast``), every import counted, those inside
functions too (only ``if TYPE_CHECKING:`` blocks are left out): docs/architecture.md draws
the same layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tracekit", "dashboards", "runtime")

LAYERS = [
    ("base", ["tracekit", "tracekit.errors", "tracekit._files", "tracekit._fork",
              "tracekit._objarrays", "tracekit._oneshot", "tracekit.intervals", "tracekit.calls",
              "tracekit.emptyresult"]),
    ("trace", ["tracekit.trace"]),
    ("phases", ["tracekit.phases"]),
    ("steps", ["tracekit.steps"]),
    ("analyses and graph", ["tracekit.analyses", "tracekit.graph", "tracekit.lanes"]),
    ("explain", ["tracekit.analyses.explain", "tracekit.analyses.skeleton"]),
    ("every section", ["tracekit.analyses.__init__"]),
    ("report", ["tracekit.report", "tracekit.checks", "tracekit.annotate"]),
    ("one loaded trace", ["tracekit.reportcache", "tracekit.loaded"]),
    ("ranks", ["tracekit.ranks"]),
    ("api", ["tracekit.api", "tracekit.handler"]),
    ("dashboards", ["dashboards"]),
    ("commands", ["tracekit.commands", "tracekit.cli"]),
]
"""Bottom first: a module imports only from its own layer and the layers below (the longest
prefix names a module's layer; ``tracekit.analyses.__init__`` is the package's own module)."""

DASHBOARD_MAY_IMPORT = ("tracekit.api", "tracekit.errors", "tracekit.report")
"""All of tracekit the dashboard imports: the public API (whose ``LoadedTrace`` gives the
results' dataclasses: the dashboard never holds a raw ``Trace``), the one error hierarchy, and
the report objects' keys and how tracekit writes a figure."""

RESULTS = ("tracekit.trace", "tracekit.phases", "tracekit.steps", "tracekit.calls",
           "tracekit.analyses", "tracekit.graph")
"""The results, which never import the renderers (``tracekit.report``)."""



def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).with_suffix("")
            out[".".join(rel.parts)] = f
    for pkg in PACKAGES:  # compiled parts are modules too
        for f in (ROOT / pkg).rglob("*.c"):
            out.setdefault(".".join(f.relative_to(ROOT).with_suffix("").parts), f)
    return out


MODULES = _modules()


def _name(mod: str) -> str:
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _package(mod: str) -> str:
    """The package a module (by its file) belongs to."""
    return mod.rsplit(".", 1)[0]


def _resolve(name: str) -> str | None:
    """The module file ``name`` imports (a package: its ``__init__``)."""
    if name in MODULES:
        return name
    if f"{name}.__init__" in MODULES:
        return f"{name}.__init__"
    return None


def _imports(mod: str) -> list[tuple[str, str | None, int]]:
    """``(module imported, name taken from it or None, line)`` for every import of ``mod``
    outside ``if TYPE_CHECKING:``, and ``(module, attribute, line)`` for each private attribute
    read off an imported module (``phases._memo``)."""
    path = MODULES[mod]
    if path.suffix != ".py":
        return []
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out: list[tuple[str, str | None, int]] = []
    bound: dict[str, str] = {}
    here = _name(mod).split(".")
    is_pkg = mod.endswith(".__init__")
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                target = _resolve(a.name)
                if target:
                    out.append((target, None, node.lineno))
                    if a.asname:
                        bound[a.asname] = target
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + (1 if is_pkg else 0)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for a in node.names:
                sub = _resolve(f"{name}.{a.name}")
                if sub:  # a module of the package
                    out.append((sub, None, node.lineno))
                    bound[a.asname or a.name] = sub
                elif _resolve(name):
                    out.append((_resolve(name), a.name, node.lineno))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            out.append((bound[node.value.id], node.attr, node.lineno))
    return out


IMPORTS = {m: _imports(m) for m in MODULES}


def _private_use(importer: str, target: str, name: str | None) -> str | None:
    """Why ``importer`` may not use ``target`` (``.name``), None when it may: a private module
    (``_x``) belongs to its package and the packages inside it; a private name of a module, to
    the modules of that module's own package."""
    t = _name(target)
    if name is not None and name.startswith("_") and not name.startswith("__"):
        owner = _package(target) if not target.endswith(".__init__") else t
        if _package(importer) != owner and _name(importer) != t:
            return f"{t}.{name}"
    parts = t.split(".")
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            owner = ".".join(parts[:i])
            imp = _name(importer)
            if not (imp == owner or imp.startswith(owner + ".")):
                return ".".join(parts[: i + 1])
    return None


def _layer(mod: str) -> int | None:
    best, at = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    return at


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert _cycles({m: {t for t, _, _ in IMPORTS[m] if t != m} for m in MODULES}) == []


def test_no_private_name_across_packages():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} uses {why}"
           for m in MODULES for t, name, line in IMPORTS[m]
           if (why := _private_use(m, t, name)) is not None]
    assert bad == []


def test_each_layer_imports_only_the_ones_below():
    bad = []
    for mod in MODULES:
        if not mod.startswith(("tracekit", "dashboards")):
            continue
        mine = _layer(mod)
        assert mine is not None, f"{mod}: in no layer of LAYERS"
        bad += [f"{_name(mod)} ({LAYERS[mine][0]}), line {line}: {_name(t)} "
                f"({LAYERS[_layer(t)][0]})" for t, _, line in IMPORTS[mod]
                if t.startswith(("tracekit", "dashboards")) and _layer(t) > mine]
    assert bad == []


def test_the_dashboard_reads_only_the_public_api():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: {_name(t)}" for m in MODULES
           if m.startswith("dashboards") for t, _, line in IMPORTS[m]
           if t.startswith("tracekit") and not any(_name(t) == p or _name(t).startswith(p + ".")
                                                  for p in DASHBOARD_MAY_IMPORT)]
    assert bad == []


def test_results_never_import_the_renderers():
    bad = [f"{_name(m)} -> {_name(t)}" for m in MODULES if m.startswith(RESULTS)
           for t, _, _ in IMPORTS[m] if t.startswith("tracekit.report")]
    assert bad == []


def test_tracekit_and_the_runtime_never_import_each_other():
    bad = [f"{_name(m)} -> {_name(t)}" for m in MODULES for t, _, _ in IMPORTS[m]
           if (m.startswith("tracekit") and t.startswith("runtime"))
           or (m.startswith("runtime") and t.startswith(("tracekit", "dashboards")))]
    assert bad == []


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """A cycle through an import inside a function, a private name read off a module and an
    import from a layer above are each found."""
    pkg = tmp_path / "tracekit"
    (pkg / "graph").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "phases.py").write_text("from tracekit.graph import build\n")
    (pkg / "graph" / "__init__.py").write_text("")
    (pkg / "graph" / "build.py").write_text(
        "def f():\n    from tracekit import phases\n    return phases._memo\n")
    fake = {"tracekit.__init__": pkg / "__init__.py", "tracekit.phases": pkg / "phases.py",
            "tracekit.graph.__init__": pkg / "graph" / "__init__.py",
            "tracekit.graph.build": pkg / "graph" / "build.py"}
    monkeypatch.setitem(globals(), "MODULES", fake)
    got = {m: _imports(m) for m in fake}
    assert _cycles({m: {t for t, _, _ in got[m]} for m in fake}) == [
        ["tracekit.graph.build", "tracekit.phases"]]
    assert ("tracekit.phases", "_memo", 3) in got["tracekit.graph.build"]
    assert _private_use("tracekit.graph.build", "tracekit.phases", "_memo") == "tracekit.phases._memo"
    assert _private_use("tracekit.graph.critical", "tracekit.graph.replay", "_core") is None
    assert _private_use("tracekit.analyses.forked", "tracekit.trace._parallel", None) \
        == "tracekit.trace._parallel"
    assert _private_use("tracekit.trace.loader", "tracekit._files", None) is None
    assert _private_use("dashboards.catalog", "tracekit._files", None) == "tracekit._files"
    assert _layer("tracekit.graph.build") > _layer("tracekit.phases")
