"""The four packages import in one direction only:

    ndpkit_spec  <-  ndpkit_hw  <-  ndpkit_tools
         ^                              |
         +-------  ndpkit  <------------+

``ndpkit_spec`` (the specification) imports none of the others and no NumPy;
``ndpkit_hw`` (gateware) imports only the specification (no NumPy, no driver);
``ndpkit`` (driver, golden models) never imports the gateware or the tools.  No
package imports the benches and tests of ``tb/``, which a wheel does not ship.  Each
loading check runs in a fresh interpreter, importing every module of the package; the
source checks read every import statement, at the top of a module or inside a
function (which loading never runs), and every ``importlib.import_module("...")`` /
``__import__("...")`` of a module named in the source.

Inside the tools, the subpackages and top-level modules import one another without a
cycle; the board files and their resource model sit below the implementation flow and
its reports:

    ndpkit_tools.paths, ndpkit_tools.depth_clock  <-  boards  <-  impl  <-  bench, bitstream

Inside the driver (``ndpkit.`` left out), card memory is the bottom layer:

    errors  <-  memory  <-  engine  <-  engines.<name>.client
                  ^           ^
                  +-----------+-------  device   (the clients it builds come from the registry)

``ndpkit.memory`` (Buffer, address handling, the allocators) imports no other driver
module but ``ndpkit.errors``; the engine clients import neither ``ndpkit.device`` nor
another engine's modules (what they share is ``ndpkit.engines.common``); the driver's
imports, counting those inside functions, form no cycle; no module imports another's
private name.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

PROBE = textwrap.dedent("""
    import importlib, pkgutil, sys
    package, skip = sys.argv[1], tuple(sys.argv[2].split(",")) if sys.argv[2] else ()
    root = importlib.import_module(package)
    names = [n.name for n in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        if not name.startswith(skip or ("\\0",)):
            importlib.import_module(name)
    print(len(names), " ".join(sorted({m.split(".")[0] for m in sys.modules})))
""")


def _loaded(package: str, skip: str = "") -> tuple[int, set[str]]:
    run = subprocess.run([sys.executable, "-c", PROBE, package, skip], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    count, modules = run.stdout.split(maxsplit=1)
    return int(count), set(modules.split())


def test_spec_is_a_leaf():
    count, loaded = _loaded("ndpkit_spec")
    assert count >= 9
    assert not loaded & {"numpy", "amaranth", "ndpkit", "ndpkit_hw", "ndpkit_tools"}


def test_gateware_loads_neither_numpy_nor_the_driver():
    count, loaded = _loaded("ndpkit_hw")
    assert count >= 30
    assert not loaded & {"numpy", "ndpkit", "ndpkit_tools"}
    assert {"amaranth", "ndpkit_spec"} <= loaded


GLUE = "ndpkit.engines.adam.torch,ndpkit.engines.attention.torch,ndpkit.torch,ndpkit.engines.attention.hf,ndpkit.hf"
#: vLLM's backend imports vLLM, whose CPU build lives in its own environment (the vllm extra)
VLLM_GLUE = "ndpkit.vllm.backend"


@pytest.mark.parametrize("skip", [f"{GLUE},{VLLM_GLUE}", VLLM_GLUE], ids=["without-torch-glue", "with-torch-glue"])
def test_driver_loads_neither_gateware_nor_tools(skip):
    """With and without the PyTorch and transformers glue (the torch and llm extras)."""
    if skip == VLLM_GLUE:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    count, loaded = _loaded("ndpkit", skip)
    assert count >= 30
    assert not loaded & {"amaranth", "ndpkit_hw", "ndpkit_tools", "cocotb"}


def test_import_ndpkit_hw_alone_is_light():
    run = subprocess.run([sys.executable, "-c", "import sys, ndpkit_hw, ndpkit_hw.device; "
                          "print(sorted(m for m in ('numpy', 'ndpkit') if m in sys.modules))"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


# -- the source: every import statement ------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"ndpkit_spec": ROOT / "spec", "ndpkit_hw": ROOT / "hw", "ndpkit": ROOT / "sw",
           "ndpkit_tools": ROOT / "tools"}


class Import(NamedTuple):
    module: str          # the importing module
    target: str          # the module imported (``from a import b``: ``a.b`` when that is a module)
    name: str | None     # the name taken from ``target`` (None: the module itself)
    line: int
    in_function: bool    # inside a function: runs when the function is called, not at import


def _modules(package: str, root: Path | None = None) -> dict[str, Path]:
    base = root or SOURCES[package]
    out = {}
    for path in sorted((base / package).rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(package: str, root: Path | None = None) -> list[Import]:
    modules = _modules(package, root)
    found = []

    def walk(module, node, in_function):
        for child in ast.iter_child_nodes(node):
            named = _imported_by_call(child)
            if named:                   # importlib.import_module("a.b") / __import__("a.b")
                found.append(Import(module, named, None, child.lineno, in_function))
            if isinstance(child, ast.Import):
                found.extend(Import(module, a.name, None, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{module}:{child.lineno}: a relative import (the checks read absolute ones)"
                for a in child.names:
                    whole = f"{child.module}.{a.name}"
                    found.append(Import(module, whole, None, child.lineno, in_function) if whole in modules else
                                 Import(module, child.module, a.name, child.lineno, in_function))
            walk(module, child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    for module, path in modules.items():
        walk(module, ast.parse(path.read_text(), str(path)), False)
    return found


def _imported_by_call(node) -> str | None:
    """The module a call ``importlib.import_module("a.b")``, ``import_module("a.b")`` or
    ``__import__("a.b")`` imports, when it is named by a string in the source."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return node.args[0].value if name in ("import_module", "__import__") else None


def _top(name: str) -> str:
    return name.split(".")[0]


#: what each package's modules may not import, anywhere (``tb``: the benches and tests,
#: which a wheel does not ship)
FORBIDDEN = {"ndpkit_spec": {"numpy", "amaranth", "ndpkit", "ndpkit_hw", "ndpkit_tools", "tb"},
             "ndpkit_hw": {"numpy", "ndpkit", "ndpkit_tools", "tb"},
             "ndpkit": {"amaranth", "ndpkit_hw", "ndpkit_tools", "cocotb", "tb"},
             "ndpkit_tools": {"tb"}}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_statement_breaks_the_direction(package):
    """The loading checks above see the imports a module makes when it loads; this one
    reads every import statement, those inside functions too."""
    bad = _violations(package)
    assert not bad, bad


def _violations(package: str, root: Path | None = None) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}{' inside a function' if i.in_function else ''}"
            for i in _imports(package, root) if _top(i.target) in FORBIDDEN[package]]


