"""The README's Python example runs as written."""

import re

from tests.conftest import ROOT


def test_readme_python_example_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    exec(compile(example, "README.md", "exec"), {})
    output = capsys.readouterr().out
    assert "weights=" in output and "tok/s" in output
