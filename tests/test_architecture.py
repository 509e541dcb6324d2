"""The project's layers, checked over its `import` statements (`ast`, nothing is imported).

Bottom to top (README, "Architecture"): foundation → storage → producers → readers →
presentation (report) → stages →
surfaces. An import goes down or stays in its layer, never up, except the few in UPWARD_ALLOWED,
each with its reason in the module that makes it; and no import closes a cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# {folder at the top of the repository: the package it installs as} (pyproject.toml's package-dir)
PACKAGES = {
    "aaco_pipelines": "aaco_pipelines",
    "assets": "aaco_pipelines.assets",
    "resources": "aaco_pipelines.resources",
    "sensors": "aaco_pipelines.sensors",
}

# (module prefix, layer); the longest matching prefix decides.
LAYERS = {
    "aaco_pipelines": 0,
    "aaco_pipelines.config": 0,
    "aaco_pipelines.errors": 0,
    "aaco_pipelines.foundation": 0,
    "aaco_pipelines.bundle": 0,
    "aaco_pipelines.tracelake": 1,
    "aaco_pipelines.registry": 2,
    "aaco_pipelines.graph": 2,
    "aaco_pipelines.llm": 2,
    "aaco_pipelines.execution": 2,
    "aaco_pipelines.collectors": 2,
    "aaco_pipelines.analysis": 3,
    "aaco_pipelines.governance": 3,
    "aaco_pipelines.tuning": 3,
    "aaco_pipelines.report": 4,
    "aaco_pipelines.stages": 5,
    "aaco_pipelines.cli": 6,
    "aaco_pipelines.instance": 6,
    "aaco_pipelines.definitions": 6,
    "aaco_pipelines.assets": 6,
    "aaco_pipelines.resources": 6,
    "aaco_pipelines.sensors": 6,
}
# Inside the producers, data flows in this order: a model is registered, its graph read, a
# generation workload (llm) set up, the session executed, its evidence collected. An import
# goes to an earlier package or stays in its own.
PRODUCERS = ("registry", "graph", "llm", "execution", "collectors")
LAYER_NAMES = (
    "foundation",
    "storage",
    "producers",
    "readers",
    "presentation",
    "stages",
    "surfaces",
)

# Imports that point up a layer, each (importer, imported) with its reason stated where made.
UPWARD_ALLOWED: set[tuple[str, str]] = set()

# Only these modules of the domain library may import Dagster (the rest is usable without it).
DAGSTER_ALLOWED = (
    "aaco_pipelines.definitions",
    "aaco_pipelines.instance",
    "aaco_pipelines.assets",
    "aaco_pipelines.resources",
    "aaco_pipelines.sensors",
)


def project_modules() -> dict[str, Path]:
    modules = {}
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = [package, *path.relative_to(REPO / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name an import statement of the module names (relative ones resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """{module: project modules it imports}: a name counts as its longest project module."""
    modules = project_modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {
        module: {
            o for name in imported_names(module, path) if (o := owner(name)) not in (None, module)
        }
        for module, path in modules.items()
    }


def layer(module: str) -> int:
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    if not prefixes:
        raise AssertionError(f"{module} has no layer: add it to LAYERS (and README)")
    return LAYERS[max(prefixes, key=len)]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, i) for m, imports in graph.items() for i in imports if layer(i) > layer(m)}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_module_imports_in_a_circle(graph):
    assert cycles(graph) == []


def test_imports_point_down_the_layers(graph):
    """Every upward import is in the short allow-list, and every allowed one still exists."""
    upward = upward_imports(graph)
    described = [
        f"{m} ({LAYER_NAMES[layer(m)]}) imports {i} ({LAYER_NAMES[layer(i)]})"
        for m, i in sorted(upward - UPWARD_ALLOWED)
    ]
    assert described == []
    assert len(UPWARD_ALLOWED) <= 5
    assert UPWARD_ALLOWED <= upward, "an allowed import is gone: drop it from UPWARD_ALLOWED"


def dagster_importers(names_by_module: dict[str, set[str]]) -> list[str]:
    """Modules of the domain library, outside DAGSTER_ALLOWED, that import Dagster."""
    return sorted(
        module
        for module, names in names_by_module.items()
        if module.startswith("aaco_pipelines")
        and not module.startswith(DAGSTER_ALLOWED)
        and any(name.startswith("dagster") for name in names)
    )


def test_the_domain_library_imports_no_dagster():
    names = {module: imported_names(module, path) for module, path in project_modules().items()}
    assert dagster_importers(names) == []


def test_the_checks_catch_a_cycle_and_an_upward_import():
    """The checks themselves: a cycle, an upward edge and a Dagster import, planted."""
    planted = {
        "aaco_pipelines.tracelake.store": {"aaco_pipelines.analysis.attribution.session"},
        "aaco_pipelines.analysis.attribution.session": {"aaco_pipelines.tracelake.store"},
    }
    assert cycles(planted) == [sorted(planted)]
    assert upward_imports(planted) == {
        ("aaco_pipelines.tracelake.store", "aaco_pipelines.analysis.attribution.session")
    }
    assert dagster_importers(
        {
            "aaco_pipelines.analysis.attribution.session": {"dagster"},
            "aaco_pipelines.instance.launcher": {"dagster_celery.launcher"},
            "aaco_pipelines.assets.graph": {"dagster"},
        }
    ) == ["aaco_pipelines.analysis.attribution.session"]


def producer(module: str) -> int | None:
    """The module's place in the producers' data-flow order, or None outside the producers."""
    parts = module.split(".")
    return PRODUCERS.index(parts[1]) if len(parts) > 1 and parts[1] in PRODUCERS else None


def later_producer_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (m, i)
        for m, imports in graph.items()
        for i in imports
        if producer(m) is not None and producer(i) is not None and producer(i) > producer(m)
    }


def test_producers_import_in_data_flow_order(graph):
    """registry < graph < llm < execution < collectors: none imports a later one."""
    assert sorted(later_producer_imports(graph)) == []


def test_the_data_flow_check_catches_a_later_producer():
    planted = {"aaco_pipelines.registry.scan": {"aaco_pipelines.graph.extract"}}
    assert later_producer_imports(planted) == {
        ("aaco_pipelines.registry.scan", "aaco_pipelines.graph.extract")
    }


# --- the size budget ------------------------------------------------------------------------

MAX_MODULE_LINES = 600
# Modules still over the budget, with their size when listed: a listed module may only shrink,
# and leaves the list once it fits. Nothing may be added.
OVERSIZE: dict[str, int] = {}


def oversize(modules: dict[str, Path]) -> dict[str, int]:
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules.items()}
    return {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_the_size_budget():
    over = oversize(project_modules())
    grown = {m: n for m, n in over.items() if n > OVERSIZE.get(m, MAX_MODULE_LINES)}
    assert grown == {}, f"over {MAX_MODULE_LINES} lines (split by concept, see README)"
    fitted = sorted(set(OVERSIZE) - set(over))
    assert fitted == [], "these fit the budget now: drop them from OVERSIZE"


# --- each package names its entry points -----------------------------------------------------

ENTRY_POINT = re.compile(r"`(\w+)\.(\w+)`")


def entry_points(package_init: Path) -> list[tuple[str, str]]:
    """The `module.name` pairs a package's docstring names, in order."""
    doc = ast.get_docstring(ast.parse(package_init.read_text())) or ""
    return ENTRY_POINT.findall(doc)


