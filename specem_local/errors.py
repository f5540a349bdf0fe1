"""Errors in three kinds.

- ``SpecemError``: something the user can fix (a bad config, a missing model, a bad request
  field). Shown as one line: front ends print ``str(error)`` and exit non-zero, never with a
  traceback; a server answers ``status`` naming ``field``.
- ``Signal``: control flow inside the engine (the KV memory is full, a member was lost, a step
  was given up). Never shown: the engine handles each where it is raised. One that escapes to a
  front end is a bug.
- Anything else: a bug. A server answers 500 and logs one line; the CLI says "unexpected".
"""


class SpecemError(Exception):
    """Something the user can fix. ``status``: what a server answers it with; ``field``: the
    setting or request field at fault (None: the request as a whole); ``code``: a
    machine-readable code where an API has one (OpenAI's ``context_length_exceeded``)."""

    status = 400
    field: str | None = None
    code: str | None = None


class SettingError(SpecemError):
    """A setting with a value it cannot take (models.toml, a flag, an API argument, a request
    field). ``field`` names the setting, so a server can point at the request field and the
    command line can exit 2, as for any other usage error."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class NoMemberLeft(SpecemError):
    """Every member that could draft, or every one that could verify, was lost (their machines
    stopped answering or their workers died): the answer cannot go on. Nothing the request did:
    a server answers it 503, and the next answer tries to bring the members back."""

    status = 503


class Busy(SpecemError):
    """Every place is taken and the line for them is full: try again after ``retry_after``
    seconds (a 429 with ``Retry-After``)."""

    status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(SpecemError):
    """The server is stopping (SIGTERM, Ctrl-C): no answer starts any more (a 503)."""

    status = 503


class DamagedData(SpecemError):
    """A file specem keeps (the user's task weights) that cannot be read as it must: nothing the
    request did, so a server answers 500 and logs it for whoever runs it; deleting the file mends it."""

    status = 500


class Signal(Exception):
    """Control flow inside the engine, never shown to a user (see the module's face)."""
