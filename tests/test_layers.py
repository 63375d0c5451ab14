"""The layers contract: imports point one way (base <- facts <- records <- schedules/cost <-
search <- faces), checked over every import statement of the package, function bodies
included. Also: no private name crosses a module, and only the base layer imports TVM."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# folder of the source tree -> dotted package it installs as
SOURCES = {"tvm_ext": "tvm_ext", "schedules": "tvm_ext.schedules", "cost": "tvm_ext.cost"}
# dotted prefix -> (rank, group); a module may import ranks <= its own, never another group of
# the same rank (schedules and cost are siblings: neither imports the other).
LAYERS = {
    "tvm_ext.base": (0, "base"),
    "tvm_ext.facts": (1, "facts"),
    "tvm_ext.records": (2, "records"),
    "tvm_ext.schedules": (3, "schedules"),
    "tvm_ext.cost": (3, "cost"),
    "tvm_ext.search": (4, "search"),
    "tvm_ext.faces": (5, "faces"),
    "tvm_ext": (6, "facade"),  # tvm_ext/__init__.py: the public names, nothing below uses it
}
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


def test_the_contract_sees_every_layer():
    # A contract that matched nothing would pass on any tree.
    groups = {layer_of(m)[1] for m in MODULES}
    assert groups == {group for _, group in LAYERS.values()}
    assert len(MODULES) > 40


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
