"""The README's Python example runs as written."""

import re

from tests.conftest import ROOT


def test_readme_python_example_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    exec(compile(example, "README.md", "exec"), {})
    output = capsys.readouterr().out
    assert "weights=" in output and "tok/s" in output


def test_the_api_docs_history_example_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    api = (ROOT / "docs" / "api.md").read_text()
    section = api[api.index("## Recording answers in the history") :]
    example = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    names: dict = {}
    exec(compile(example, "docs/api.md", "exec"), names)
    stored = names["history"].load(names["record"].chat_id).turns
    assert [turn.role for turn in stored] == ["user", "assistant"] and stored[0].content == "What is six times seven?"
    answer = stored[1]
    assert answer.content and answer.final is not None and answer.final.text == answer.content
    assert len(answer.rounds) == answer.final.rounds > 0
    printed = capsys.readouterr().out
    assert printed.startswith(answer.content) and "seven" in printed[len(answer.content) :]
    assert names["history"].path == tmp_path / "specem.db"
