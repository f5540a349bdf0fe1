"""The engine: the ``Ensemble`` and one answer's round loop, with everything a round calls.

``ask`` is one answer as asked (what every front end builds) and ``request`` the checked
request ``Ensemble.prepare`` makes of it; ``ensemble`` owns the loaded members, cancel and
close; ``runner`` is the one scheduler (places, the line for them, steps) and ``places`` runs
several answers at once in shared batches; ``answer_stream`` is one answer as its caller
iterates it (members lost earlier brought back first); ``many`` runs many items; ``loading``
turns a config into members; ``rounds`` runs one answer (draft, vote, commit) in its
``phases`` (thinking first, then the answer); ``roster`` says who takes part (model exit, lost
members); ``member`` is one model's part; ``drafting``, ``verifying``, ``contrastive``,
``vote``, ``feedback``, ``sampling``, ``segments``, ``prompting`` and ``thinking`` are its
steps; ``formats``, ``format_compiler``, ``schemas``, ``conditions`` and ``tools`` shape
answers a program can parse (``tool_stream`` reads a tool-call answer as it streams);
``options`` and ``option_answers`` choose an answer among a few options by every member's
scores, with ``task_weights`` kept per task, and ``choice_points`` finds such a value inside a
larger answer; ``written`` is what a round loop keeps; ``learned`` and
``choices`` carry weights across answers (calibration, your picks). Front ends use this face,
never the modules under it.

May import: ``backend``, ``models``, ``storage``, ``events``, ``settings``, ``errors``, ``dirs``.
Knows nothing of the front ends.
"""

from specem_local.engine import feedback, learned, options, sampling
from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.ask import Ask, FormatAsk, ask_from
from specem_local.engine.choices import (
    ENSEMBLE,
    best_rewards,
    choice_change,
    leaderboard,
    pick_rewards,
    thumbs_rewards,
)
from specem_local.engine.ensemble import Ensemble
from specem_local.engine.evidence import Calibrator, answer_agreement, final_answer
from specem_local.engine.evidence import fit as fit_calibrator
from specem_local.engine.format_compiler import allowed_tokens
from specem_local.engine.formats import FormatMatcher, OutputFormat, member_matcher, output_format_from
from specem_local.engine.learned import (
    built_in_calibrations,
    calibrate,
    keep_calibrator,
    names_in,
    stored_weights,
    user_calibrators,
)
from specem_local.engine.loading import gpu_layers_for, prompt_format_for
from specem_local.engine.member import Member
from specem_local.engine.option_answers import option_log_probabilities, plain_tokens
from specem_local.engine.prompting import Message
from specem_local.engine.request import AnswerRequest, PromptTooLong
from specem_local.engine.runner import AnswerRunner, threads_each
from specem_local.engine.sampling import make_sampler
from specem_local.engine.task_weights import TaskWeights, fit_task, guessed_at_least, keep_task_weights, task_weights
from specem_local.engine.thinking import MIN_ANSWER
from specem_local.engine.thinking import plan as think_plan
from specem_local.engine.tool_stream import ReplyStream, StreamedCall, whole_part
from specem_local.engine.tools import ToolCall, ToolReply, recorded_turns, reply_from_text
from specem_local.engine.vote import candidate_label, explain, winning_candidate

__all__ = [
    "ENSEMBLE",
    "MIN_ANSWER",
    "AnswerRequest",
    "AnswerRunner",
    "AnswerStream",
    "Ask",
    "Calibrator",
    "Ensemble",
    "FormatAsk",
    "FormatMatcher",
    "Member",
    "Message",
    "OutputFormat",
    "PromptTooLong",
    "ReplyStream",
    "StreamedCall",
    "TaskWeights",
    "ToolCall",
    "ToolReply",
    "allowed_tokens",
    "answer_agreement",
    "ask_from",
    "best_rewards",
    "built_in_calibrations",
    "calibrate",
    "candidate_label",
    "choice_change",
    "explain",
    "feedback",
    "final_answer",
    "fit_calibrator",
    "fit_task",
    "gpu_layers_for",
    "guessed_at_least",
    "keep_calibrator",
    "keep_task_weights",
    "leaderboard",
    "learned",
    "make_sampler",
    "member_matcher",
    "names_in",
    "option_log_probabilities",
    "options",
    "output_format_from",
    "pick_rewards",
    "plain_tokens",
    "prompt_format_for",
    "recorded_turns",
    "reply_from_text",
    "sampling",
    "stored_weights",
    "task_weights",
    "think_plan",
    "threads_each",
    "thumbs_rewards",
    "user_calibrators",
    "whole_part",
    "winning_candidate",
]
