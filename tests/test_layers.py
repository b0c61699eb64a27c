"""The import graph of the mdsd package: no cycle among its modules, and no import from a lower layer up to a
higher one.

The graph is built statically: every ``.py`` file under ``mdsd/`` is parsed with :mod:`ast` and every
``import mdsd...`` / ``from mdsd... import ...`` in it (relative ones too) is an edge, wherever it stands: at
the top, inside a function (a lazy import is still a dependency), under ``if TYPE_CHECKING``. Doctests are
strings, not imports. A module is named as Python names it (``mdsd/tree/decoder.py`` is ``mdsd.tree.decoder``,
``mdsd/tree/__init__.py`` is the package ``mdsd.tree``). ``import mdsd.a.b`` is an edge to the longest of
``mdsd.a.b``, ``mdsd.a``, ``mdsd`` that is a module; ``from mdsd.a import b`` is an edge to ``mdsd.a.b`` where
that is a module, else to ``mdsd.a`` (``b`` is a name defined or re-exported there).

Cycles. An edge from a package's ``__init__`` to a module inside that package is left out: that is how a
package gathers its public names, and Python imports a package before any of its submodules, so such an
edge alone never closes a loop. Every other edge counts, and the rest of the graph must have no cycle. In
exchange, no module may import a package that contains it (``mdsd.tree.decoder`` importing ``mdsd.tree``,
or any module importing the façade ``mdsd`` itself): with the package's own edge to it, that is a circular
import that works only while the package happens to bind the name first. Each module imports the module
that defines what it needs.

Layers, lowest first, are :data:`LAYERS` below: each top-level module or subpackage of mdsd belongs to one,
and a module may import modules of its own layer or of lower ones, never of a higher one. A new top-level
module must be placed in a layer here before this test passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mdsd"

# The layers, lowest first: (name, top-level modules and subpackages of mdsd). "__init__" is the package's
# façade (mdsd/__init__.py), which re-exports the public API of every layer below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundations",  # the mathematics and its data: no model, no decoder
        (
            "cumsum",  # prefix sums by torch's kernel, for the exact quadratures
            "laws",
            "race",
            "sampling",
            "validation",
            "highs",
            "toy",
            "otm",
            "verifiers",
            "sequence",
            "sources",
            "data",
            "token_tree",  # the token tree's shape, shared by the sequence-level theory and the decoder
            "sequoia",
            "outputs",  # what any layer writes to disk: a folder that takes files, strict JSON, provenance
            "errors",  # how the entry points (the command, the experiment scripts) report an exception
        ),
    ),
    ("tree", ("tree",)),  # the decoder
    ("hf", ("hf",)),  # the Hugging Face glue: fetch, load, the tiny pair, HF's own generate paths
    # Above the glue they use: the drafters' runs load their target through mdsd.hf (distill, features,
    # train) and the cost model describes a profiled model by mdsd.hf.describe_model; the glue knows neither
    # (a feature head given as --draft is told from a model in mdsd.drafters.pair).
    ("models", ("drafters", "costs")),
    ("harness", ("harness",)),  # the experiments' infrastructure
    ("entry", ("cli", "__main__", "__init__")),  # the command line and the package's façade
)


# ---- the graph -------------------------------------------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under ``root``: {dotted name: file}."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def _resolve(name: str, known: dict[str, Path]) -> str:
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports(module: str, path: Path, known: dict[str, Path], top: str) -> dict[str, int]:
    """{imported module of the package ``top``: line of its first import} of one module (module docstring)."""
    found: dict[str, int] = {}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, known) for alias in node.names if _inside(alias.name, top)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..a import b
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if _inside(base, top):
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in known else _resolve(base, known))
        for target in targets:
            found.setdefault(target, node.lineno)
    return found


def _inside(name: str, top: str) -> bool:
    return name == top or name.startswith(top + ".")


def import_graph(root: Path = PACKAGE) -> nx.DiGraph:
    """Module -> imported module, every edge with the ``line`` of its import (self-imports left out)."""
    known = modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, path in known.items():
        for target, line in imports(module, path, known, root.name).items():
            if target != module:
                graph.add_edge(module, target, line=line)
    return graph


# ---- the rules -------------------------------------------------------------------------------------------


def _contains(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """The import cycles, as sorted lists of modules (strongly connected components of two or more), once the
    edges from a package's ``__init__`` to its own submodules are left out (module docstring)."""
    kept = nx.DiGraph([(a, b) for a, b in graph.edges if not _contains(a, b)])
    return sorted(sorted(c) for c in nx.strongly_connected_components(kept) if len(c) > 1)


