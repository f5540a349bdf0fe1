"""The one error type that is shown to the user as a clean one-line message."""


class SpecemError(Exception):
    """Something the user can fix: a bad config, a missing model, a bad file.

    Front ends print ``str(error)`` on one line and exit non-zero; they never show a
    traceback for this type.
    """
