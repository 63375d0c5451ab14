"""The layers contract: imports point one way, checked over every import statement of the
package, function bodies included, and no module reaches itself through its imports (no import
cycles, lazy imports and ``TYPE_CHECKING`` blocks included). The package's own modules import
each other only at the top of a module; an import inside a function (of a library) says why on
its line. Also: no private name crosses a module, and only the base layer imports TVM.

The layers, bottom up: ``base`` (the door to TVM, errors, files) and ``built_code`` (readers of
built assembly and LLVM IR) <- ``hardware`` (targets, ISA tables, the machine model) and
``workloads`` (the kernel suite, the model zoo) <- ``measurement`` (build, parity, time) <-
``records`` (every on-disk format) <- ``schedules`` / ``cost`` <- ``kernel_tuner`` <-
``model_pipeline`` <- ``commands`` (cli, lab) <- the facade (``tvm_ext/__init__.py``).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# folder of the source tree -> dotted package it installs as
SOURCES = {"tvm_ext": "tvm_ext", "schedules": "tvm_ext.schedules", "cost": "tvm_ext.cost"}
# dotted prefix -> (rank, group); a module may import ranks <= its own, never another group of
# the same rank (siblings: base and built_code, hardware and workloads, schedules and cost).
LAYERS = {
    "tvm_ext.base": (0, "base"),
    "tvm_ext.built_code": (0, "built_code"),
    "tvm_ext.hardware": (1, "hardware"),
    "tvm_ext.workloads": (1, "workloads"),
    "tvm_ext.measurement": (2, "measurement"),
    "tvm_ext.records": (3, "records"),
    "tvm_ext.schedules": (4, "schedules"),
    "tvm_ext.cost": (4, "cost"),
    "tvm_ext.kernel_tuner": (5, "kernel_tuner"),
    "tvm_ext.model_pipeline": (6, "model_pipeline"),
    "tvm_ext.commands": (7, "commands"),
    "tvm_ext": (8, "facade"),  # tvm_ext/__init__.py: the public names, nothing below uses it
}
# Inside schedules/, by kind: shared pieces and intrinsics <- hand schedules and teaching <-
# IR rules (the suite rule hands a suite kernel to its hand schedule).
SCHEDULE_KINDS = {"common": 0, "intrinsics": 0, "hand": 1, "teaching": 1, "rules": 2}
TVM_PACKAGES = ("tvm", "tvm_ffi")


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for folder, package in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            dotted = ".".join((package, *parts))
            found[dotted.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> tuple[int, str]:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    raise KeyError(module)


def _imports(module: str, path: pathlib.Path):
    """(line, imported module, imported name or None) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                yield node.lineno, source, alias.name


def _edges():
    """(importer, line, imported module, name) with ``from pkg import submodule`` resolved."""
    for module, path in MODULES.items():
        for line, source, name in _imports(module, path):
            if name is not None and f"{source}.{name}" in MODULES:
                yield module, path, line, f"{source}.{name}", None
            else:
                yield module, path, line, source, name


def _nested_imports(path: pathlib.Path):
    """Import statements inside a function body (not at a module's top, where ``if
    TYPE_CHECKING:`` and ``try:`` blocks also sit)."""
    tree = ast.parse(path.read_text(), str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                yield child
            yield from visit(child, inside or isinstance(child, functions))

    yield from visit(tree, False)


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its file)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, _, _, target, _ in _edges():
        if target in MODULES and target != module:
            graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_contract_sees_every_layer():
    # A contract that matched nothing would pass on any tree.
    groups = {layer_of(m)[1] for m in MODULES}
    assert groups == {group for _, group in LAYERS.values()}
    assert len(MODULES) > 40
    kinds = {m.split(".")[2] for m in MODULES if m.count(".") >= 3 and ".schedules." in m}
    assert set(SCHEDULE_KINDS) - {"common"} <= kinds


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "modules that import each other in a circle:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_cycle_finder_finds_cycles():
    # A contract that could not see a cycle would pass on any tree.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_package_modules_are_imported_at_the_top():
    # An import of our own module inside a function hides a cycle or an upward import.
    nested = []
    for module, path in MODULES.items():
        for node in _nested_imports(path):
            names = [a.name for a in node.names]
            source = node.module or "" if isinstance(node, ast.ImportFrom) else names[0]
            if getattr(node, "level", 0) or source == "tvm_ext" or source.startswith("tvm_ext."):
                nested.append(f"{path.relative_to(ROOT)}:{node.lineno}: {source} {names}")
    assert not nested, "imports of the package inside functions:\n" + "\n".join(nested)


