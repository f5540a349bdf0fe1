"""The ``specem`` command line: ``cli`` builds the parser and runs ``specem run`` and ``specem
serve``; ``models``, ``history``, ``weights`` and ``rpc`` are their sub-commands; ``terminal``
what they share (tables, every setting as a flag). ``specem bench``, ``eval`` and
``calibrate`` are mounted from ``specem_research``.

May import every package below it (``server``, ``engine``, ``backend``, ``models``,
``storage``) and the top-level modules. Its face gives ``specem_research`` the shared helpers.
"""

from specem_local.commands.models import build_description
from specem_local.commands.terminal import (
    add_settings_flags,
    config_from_args,
    print_table,
    settings_overrides,
    whole_number,
)

__all__ = [
    "add_settings_flags",
    "build_description",
    "config_from_args",
    "print_table",
    "settings_overrides",
    "whole_number",
]
