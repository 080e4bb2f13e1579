"""Every docstring example in the four packages runs (``doctest``), and the README's
driver example too."""
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


def test_readme_driver_example_runs_on_the_model_card():
    """The README's 'driver in five lines', on the model card (the sim card is the same API)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## The driver in five lines\n\n```python\n(.*?)```", text, re.S).group(1)
    assert 'ndpkit.open("sim")' in block
    exec(compile(block.replace('ndpkit.open("sim")', 'ndpkit.open("model")'), "README.md", "exec"), {})
