"""The ``[ensemble]`` settings, described once.

Each setting is a dataclass field whose metadata gives its group, a one-line help and its
limits (``setting_fields.py`` reads and checks such fields). The models.toml checks (type,
choices, range, a did-you-mean for unknown keys), the ``specem`` flags and the chat app's
settings form are all derived from that description, so a new setting is one new field.

``EnsembleSettings`` may change with every answer; ``LoadSettings`` are read once, when the
models load, and cannot be overridden per answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specem_local.errors import SpecemError
from specem_local.setting_fields import checked, checked_values, describe, setting, unknown_key_error

GROUPS: dict[str, str] = {
    "sampling": "sampling",
    "answer": "the answer: segments, length, stops",
    "vote": "the vote and its learned weights",
    "speed": "speed",
    "experimental": "experimental: measured, and left off by default",
    "load": "load-time: read once, when the models load",
}


@dataclass(frozen=True)
class EnsembleSettings:
    """How one answer is made. Every field can be set in models.toml ``[ensemble]``, as a
    ``specem`` flag, per answer in the Python API, and (most) in the chat app's settings."""

    temperature: float = setting(0.7, "sampling", "sampling temperature (0 = greedy)", low=0, high=100)
    top_p: float = setting(
        0.95, "sampling", "keep the most likely tokens up to this probability", low=0, high=1, open_low=True
    )
    top_k: int = setting(40, "sampling", "keep the k most likely tokens (0 = all)", low=0, high=1 << 31, open_high=True)
    min_p: float = setting(
        0.05, "sampling", "drop tokens below this share of the best one", low=0, high=1, open_high=True
    )
    seed: int = setting(
        0, "sampling", "same seed and settings = same answer", low=0, high=1 << 64, open_high=True
    )  # numpy's SeedSequence takes any non-negative integer; 2^64 keeps it a uint64, as llama.cpp's
    greedy: bool = setting(False, "sampling", "always take the most likely token")

    segment_tokens: int = setting(10, "answer", "L: tokens per drafted segment", low=1, high=4096)
    max_tokens: int = setting(512, "answer", "answer length limit, in the authors' tokens", low=1, high=1_000_000)
    stop: tuple[str, ...] = setting((), "answer", "stop strings (the answer ends before them)")
    ignore_eos: bool = setting(False, "answer", "go on past end-of-generation (fixed-length benchmarks)")
    system_prompt: str = setting("", "answer", "a system message put before the conversation")
    reasoning_budget: int = setting(
        320,
        "answer",
        "an answer with a format (schema, JSON, grammar, regex, tools) is first thought through freely for up to "
        "this many tokens, then written in the format (0 = no thinking)",
        low=0,
        high=32_768,
    )
    logprobs: int = setting(
        -1,
        "answer",
        "each answer token's log-probability in its author's distribution, with this many most likely "
        "alternatives (0 to 20; -1 = none)",
        low=-1,
        high=20,
    )
    confidence_check: str = setting(
        "none",
        "answer",
        "pay for a surer confidence: after the answer, each other member answers alone (witnesses), or the "
        "heaviest member samples check_samples more answers (samples); agreeing final answers raise it",
        choices=("none", "witnesses", "samples"),
    )
    check_samples: int = setting(1, "answer", "with confidence_check = samples: how many more answers", low=1, high=8)
    escalate_below: float = setting(
        0.0,
        "answer",
        'an answer whose confidence is below this is answered again by the reserve member (role = "reserve") '
        "alone, and that answer is given (0 = never; never for a streamed answer already shown)",
        low=0,
        high=1,
    )
    score_options: bool = setting(
        True,
        "answer",
        "an answer whose format allows only a few values (an enum, consts, a boolean) is chosen by every member "
        "scoring every option, asked and as plain text, with the task's weights (not drafted in rounds)",
    )
    choice_points: bool = setting(
        False,
        "answer",
        "with score_options: a value inside a larger JSON answer (an enum field among others) is chosen by every "
        "member scoring its options in context, not drafted (measured: worse than drafting it, and slower)",
    )
    task: str = setting(
        "",
        "answer",
        "the kind of task, for its weights among the options (specem calibrate --task NAME); empty: choices",
        pattern=r"[A-Za-z0-9_.-]{0,64}",
        pattern_words="a name of at most 64 letters, digits, '_', '-' or '.'",
    )
    abstain_below: float = setting(
        0.0,
        "answer",
        "an answer whose confidence is below this is marked unsure (its text is kept; 0 = never)",
        low=0,
        high=1,
    )

    scoring: str = setting(
        "logprob",
        "vote",
        "verifier score: mean log-probability, or mean raw logit (the paper)",
        choices=("logit", "logprob"),
    )
    normalise: str = setting(
        "segment", "vote", "compare logprob candidates as whole segments, or per token", choices=("token", "segment")
    )
    weight_prior: str = setting(
        "size", "vote", "starting weights: by parameter count, or equal (the paper)", choices=("uniform", "size")
    )
    feedback: bool = setting(True, "vote", "learn the weights during the answer (Hedge)")
    learning_rate: float = setting(1.0, "vote", "eta_0; round k uses eta_0 / sqrt(K * k)", low=0, high=100)
    fresh_weights: bool = setting(
        False, "vote", "start from the prior, not from a calibration or weights carried over (left as they are)"
    )
    verify_end: bool = setting(True, "vote", "score a draft that ends the answer with P(end) after it")

    drafting: str = setting(
        "auto",
        "speed",
        "draft one model after another, or at once in threads sharing the cores (auto: threads on a GPU); "
        "threads only with parallel = 1",
        choices=("auto", "round-robin", "threads"),
    )
    model_exit: bool = setting(True, "speed", "drafters that keep losing stop drafting for the rest of the answer")
    exit_warmup_rounds: int = setting(4, "speed", "model exit: judged after this many rounds", low=0, high=1_000_000)
    exit_share: float = setting(0.8, "speed", "model exit: leave below this share of the vote / K", low=0, high=1)
    reuse_prompt: bool = setting(
        True,
        "speed",
        "decode only what is new in a prompt (multi-turn chats); false: every answer decodes its prompt afresh, "
        "so the same seed and settings give the same answer whatever was asked before",
    )

    loop_guard: bool = setting(False, "experimental", "discount candidates that repeat a 12-word run of the answer")
    fast_finish: bool = setting(False, "experimental", "take a draft that ends the answer at once, unverified")
    draft_budget: int = setting(
        0,
        "experimental",
        "drafts per round, shared out by weight: a heavy member drafts several, a light one none "
        "(it still verifies); 0 = one per drafter",
        low=0,
        high=64,
    )
    extra_temperature: float = setting(
        0.8, "experimental", "the temperature of a member's extra drafts (draft_budget)", low=0, high=100, open_low=True
    )
    contrast: float = setting(
        0.0,
        "experimental",
        "beta: the heaviest member against the others, (1+beta) log strong - beta log weak over what it "
        "finds plausible: per token while it drafts, against members of its vocabulary (they read along "
        "instead of drafting); per segment in the vote (0 = off)",
        low=0,
        high=10,
    )
    vote_gate: float = setting(
        0.0,
        "experimental",
        "vote only where the leading drafter is unsure: its segment is taken unvoted when every token "
        "had at least this probability (0 = vote every round)",
        low=0,
        high=1,
    )
    pooling: str = setting(
        "linear", "experimental", "vote: weighted mean of shares, or weighted geometric mean", choices=("linear", "log")
    )
    self_vote: bool = setting(True, "experimental", "a verifier's score of its own draft counts in the vote")
    weighted_judges: bool = setting(False, "experimental", "in the reward, each judge counts as much as its weight")
    carry_weights: bool = setting(
        False, "experimental", "each answer hands on what it learned to the next (drifts; docs/quality.md)"
    )
    weight_memory: float = setting(
        20.0, "experimental", "carried weights remember about this many answers", low=1, high=1_000_000
    )
    think_bridge: str = setting(
        "new-turn",
        "experimental",
        "after thinking, the format is asked in a new short user turn, or in the same assistant turn",
        choices=("new-turn", "same-turn"),
    )
    tool_turns: str = setting(
        "native",
        "experimental",
        "earlier tool calls and results in each family's own format where its template has one, or as text for all",
        choices=("native", "text"),
    )

    def __post_init__(self) -> None:
        checked(self, "[ensemble]")


