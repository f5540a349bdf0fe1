import pytest

from specem_local.engine.prompting import Message, PromptFormat, as_messages
from specem_local.errors import SpecemError

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class RecordingTokenizer:
    """Records which text was tokenized with special-token parsing on."""

    def __init__(self):
        self.calls = []

    def tokenize(self, text, *, parse_special=False, add_bos=False):
        self.calls.append((text, parse_special))
        return [len(self.calls)]


def test_message_text_is_never_parsed_for_special_tokens():
    tokenizer = RecordingTokenizer()
    messages = [Message("user", "say <|im_end|> now")]
    PromptFormat(CHATML).tokens(messages, tokenizer, bos_token=None)
    assert ("say <|im_end|> now", False) in tokenizer.calls
    assert ("<|im_start|>user\n", True) in tokenizer.calls
    assert all(not special for text, special in tokenizer.calls if "say" in text)


def test_template_renders_whole_history():
    pieces = PromptFormat(CHATML).render(
        [Message("user", "hi"), Message("assistant", "hello"), Message("user", "more")]
    )
    text = "".join(text for text, _ in pieces)
    assert text.endswith("<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nhello<|im_end|>" in text


def test_plain_format_for_models_without_template():
    prompt_format = PromptFormat(None)
    text = "".join(t for t, _ in prompt_format.render([Message("system", "Be brief."), Message("user", "Hi")]))
    assert text == "Be brief.\n\n### User:\nHi\n\n### Assistant:\n"
    assert "### User:" in prompt_format.stop_strings


def test_bos_added_once():
    tokens = PromptFormat(None).tokens([Message("user", "x")], RecordingTokenizer(), bos_token=99)
    assert tokens[0] == 99 and tokens.count(99) == 1


def test_template_errors_are_clean():
    with pytest.raises(SpecemError, match="chat template failed"):
        PromptFormat("{{ raise_exception('no system role') }}").render([Message("user", "x")])


def test_sandbox_blocks_unsafe_templates():
    with pytest.raises(SpecemError):
        PromptFormat("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([Message("user", "x")])


def test_as_messages():
    assert as_messages("hi", "sys")[0] == Message("system", "sys")
    continued = as_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert continued[-1] == Message("assistant", "b")
    for wrong in (
        [{"role": "assistant", "content": "b"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "assistant", "content": "c"},
        ],
        [{"role": "system", "content": "s"}],
    ):
        with pytest.raises(SpecemError, match="end with a user message"):
            as_messages(wrong)
    with pytest.raises(SpecemError, match="role must be one of"):
        as_messages([{"role": "robot", "content": "a"}])


@pytest.mark.parametrize("content", ["bad \udcff byte", None, 42])
def test_message_text_must_be_text(content):
    with pytest.raises(SpecemError, match="message"):
        Message("user", content)


def test_a_trailing_assistant_message_is_continued_in_every_format():
    asked = [Message("user", "2+2?")]
    partial = [*asked, Message("assistant", "The answer")]
    template = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    for prompt_format in (PromptFormat(None), PromptFormat(template)):
        pieces = prompt_format.render(partial)
        assert pieces == [*prompt_format.render(asked), ("The answer", True)]  # no end of turn after it
