#!/usr/bin/env python3
"""Prints the import graph between Slipway's top-level modules (src/<m>.rs and src/<m>/**) and
any cycle in it; exits 1 when there is a cycle. Usage: python3 scripts/module_cycles.py [-v]

A reference is any `crate::<module>` path in a module's non-test code (code after the first
`#[cfg(test)]` of a file is left out, as are files named tests.rs or *_tests.rs)."""
import os, re, sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def module_of(path):
    rel = os.path.relpath(path, SRC)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def graph():
    edges = {}
    for root, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            path = os.path.join(root, name)
            module = module_of(path)
            if module in ("main", "lib"):
                continue
            text = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
            targets = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
            # `use crate::{a, b::c}` groups
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                targets |= set(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
            edges.setdefault(module, set()).update(t for t in targets if t != module)
    return edges


def cycles(edges):
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in edges:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


if __name__ == "__main__":
    edges = graph()
    if "-v" in sys.argv:
        for module in sorted(edges):
            print(f"{module} -> {', '.join(sorted(t for t in edges[module] if t in edges))}")
    found = cycles(edges)
    for component in found:
        print("cycle among:", " ".join(component))
    if not found:
        print(f"no cycles among {len(edges)} top-level modules")
    sys.exit(1 if found else 0)