@dataclass(frozen=True)
class LoadSettings:
    """Read once when the models load (models.toml ``[ensemble]``, ``Ensemble.from_config``)."""

    threads_per_model: int = setting(
        2, "load", "llama.cpp CPU threads per model (models decoding at once share the cores)", low=1, high=1024
    )
    parallel: int = setting(
        4,
        "load",
        "answers that may run at once (the server, specem run --batch): their decodes share llama.cpp batches",
        low=1,
        high=16,
    )
    gpu_layers: int = setting(
        -1,
        "load",
        "layers on the GPU for models that do not set n_gpu_layers (-1 = all; GPU builds only)",
        low=-1,
        high=1_000_000,
    )
    remote_timeout: float = setting(
        120.0,
        "load",
        "seconds a member on other machines (rpc) may go silent while it loads or takes its first steps "
        "before it leaves the answer (later steps: 10x its slowest pace, at least 5 s)",
        low=1,
        high=86_400,
    )

    def __post_init__(self) -> None:
        checked(self, "[ensemble]")


def split_ensemble_table(table: dict[str, Any], where: str) -> tuple[EnsembleSettings, LoadSettings]:
    """models.toml's ``[ensemble]`` table: the per-answer settings and the load-time ones."""
    load_names = {item.name for item in describe(LoadSettings)}
    answer_names = [item.name for item in describe(EnsembleSettings)]
    for key in table:
        if key not in load_names and key not in answer_names:
            raise unknown_key_error(key, [*answer_names, *load_names], where)
    load = {key: value for key, value in table.items() if key in load_names}
    answer = {key: value for key, value in table.items() if key not in load_names}
    return (
        EnsembleSettings(**checked_values(EnsembleSettings, answer, where)),
        LoadSettings(**checked_values(LoadSettings, load, where)),
    )


def with_overrides(settings: EnsembleSettings, **overrides: Any) -> EnsembleSettings:
    """A copy of ``settings`` with the non-None overrides applied, each checked like a
    models.toml value. A load-time setting or a mistyped name is a one-line error."""
    given = {key: value for key, value in overrides.items() if value is not None}
    load_names = [item.name for item in describe(LoadSettings)]
    for key in given:
        if key in load_names:
            raise SpecemError(
                f"{key} is read when the models load and cannot change per answer; "
                "set it in models.toml [ensemble] or pass it to Ensemble.from_config"
            )
    return dataclasses.replace(settings, **checked_values(EnsembleSettings, given, "", "setting"))