def test_the_checks_see_imports_inside_functions(tmp_path):
    """The source check itself: a product module importing from ``tb`` fails it, at the
    top, inside a function, inside a method and through ``importlib`` (as
    ``ndpkit_tools.impl.arith_report`` once took ``tb.arith.fp_units`` in a function)."""
    package = tmp_path / "ndpkit_tools"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "clean.py").write_text("import json\nfrom ndpkit_tools import clean\n")
    (package / "bad.py").write_text(textwrap.dedent("""
        import importlib
        from tb.arith import fp_units

        def units():
            from tb.arith.fp_units import UNITS
            return UNITS

        class Report:
            def rows(self):
                import tb.engines.adam.adam_bench
                return importlib.import_module("tb.device.scaling_bench")
    """))
    found = _violations("ndpkit_tools", tmp_path)
    assert found == ["ndpkit_tools.bad:3 imports tb.arith", "ndpkit_tools.bad:6 imports tb.arith.fp_units inside a function",
                     "ndpkit_tools.bad:11 imports tb.engines.adam.adam_bench inside a function",
                     "ndpkit_tools.bad:12 imports tb.device.scaling_bench inside a function"], found


def _tools_unit(module: str) -> str:
    """A tools subpackage (``ndpkit_tools.boards``) or top-level module (``ndpkit_tools.paths``)."""
    return ".".join(module.split(".")[:2])


def _tools_graph(root: Path | None = None) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for i in _imports("ndpkit_tools", root):
        a, b = _tools_unit(i.module), _tools_unit(i.target)
        if _top(i.target) == "ndpkit_tools" and a != b:
            graph.setdefault(a, set()).add(b)
    return graph


def test_tools_subpackages_form_no_cycle():
    """Counting imports inside functions: ``boards`` and ``impl`` once imported each other
    (the board builds' clock bound took the depth model from ``impl.clock``, whose report
    reads the boards; the bitstream command lived in ``boards`` and called ``impl``'s
    ECP5 build).  The depth model is ``ndpkit_tools.depth_clock`` now, below both, and
    ``make bitstream`` is ``ndpkit_tools.bitstream``, above both."""
    graph = _tools_graph()
    assert _cycles(graph) == []
    assert "ndpkit_tools.impl" not in graph.get("ndpkit_tools.boards", set())
    assert "ndpkit_tools.boards" in graph["ndpkit_tools.impl"]         # the direction that stands
    assert graph.get("ndpkit_tools.depth_clock", set()) == set()


