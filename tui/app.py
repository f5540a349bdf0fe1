"""``specem-chat``: the app, its start-up (loading the models in a worker) and entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.loading import LoadingScreen
from specem_tui.storage import Chat, load_chat
from textual import work
from textual.app import App

from specem_local.config import Config, load_config, model_colours
from specem_local.engine import Ensemble
from specem_local.errors import SpecemError


class SpecemChatApp(App[None]):
    CSS_PATH = "specem_chat.tcss"
    TITLE = "specem-chat"

    def __init__(self, config: Config, chat: Chat | None = None) -> None:
        super().__init__()
        self.config = config
        self.colours = model_colours(config)
        self.initial_chat = chat
        self.ensemble: Ensemble | None = None

    def on_mount(self) -> None:
        names = [spec.name for spec in self.config.models]
        self.push_screen(LoadingScreen(names, self.config.source))
        self.load_models()

    @work(thread=True, exclusive=True, group="load")
    def load_models(self) -> None:
        def progress(name: str, fraction: float) -> None:
            self.call_from_thread(self._loading_screen().set_progress, name, fraction)

        try:
            ensemble = Ensemble(self.config, progress=progress, skip_failed=True)
        except SpecemError as error:
            self.call_from_thread(self._loading_screen().set_fatal, str(error))
            return
        self.call_from_thread(self.models_loaded, ensemble)

    def _loading_screen(self) -> LoadingScreen:
        screen = self.screen
        assert isinstance(screen, LoadingScreen)
        return screen

    def models_loaded(self, ensemble: Ensemble) -> None:
        self.ensemble = ensemble
        for failure in ensemble.load_failures:
            self._loading_screen().set_failed(failure.model, failure.error)
        self.switch_screen(ChatScreen(ensemble, self.colours, self.initial_chat))

    def on_unmount(self) -> None:
        if self.ensemble is not None:
            self.ensemble.cancel()
            self.ensemble.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specem-chat", description="Chat with several local models at once.")
    parser.add_argument("--config", help="models.toml to use (default: the usual lookup, see specem --help)")
    parser.add_argument("--chat", help="resume a saved chat by its id")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        chat = load_chat(args.chat) if args.chat else None
    except SpecemError as error:
        print(f"specem-chat: error: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as error:
        print(f"specem-chat: error: cannot open chat {args.chat!r}: {error}", file=sys.stderr)
        return 1
    SpecemChatApp(config, chat).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
