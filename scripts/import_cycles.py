"""Import circles in ``src/sweeps``: every strongly connected group of modules (imports inside
functions count: grimp reads them too), and the same between the packages of ``src/sweeps`` (tracking: between its boxes).

    PYTHONPATH=src python scripts/import_cycles.py     # exit 1 when a circle is found

A package's ``__init__`` importing its own modules is not a circle of concern and is skipped.
"""
from __future__ import annotations

import sys

import grimp


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): groups of more than one node, or a node importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in edges.get(node, ()):
                    groups.append(sorted(group))
    return groups


def package_of(module: str) -> str:
    """The package a module counts under: ``sweeps.<package>``, or for tracking, its box
    (``sweeps.tracking.<box>``); a top-level module (``sweeps.names``) is its own."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1] == "tracking" and len(parts) > 3 else parts[:2])


def main() -> int:
    graph = grimp.build_graph("sweeps", cache_dir=None)  # a cache can hold modules since moved
    modules = {m for m in graph.modules if m.startswith("sweeps")}
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules and not m.startswith(i + ".")}
             for m in modules}  # a package's __init__ importing its own module is not a circle
    found = strongly_connected(modules, edges)
    parts = {m: package_of(m) for m in modules if m.count(".") >= 1}
    part_edges: dict[str, set[str]] = {}
    for m, targets in edges.items():
        if m in parts:
            part_edges.setdefault(parts[m], set()).update(parts[t] for t in targets if t in parts and parts[t] != parts[m])
    part_groups = strongly_connected(set(parts.values()), part_edges)
    print(f"{len(modules)} modules, {sum(map(len, edges.values()))} imports; packages: "
          f"{', '.join(sorted(set(parts.values())))}")
    for group in found:
        print("module circle:", " <-> ".join(group))
    for group in part_groups:
        print("package circle:", " <-> ".join(group))
    print(f"{len(found)} module circle(s), {len(part_groups)} package circle(s)")
    return 1 if found or part_groups else 0


if __name__ == "__main__":
    sys.exit(main())