def _driver_graph(root: Path | None = None) -> dict[str, set[str]]:
    """Driver module -> the driver modules it imports anywhere (a package's own
    ``__init__``, which Python runs before any of its modules, is not counted as an
    edge: it imports the driver's public names from below)."""
    graph: dict[str, set[str]] = {m: set() for m in _modules("ndpkit", root)}
    for i in _imports("ndpkit", root):
        if _top(i.target) == "ndpkit" and i.target != i.module:
            graph[i.module].add(i.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_driver_imports_form_no_cycle():
    """Counting imports inside functions: a cycle hidden in a function is still a cycle
    (``ndpkit.device`` and ``ndpkit.engine`` once imported each other that way)."""
    assert _cycles(_driver_graph()) == []


def _closure(graph, start):
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def test_memory_is_the_driver_bottom():
    """Buffer, address handling and the allocators import no other driver module but
    ``ndpkit.errors`` (which imports only the specification)."""
    graph = _driver_graph()
    assert graph["ndpkit.memory"] == {"ndpkit.errors"}
    assert graph["ndpkit.errors"] == set()
    assert _closure(graph, "ndpkit.memory") == {"ndpkit.memory", "ndpkit.errors"}
    others = {_top(i.target) for i in _imports("ndpkit") if i.module in ("ndpkit.memory", "ndpkit.errors")}
    assert others <= {"ndpkit", "ndpkit_spec", "numpy", "bisect", "__future__"}


def _engine_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["ndpkit", "engines"] else None


def test_engine_clients_sit_on_memory_not_on_the_device():
    """``ndpkit.engine`` and every engine client take Buffer and address handling from
    ``ndpkit.memory``, never from ``ndpkit.device`` (which imports them); a client takes
    nothing from another engine's folder (shared helpers are ``ndpkit.engines.common``)."""
    imports = _imports("ndpkit")
    clients = {i.module for i in imports if i.module.endswith(".client") and _engine_of(i.module)}
    assert len(clients) >= 6
    bad = [f"{i.module}:{i.line} imports {i.target}" for i in imports
           if i.module in clients | {"ndpkit.engine"} and
           (i.target == "ndpkit.device" or _engine_of(i.target) not in (None, _engine_of(i.module)))]
    assert not bad, bad
    assert any(i.module == "ndpkit.engine" and i.target == "ndpkit.memory" for i in imports)


#: the driver's core (device, protocol, memory, clients, golden models) imports driver
#: modules at the top; these function-level imports are the exceptions, each for a reason
LAZY_IN_CORE = {
    # ndpkit.open imports the one transport its URI names (each brings what it alone
    # needs: the sim transport's process handling, the model's golden models, device files)
    ("ndpkit.device", "ndpkit.transport.model"), ("ndpkit.device", "ndpkit.transport.sim"),
    ("ndpkit.device", "ndpkit.transport.uart"), ("ndpkit.device", "ndpkit.transport.xdma"),
}


def _core(module: str) -> bool:
    return module in ("ndpkit.memory", "ndpkit.errors", "ndpkit.transfer", "ndpkit.engine", "ndpkit.device",
                      "ndpkit.engines.common") or \
        bool(_engine_of(module)) and module.rsplit(".", 1)[1] in ("client", "golden")


def test_the_driver_core_imports_at_the_top():
    """No driver import hidden in a function of the core (the engine clients once had
    eight, there only because of the device/engine cycle); heavy optional packages
    (torch, scipy, networkx, transformers, pyserial) stay lazy in the integrations."""
    bad = [f"{i.module}:{i.line} imports {i.target} inside a function" for i in _imports("ndpkit")
           if i.in_function and _core(i.module) and _top(i.target) in ("ndpkit", "ndpkit_spec") and
           (i.module, i.target) not in LAZY_IN_CORE]
    assert not bad, bad


def test_no_private_name_crosses_modules():
    """A helper two modules share has a public name (``decomp`` once took ``adam``'s ``_fmt``)."""
    bad = [f"{i.module}:{i.line} takes {i.target}.{i.name}" for i in _imports("ndpkit")
           if _top(i.target) in ("ndpkit", "ndpkit_spec") and i.name and i.name.startswith("_")
           and not i.name.startswith("__")]
    assert not bad, bad


def test_moved_names_keep_their_old_homes():
    """``Buffer`` and the allocators moved to ``ndpkit.memory``; user code importing them
    from ``ndpkit.device`` (or ``ndpkit``) keeps working."""
    import ndpkit
    import ndpkit.device
    import ndpkit.memory
    for name in ("Buffer", "Allocator", "RegionAllocator"):
        assert getattr(ndpkit.device, name) is getattr(ndpkit.memory, name)
        assert name in ndpkit.device.__all__
    assert ndpkit.Buffer is ndpkit.memory.Buffer
