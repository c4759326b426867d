"""The layout shows the architecture: no module of this project imports, directly or not, a module that
imports it back, and every arrow between rooms descends (ALLOWED), counting every import (at module level, inside
functions, and for type checking only)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("automation", "fleet", "workloads", "components", "infra")


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names] \
                if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


# The rooms, top to bottom, and the rooms each may import (besides itself). A module's room is the longest entry
# of ROOMS that names it or a package above it. infra/ is only the Pulumi program's entry point: nothing imports it.
# The base of automation/ is what every room of it may use: the automation error and the Pulumi CLI's
# (automation/errors.py), the project names, the certificates, and the engine toolchain's finder (it imports nothing
# of the project).
BASE = ("automation", "automation.errors", "automation.projects", "automation.certificates",
        "automation.local.toolchain")
ROOMS = {name: "automation.base" for name in BASE} | {
    name: name for name in ("fleet", "workloads", "components", "infra", "automation.record", "automation.planning",
                            "automation.execution", "automation.capacity", "automation.checks", "automation.local",
                            "automation.operator",
                            "automation.road", "automation.portal", "automation.cli")}
PURE = {"fleet", "workloads"}  # no Pulumi there
ALLOWED: dict[str, set[str]] = {
    "fleet": set(),
    "workloads": {"fleet"},
    "components": {"workloads", "fleet"},
    "automation.base": {"fleet"},
    "automation.record": {"automation.base", "workloads", "fleet"},
    "automation.planning": {"automation.base", "components", "workloads", "fleet"},
    "automation.execution": {"automation.planning", "automation.record", "automation.base", "components",
                             "workloads", "fleet"},
    # live capacity: reads the clusters (the execution room's Kubernetes client) for the scheduler
    "automation.capacity": {"automation.execution", "automation.planning", "automation.record", "automation.base",
                            "components", "workloads", "fleet"},
    "automation.checks": {"automation.execution", "automation.planning", "automation.record", "automation.base",
                          "components", "workloads", "fleet"},
    "automation.local": {"automation.execution", "automation.planning", "automation.record", "automation.base",
                         "components", "workloads", "fleet"},
    "automation.operator": {"automation.execution", "automation.planning", "automation.record", "automation.base",
                            "components", "workloads", "fleet"},
    # the one road of every entry point: open an executor (local or operator) and run the preflight
    "automation.road": {"automation.operator", "automation.checks", "automation.execution", "automation.planning",
                        "automation.record", "automation.base", "components", "workloads", "fleet"},
    "automation.portal": {"automation.road", "automation.capacity", "automation.operator", "automation.checks", "automation.execution",
                          "automation.planning", "automation.record", "automation.base", "components", "workloads",
                          "fleet"},
    "automation.cli": {"automation.road", "automation.portal", "automation.operator", "automation.local",
                       "automation.capacity",
                       "automation.checks",
                       "automation.execution", "automation.planning", "automation.record", "automation.base",
                       "components", "workloads", "fleet"},
    "infra": {"automation.execution", "automation.planning", "components", "workloads", "fleet"},
}
# Climbing imports that are known and owed, each with why it is still there. The test fails on any other climbing
# import, and on an entry here that no longer climbs (so the list only shrinks).
OWED: dict[tuple[str, str], str] = {}


def room(module: str) -> str:
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        if ".".join(parts[:length]) in ROOMS:
            return ROOMS[".".join(parts[:length])]
    raise AssertionError(f"{module} is in no room of tests/test_layout.py ROOMS")


def climbing(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import from one room into another that ALLOWED does not list."""
    return sorted((source, target) for source, targets in graph.items() for target in targets
                  if room(source) != room(target) and room(target) not in ALLOWED[room(source)])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    found = cycles(import_graph())
    assert found == [], "\n".join(" <-> ".join(group) for group in found)


def test_the_allowed_arrows_only_descend():
    """The table itself has no cycle between rooms: each arrow it allows goes down."""
    assert cycles({name: set(targets) for name, targets in ALLOWED.items()}) == []
    assert set(ROOMS.values()) == set(ALLOWED)


def test_the_arrow_check_reports_a_climbing_import():
    graph = {"fleet.plan": {"fleet.names"}, "fleet.names": set(), "workloads.render": {"fleet.plan"},
             "automation.record.applied": {"automation.errors", "workloads.render"},
             "automation.errors": {"automation.local.toolchain"}, "automation.local.toolchain": set()}
    assert climbing(graph) == []
    graph["automation.record.applied"].add("automation.execution.runner")  # the record climbing into execution
    graph["automation.execution.runner"] = set()
    graph["fleet.names"].add("components.args")  # the pure core climbing into Pulumi components
    graph["components.args"] = set()
    assert climbing(graph) == [("automation.record.applied", "automation.execution.runner"),
                               ("fleet.names", "components.args")]


def test_every_arrow_between_rooms_descends():
    found = climbing(import_graph())
    new = [f"{source} -> {target}" for source, target in found if (source, target) not in OWED]
    assert new == [], "imports that climb (tests/test_layout.py ALLOWED):\n" + "\n".join(new)
    assert sorted(set(OWED) - set(found)) == [], "OWED lists imports that no longer climb: remove them"


def test_the_pure_core_imports_no_pulumi():
    for package in PURE:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not [n for n in names if n.split(".")[0] == "pulumi"], f"{path.relative_to(ROOT)} imports pulumi"