def imports_of_containing_packages(graph: nx.DiGraph) -> list[str]:
    """``module -> package (line n)`` for every module that imports a package containing it."""
    return [f"{a} -> {b} (line {d['line']})" for a, b, d in graph.edges(data=True) if _contains(b, a)]


def layer_of(module: str, layers=LAYERS) -> int:
    """The index in ``layers`` of the layer of ``module`` (by its top-level name; ``KeyError`` if none)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for index, (_, names) in enumerate(layers):
        if top in names:
            return index
    raise KeyError(f"{module}: its top-level name {top!r} is in no layer of LAYERS")


def upward_imports(graph: nx.DiGraph, layers=LAYERS) -> list[str]:
    """``module (layer) -> module (higher layer) (line n)`` for every import from a lower layer up."""
    out = []
    for a, b, data in graph.edges(data=True):
        low, high = layer_of(a, layers), layer_of(b, layers)
        if high > low:
            out.append(f"{a} ({layers[low][0]}) -> {b} ({layers[high][0]}) (line {data['line']})")
    return sorted(out)


# ---- the package -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_the_graph_sees_lazy_and_package_imports(graph):
    """The graph holds what the rules are checked on: imports inside functions, and ``from a import b``
    resolved to the module ``a.b`` when there is one."""
    assert graph.number_of_nodes() > 100
    assert graph.has_edge("mdsd.cli.decode", "mdsd.tree.decoder")  # imported inside run()
    # from mdsd.harness import experiment: the module, not the package
    assert graph.has_edge("mdsd.harness.methods", "mdsd.harness.experiment")
    assert graph.has_edge("mdsd.laws", "mdsd.race")  # from mdsd import race
    assert graph.has_edge("mdsd.tree", "mdsd.tree.decoder")  # a package gathering its names


def test_every_top_level_module_has_one_layer():
    tops = {name.split(".")[1] for name in modules() if "." in name}
    placed = [name for _, names in LAYERS for name in names]
    assert len(placed) == len(set(placed)), "a name is in two layers"
    assert tops <= set(placed), f"place these in LAYERS: {sorted(tops - set(placed))}"
    assert set(placed) - {"__init__"} <= tops, f"LAYERS names what mdsd lacks: {sorted(set(placed) - tops)}"


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_no_module_imports_a_package_that_contains_it(graph):
    """... the façade ``mdsd`` included: ``import mdsd`` inside a function of mdsd is refused."""
    assert imports_of_containing_packages(graph) == []


def test_no_import_from_a_lower_layer_up(graph):
    assert upward_imports(graph) == []


# ---- the checks can fail ---------------------------------------------------------------------------------


def test_the_checks_catch_a_cycle_an_upward_import_and_a_package_import(tmp_path):
    """On a package written here: a cycle a -> b -> a, a foundation importing the harness lazily, a module
    importing its own package; and the package's __init__ importing its submodules is no cycle."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg import a\nfrom pkg.sub import inner\n",
        "a.py": "import pkg.b\n",
        "b.py": "def f():\n    from pkg.a import name\n",
        "low.py": "def f():\n    from pkg.high import thing\n",
        "high.py": "from . import sub\n",
        "sub/__init__.py": "from pkg.sub.inner import x\n",
        "sub/inner.py": "import pkg.sub\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    graph = import_graph(root)
    assert graph.has_edge("pkg.high", "pkg.sub") and graph.has_edge("pkg.b", "pkg.a")  # relative, lazy
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert imports_of_containing_packages(graph) == ["pkg.sub.inner -> pkg.sub (line 1)"]
    layers = (("low", ("low", "a", "b", "sub")), ("high", ("high", "__init__")))
    assert upward_imports(graph, layers) == ["pkg.low (low) -> pkg.high (high) (line 2)"]