def top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def stage_packages() -> list[Path]:
    """Every sub-package of a package (analysis/attribution, governance/drift, graph/cost,
    tracelake/tables...), and every package whose __init__ names entry points (bundle/,
    tuning/): the folders a newcomer opens to find where a change goes."""
    root = REPO / "aaco_pipelines"
    nested = {p.parent for p in root.glob("*/*/__init__.py")}
    return sorted(nested | {p.parent for p in root.glob("*/__init__.py") if entry_points(p)})


def test_each_stage_package_names_its_entry_points():
    """A newcomer reads a sub-package's __init__ to find its front door; it must not lie."""
    packages = stage_packages()
    assert {p.parent.name for p in packages} >= {"analysis", "governance"}
    for package in packages:
        named = entry_points(package / "__init__.py")
        assert named, f"{package}/__init__.py names no entry point (`module.function`)"
        for module, name in named:
            path = package / f"{module}.py"
            assert path.exists(), f"{package}/__init__.py names {module}.{name}: no {path.name}"
            assert name in top_level_names(path), f"{package}/__init__.py: no {module}.{name}"


def test_the_entry_point_check_reads_module_and_name(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text('"""Front door.\n\n`nodes.attribute_session` maps kernels; `x` is prose."""\n')
    assert entry_points(init) == [("nodes", "attribute_session")]


def table_and_plot_builders(graph: dict[str, set[str]]) -> set[str]:
    """The report's helpers that draw a plot or lay out a Markdown table."""
    report = "aaco_pipelines.report."
    return {
        m
        for m in graph
        if m.startswith(report)
        and (m.endswith("_plots") or m in (report + "markdown_tables", report + "plot_canvas"))
    }


def test_asset_pages_show_the_reports_sections_not_their_own(graph):
    """An asset module is a thin adapter: its page's tables and plots are the report's sections
    (report.report_excerpt), so no asset builds a table or draws a plot of its own."""
    builders = table_and_plot_builders(graph)
    assert "aaco_pipelines.report.session_plots" in builders  # the check sees the plots
    found = sorted(
        (module, imported)
        for module, imports in graph.items()
        if module.startswith("aaco_pipelines.assets")
        for imported in imports & builders
    )
    assert found == []
