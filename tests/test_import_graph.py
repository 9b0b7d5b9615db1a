"""No import circle in esgexp, and its layers as docs/architecture.md draws them: the graph of every import (top
level, inside functions, under TYPE_CHECKING; not a module's ``if __name__ == "__main__":`` block, which never
runs on import), read with ast. The layers are the contract of pyproject.toml that ``lint-imports`` checks."""

import ast
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")

PACKAGE = Path(__file__).resolve().parent.parent / "esgexp"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.Module, package: str) -> set[str]:
    """The dotted names a module's imports name (``from a import b``: ``a`` and ``a.b``)."""
    main_blocks = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    skipped = {id(inner) for block in main_blocks for inner in ast.walk(block)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = {owner(n) for n in imported(ast.parse(path.read_text(encoding="utf-8")), package)}
        graph[name] = {n for n in found if n and n != name and n.startswith("esgexp")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
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


def test_no_module_of_esgexp_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def contract() -> dict:
    return tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
        "contracts"
    ][0]


def layer_of() -> dict[str, int]:
    """Each layer's module -> its level (0: the top), from the layers contract."""
    return {name.strip(): level for level, line in enumerate(contract()["layers"]) for name in line.split("|")}


def group(module: str, levels: dict[str, int]) -> str | None:
    """The layer a module belongs to; None for a command-line entry (a ``__main__`` module, a ``python -m
    esgexp.<command>`` form at the top level), which nothing imports."""
    if module.endswith("__main__"):
        return None
    parts = module.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in levels), None)


def edges_up(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports (layer -> layer) that point up a level."""
    levels = layer_of()
    found = set()
    for source, targets in graph.items():
        low = group(source, levels)
        for target in targets:
            high = group(target, levels)
            if low and high and levels[high] < levels[low]:
                found.add((low, high))
    return found


def test_every_package_of_esgexp_is_in_a_layer():
    packages = {f"esgexp.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert packages - set(layer_of()) == set()


def test_no_import_points_up_a_level_but_the_task_kind_registry_lookup():
    """The one edge up is the settings check asking the task-kind registry (documented in ignore_imports)."""
    assert edges_up(import_graph()) == {("esgexp.jobs", "esgexp.tasks")}
    assert "esgexp.jobs.settings -> esgexp.tasks.kinds" in contract()["ignore_imports"]


def test_the_ground_floor_imports_nothing_above_it():
    below = {"esgexp.core", "esgexp.errors"}
    graph = import_graph()
    assert {target for name in graph if name.startswith("esgexp.core") for target in graph[name]} <= {
        name for name in graph if name.startswith(tuple(below))
    }
