"""``python -m specem_local``: the ``specem`` command."""

import sys

from specem_local.commands.cli import main

sys.exit(main())
