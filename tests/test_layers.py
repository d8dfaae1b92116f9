"""The package's layers hold: every module's imports (module level and inside functions, read with
``ast``) go to its own layer or a lower one, and no two modules import each other, directly or
through others (docs/architecture.md).

Layers, lowest first: ``kernels`` (with ``_version``) < ``launch`` < ``jit`` < ``selection`` <
``front`` < ``apps`` = ``integrations`` (application level: ``integrations`` holds the adapters to
other libraries, e.g. Hugging Face transformers) < the package's door (``kernelgen/__init__.py``, ``__main__.py``).
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kernelgen"
#: Subpackage -> layer, lowest first.
LAYERS = {"kernels": 0, "launch": 1, "jit": 2, "selection": 3, "front": 4, "apps": 5, "integrations": 5}
DOOR = 6


def module_name(path: Path) -> str:
    parts = ["kernelgen", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    parts = module.split(".")
    if module == "kernelgen._version":
        return LAYERS["kernels"]
    if len(parts) == 1 or parts[1] == "__main__":
        return DOOR
    return LAYERS[parts[1]]


def _resolve(module: str, node) -> list:
    """The kernelgen modules an import statement in ``module`` loads (a subpackage's __init__ too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "kernelgen"]
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    if node.level:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "kernelgen":
        return []
    found = []
    for a in node.names:  # ``from pkg import module`` names a module; ``from module import name`` does not
        found.append(f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target)
    return found


def _dynamic(node) -> str | None:
    """The kernelgen module a call ``importlib.import_module("kernelgen...")`` or
    ``__import__("kernelgen...")`` names with a string literal (its nearest existing package for a
    name that is not a module), else None."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] == "kernelgen"):
        return None
    target = arg.value
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def imports(module: str) -> set:
    tree = ast.parse(MODULES[module].read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(m for m in _resolve(module, node) if m != module)
        elif isinstance(node, ast.Call) and _dynamic(node) not in (None, module):
            out.add(_dynamic(node))
    return out


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_has_a_layer_and_the_layers_are_there():
    assert {m.split(".")[1] for m in MODULES if m.count(".") >= 1} >= set(LAYERS)
    assert all(0 <= layer(m) <= DOOR for m in MODULES)
    flat = [m for m in MODULES if m.count(".") == 1 and m.split(".")[1] not in (*LAYERS, "_version", "__main__")]
    assert flat == [], f"modules outside the layers: {flat}"
    assert all(dst in MODULES for deps in GRAPH.values() for dst in deps), "an import of a missing module"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down(module):
    up = sorted(d for d in GRAPH[module] if layer(d) > layer(module))
    assert up == [], f"{module} (layer {layer(module)}) imports higher layers: " + \
        ", ".join(f"{d} ({layer(d)})" for d in up)


def test_subpackage_doors_import_nothing():
    """``kernelgen/<layer>/__init__.py`` holds a docstring only: importing one module of a layer
    loads nothing else of it."""
    for name in LAYERS:
        assert GRAPH[f"kernelgen.{name}"] == set(), name


def test_no_import_cycles():
    """Depth-first search for a back edge; the message names the cycle."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(GRAPH[m]):
            if state.get(d) == "open":
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_the_checker_sees_function_local_and_relative_imports():
    """The walk finds imports inside functions, resolves relative ones, and names a module imported
    from its package (``from ..jit import runtime``)."""
    assert GRAPH["kernelgen.__main__"] == {"kernelgen.apps.cli"}
    assert "kernelgen.jit.cache" in GRAPH["kernelgen.jit.runtime"]  # inside _load
    assert "kernelgen.jit.runtime" in GRAPH["kernelgen.front.api"]
    assert "kernelgen.kernels.spec" in GRAPH["kernelgen.kernels.device"]


def test_the_checker_sees_imports_by_name():
    """``importlib.import_module("kernelgen.front.api")`` (or ``__import__``) in a lower layer is an
    import like any other: it would load the higher layer just the same."""
    tree = ast.parse("def f():\n    import importlib\n    return importlib.import_module('kernelgen.front.api')\n"
                     "def g():\n    return __import__('kernelgen.selection.nothing_here')\n")
    found = {_dynamic(n) for n in ast.walk(tree) if isinstance(n, ast.Call)} - {None}
    assert found == {"kernelgen.front.api", "kernelgen.selection"}
