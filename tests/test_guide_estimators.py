"""docs/guides/estimators.md: every ```python block runs as printed, top to bottom, in one namespace."""

import pathlib
import re

GUIDE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "estimators.md"


def test_guide_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert blocks
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{GUIDE.name}[block {i}]", "exec"), namespace)  # noqa: S102
