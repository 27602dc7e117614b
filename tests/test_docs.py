"""Every Python code block in the README runs, and the docstring examples pass."""
import doctest
import importlib
import pathlib
import re

import pytest

import braze

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, restore_registry):
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {})


def test_readme_printed_graph_is_current(capsys):
    exec(compile(BLOCKS[0], "README.md block 0", "exec"), {})
    printed = capsys.readouterr().out.strip()
    assert f"```\n{printed}\n```" in README.read_text()


@pytest.mark.parametrize("name", ["braze", "braze.api", "braze.composite", "braze.numpy", "braze.autodiff"])
def test_docstring_examples(name):
    module = importlib.import_module(name)  # braze.composite the module, not the decorator
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
