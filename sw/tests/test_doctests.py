"""Every docstring example in the four packages runs (``doctest``), and every code
example in README.md and docs/ too."""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ndpkit_spec", "ndpkit_hw", "ndpkit", "ndpkit_tools")


def _modules():
    for package in PACKAGES:
        root = importlib.import_module(package)
        yield package
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            yield info.name


def _has_examples(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and ">>>" in Path(spec.origin).read_text()


MODULES = [name for name in _modules() if _has_examples(name)]


def test_examples_are_found():
    assert {"ndpkit.device", "ndpkit.regs.access", "ndpkit_spec.registry", "ndpkit_hw.arith.dataflow"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "engines").glob("*.md"))]
_BLOCK = re.compile(r"(<!-- sketch: [^>]+-->\n)?```python\n(.*?)```", re.S)


def _doc_blocks():
    for path in DOCS:
        text = path.read_text()
        for n, match in enumerate(_BLOCK.finditer(text)):
            line = text[:match.start(2)].count("\n") + 1
            yield pytest.param(path, line, match.group(2), bool(match.group(1)),
                               id=f"{path.relative_to(ROOT)}:{line}")


def test_every_doc_has_its_examples_found():
    found = {p.values[0].name for p in _doc_blocks()}
    assert {"README.md", "driver.md", "adam.md", "attention.md", "graph.md", "sg.md"} <= found


@pytest.mark.filterwarnings("ignore:Note. conversions to backend graphs are saved")
@pytest.mark.parametrize("path, line, code, sketch", list(_doc_blocks()))
def test_doc_example_runs(path, line, code, sketch, tmp_path, monkeypatch):
    """Every ```python block in README.md and docs/ runs as written, on the model card
    where it says "sim" (the same API; the device suite runs both).  A block marked
    ``<!-- sketch: why -->`` is a template with ``...`` to fill in, not an example."""
    if sketch:
        assert "..." in code, "a sketch is a template with parts to fill in; anything else must run"
        pytest.skip("a template (<!-- sketch -->)")
    monkeypatch.chdir(tmp_path)
    code = re.sub(r'ndpkit\.open\((["\'])sim', r"ndpkit.open(\1model", code)
    exec(compile(code, f"{path.name}:{line}", "exec"), {"__name__": "__doc_example__"})
