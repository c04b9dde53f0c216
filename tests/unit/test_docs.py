"""The code in the README runs and prints what the README says it prints.

Blocks fenced ```python are executed; blocks fenced ```py are illustrations that need a Spark
session and real paths (the Spark tests cover what they show).
"""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_examples_run_and_print_what_they_claim():
    blocks = python_blocks(README.read_text())
    assert blocks, "the README lost its example"
    for block in blocks:
        lines = block.splitlines()
        prints = [i for i, line in enumerate(lines) if line.startswith("print(")]
        after = lines[prints[-1] + 1 :] if prints else []
        claimed = "\n".join(line[1:] for line in after if line.startswith("#"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), {})  # noqa: S102 - our own README
        if claimed:
            assert " ".join(out.getvalue().split()) == " ".join(claimed.split())
