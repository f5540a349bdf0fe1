"""How long a step of a model in a worker process may take before the model is given up, as
plain arithmetic over what its steps have taken so far.

ggml-rpc has no timeouts once connected: a remote machine that sleeps, or a network that
drops without a reset, leaves a call waiting for ever. So every call to a worker has a
deadline. The first few steps (the prompt, the first tokens; caches warming on both sides)
get a generous one: ``first`` seconds and a tenth of a second per row. After them a step may
take ``slack`` times what the slowest step so far took per row (counting the call itself as
one row), and never less than ``least`` seconds, so jitter on a busy network or two shared
cores does not cost a member.
"""

from __future__ import annotations

from dataclasses import dataclass

WARMUP_STEPS = 4  # steps with the generous deadline
FIRST_PER_ROW = 0.1  # seconds per row allowed in those steps
SLACK = 10.0  # how many times the slowest pace seen a later step may take
LEAST = 5.0  # no later step's deadline is shorter than this (seconds)


@dataclass
class StepDeadlines:
    """The deadlines of one worker's steps: ``first`` seconds for the warm-up steps (the
    ``remote_timeout`` setting), then ``SLACK`` times the slowest pace seen."""

    first: float
    steps: int = 0
    pace: float = 0.0  # the slowest seconds per row (the call counted as one row) so far

    def deadline(self, rows: int) -> float:
        """Seconds a step that decodes ``rows`` rows (0: a memory operation) may take."""
        if self.steps < WARMUP_STEPS:
            return self.first + FIRST_PER_ROW * rows
        return max(LEAST, SLACK * self.pace * (rows + 1))

    def record(self, seconds: float, rows: int) -> None:
        """A step of ``rows`` rows took ``seconds``."""
        self.steps += 1
        self.pace = max(self.pace, seconds / (rows + 1))