def test_a_library_imported_inside_a_function_says_why():
    # Only an optional or heavy dependency (torch, xgboost, pandas) is imported late, and the
    # line says so.
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        for node in _nested_imports(path):
            if not any("#" in lines[n - 1] for n in range(node.lineno, node.end_lineno + 1)):
                silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not silent, "imports inside functions without a reason:\n" + "\n".join(silent)


def test_schedule_kinds_point_down():
    against = []
    for module, path, line, target, _ in _edges():
        parts, to = module.split("."), target.split(".")
        if parts[:2] != ["tvm_ext", "schedules"] or to[:2] != ["tvm_ext", "schedules"]:
            continue
        if len(parts) < 3 or len(to) < 3 or parts[2] == to[2]:
            continue  # the package's own __init__ gathers every kind
        if SCHEDULE_KINDS[to[2]] >= SCHEDULE_KINDS[parts[2]]:
            against.append(f"{path.relative_to(ROOT)}:{line}: {parts[2]} imports {target}")
    assert not against, "\n".join(against)


def test_imports_point_down_the_layers():
    violations = []
    for module, path, line, target, _ in _edges():
        if not (target == "tvm_ext" or target.startswith("tvm_ext.")) or target == module:
            continue
        (rank, group), (to_rank, to_group) = layer_of(module), layer_of(target)
        if to_rank > rank or (to_rank == rank and to_group != group):
            violations.append(f"{path.relative_to(ROOT)}:{line}: {group} imports {target}")
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_no_private_name_crosses_a_module():
    crossing = []
    for module, path, line, target, name in _edges():
        if not target.startswith("tvm_ext"):
            continue
        private_module = any(p.startswith("_") for p in target.split("."))
        if private_module or (
            name is not None
            and name.startswith("_")
            and not name.startswith("__")
            and target != module
        ):
            crossing.append(f"{path.relative_to(ROOT)}:{line}: {target} {name or ''}")
    assert not crossing, "private names used by another module:\n" + "\n".join(crossing)


def test_only_the_base_layer_imports_tvm():
    direct = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for module, path, line, target, _ in _edges()
        if target.split(".")[0] in TVM_PACKAGES and layer_of(module)[1] != "base"
    ]
    assert not direct, "TVM reached around tvm_ext.base.tvm_api:\n" + "\n".join(direct)


@pytest.mark.parametrize("folder", ["tests", "bench", "notebooks"])
def test_faces_use_public_names(folder):
    # Tests, benchmarks and notebooks are users: they reach the package by its public names.
    bad = []
    for path in sorted((ROOT / folder).glob("*.py")):
        for line, source, name in _imports(path.stem, path):
            if source.startswith("tvm_ext") and (
                any(p.startswith("_") for p in source.split(".")) or (name or "").startswith("_")
            ):
                bad.append(f"{path.name}:{line}: {source} {name}")
    assert not bad, "\n".join(bad)


def test_the_door_is_used_by_its_names():
    # `tvm_api.tvm.<x>` would reach TVM's moving internals around the names the door gives.
    around = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in MODULES.values()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "tvm_api.tvm." in line
    ]
    assert not around, "\n".join(around)
