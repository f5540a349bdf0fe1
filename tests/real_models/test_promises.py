"""Promises the docs make that no test ran for real before: ``--no-log`` and ``SPECEM_NO_LOG``
(for ``specem run`` and ``specem serve``: ``serve`` ignored the variable), the
``system_prompt`` reaching every member's prompt, and a ``chat_template`` override (``"plain"``
or a Jinja template) being the one used."""

from __future__ import annotations

import dataclasses
import json

import openai
import pytest

from specem_local.engine import Ensemble
from specem_research.load import start_server
from tests.conftest import demo_config, stop_process
from tests.real_models.test_cli import specem


def chats(data) -> list[dict]:
    listed = specem("history", "list", "--json", env={"SPECEM_DATA_DIR": str(data)})
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@pytest.mark.parametrize(
    ("args", "env", "kept"), [(["--no-log"], {}, 0), ([], {"SPECEM_NO_LOG": "1"}, 0), ([], {"SPECEM_NO_LOG": "0"}, 1)]
)
def test_run_records_nothing_when_asked(tmp_path, args, env, kept):
    result = specem("run", *args, "--max-tokens", "6", "Say hi.", env={"SPECEM_DATA_DIR": str(tmp_path), **env})
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
    assert len(chats(tmp_path)) == kept


@pytest.mark.parametrize(("args", "env"), [(["--no-log"], {}), ([], {"SPECEM_NO_LOG": "1"})])
def test_serve_records_nothing_when_asked(tmp_path, args, env):
    process, base = start_server(*args, env={"SPECEM_DATA_DIR": str(tmp_path), **env})
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="specem", messages=[{"role": "user", "content": "Say hi."}], max_tokens=6
        )
        assert reply.choices[0].message.content
    finally:
        stop_process(process, 30)
    assert chats(tmp_path) == []


def test_the_system_prompt_and_template_overrides_reach_each_members_prompt():
    template = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}<<assistant>>"
    config = demo_config(max_tokens=8, greedy=True)
    overrides = {"gemma-3-270m": template, "smollm2-135m": "plain"}
    models = tuple(dataclasses.replace(m, chat_template=overrides.get(m.name)) for m in config.models)
    with Ensemble.from_config(dataclasses.replace(config, models=models)) as ensemble:
        prompts: dict[str, str] = {}
        for member in ensemble.members:
            start = member.start

            def capture(tokens, *rest, member=member, start=start):
                prompts[member.name] = b"".join(member.model.token_bytes(t) for t in tokens).decode()
                return start(tokens, *rest)

            member.start = capture
        final = ensemble.generate("Name a colour.", system_prompt="You are Zorblax, a terse pirate.")
    assert final.text
    qwen, gemma, smol = (prompts[name] for name in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"))
    # its own template (ChatML; the special tokens themselves have no text)
    assert "system\nYou are Zorblax, a terse pirate.\nuser\nName a colour.\nassistant\n" in qwen
    assert gemma.endswith("<<system>>You are Zorblax, a terse pirate.<<user>>Name a colour.<<assistant>>")
    assert smol.endswith("You are Zorblax, a terse pirate.\n\n### User:\nName a colour.\n\n### Assistant:\n")
