"""The one error type that is shown to the user as a clean one-line message."""


class SpecemError(Exception):
    """Something the user can fix: a bad config, a missing model, a bad file.

    Front ends print ``str(error)`` on one line and exit non-zero; they never show a
    traceback for this type.
    """


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
