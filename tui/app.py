"""``specem-chat``: the app, its start-up (loading the models in a worker), switching to
another built-in ensemble, the MCP servers whose tools the chat offers (started and closed in
a worker), and the entry point."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from textual import work
from textual.app import App
from textual.message import Message

from specem_local.engine import Ensemble
from specem_local.errors import SpecemError
from specem_local.mcp import McpTools
from specem_local.models.config import Config, builtin_ensembles, load_config, model_colours
from specem_local.models.scan import FoundModel
from specem_local.storage.chats import Chat
from specem_local.storage.history import History
from specem_local.text import printable
from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.chat_tools import ChatTools
from specem_tui.screens.loading import LoadingScreen

Loader = Callable[..., Ensemble]  # Ensemble.from_config's signature: (config, progress=, skip_failed=)


class LoadProgress(Message):
    def __init__(self, model: str, fraction: float) -> None:
        super().__init__()
        self.model = model
        self.fraction = fraction


class ModelsLoaded(Message):
    def __init__(self, ensemble: Ensemble, config: Config) -> None:
        super().__init__()
        self.ensemble = ensemble
        self.config = config


class LoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ToolsStarted(Message):
    """The chat's MCP tools are up (``tools``), or could not start (``error``)."""

    def __init__(self, path: str, tools: ChatTools | None, error: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.tools = tools
        self.error = error


class SpecemChatApp(App[None]):
    CSS_PATH = "specem_chat.tcss"
    TITLE = "specem-chat"

    def __init__(
        self,
        config: Config,
        chat: Chat | None = None,
        *,
        load: Loader = Ensemble.from_config,
        history: History | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.colours = model_colours(config)
        self.initial_chat = chat
        self.history = history or History()
        self.loader = load
        self.ensemble: Ensemble | None = None
        self.loaded: Ensemble | None = None  # loaded, not yet in use (freed if we quit first)
        self.closing = False
        self._handover = threading.Lock()  # the loader hands an ensemble over, or frees it if we quit
        self.mcp_path = ""  # the MCP config whose tools the chat offers ("": none), up or starting
        self.chat_tools: ChatTools | None = None  # its tools, once up
        self.starting_tools: McpTools | None = None  # its servers while they start (closed if we quit)
        self._one_start = threading.Lock()  # one start or close of the tools at a time, in order

    def notify(self, message: str, *, markup: bool = False, **options: Any) -> None:
        """Plain text always, control characters made visible: notifications carry file names,
        TOML tables (``[ensemble]``) and model output, which Textual's markup would eat or choke
        on and an escape sequence in would reach the terminal."""
        if isinstance(options.get("title"), str):
            options["title"] = printable(options["title"])
        super().notify(printable(message), markup=False, **options)

    def _fatal_error(self) -> None:
        """A bug that reaches Textual ends the app with its traceback, as Textual does, but
        without the local variables it would show: they hold the user's chats."""
        from rich.segment import Segments
        from rich.traceback import Traceback

        self.bell()
        self._exit_renderables.append(Segments(self.console.render(Traceback(show_locals=False), self.console.options)))
        self._close_messages_no_wait()

    def action_help_quit(self) -> None:
        """Ctrl+C copies in a text box; pressed elsewhere, say how to quit (Textual's own hint
        is markup, which ``notify`` shows as it is)."""
        self.notify("Press Ctrl+Q to quit the app", title="Do you want to quit?")

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for name in ("SIGTERM", "SIGHUP"):  # kill, a closed terminal: leave as Ctrl+Q does (models freed)
            with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError, ValueError):
                loop.add_signal_handler(getattr(signal, name), self.exit)
        names = [spec.name for spec in self.config.models]
        self.push_screen(LoadingScreen(names, self.config.source))
        self.load_models(self.config)

    def switch_ensemble(self, name: str) -> None:
        """Load a built-in ensemble beside the one in use; the chat goes on with it once it
        has loaded (a failure leaves the current one)."""
        try:
            config = load_config(ensemble=name)
        except SpecemError as error:
            self.notify(str(error), severity="error")
            return
        self.notify(f"Loading {name}…")
        self.load_models(config)

    def add_model(self, found: FoundModel) -> None:
        """Add a model found on this disk to models.toml (the file in use, else the user's),
        then load the ensemble with it; the chat goes on."""
        from specem_local.models.models_file import add_model, file_to_edit, free_name

        explicit = None if self.config.source.startswith("<") else self.config.source
        try:
            path = file_to_edit(explicit)
            name = free_name(path, found.suggested_name)
            add_model(path, name, found.entry)
            config = load_config(path)
        except SpecemError as error:
            self.notify(str(error), severity="error", timeout=10)
            return
        self.notify(f"Added {name} to {path}; loading…")
        self.load_models(config)

    def use_mcp(self, path: str) -> None:
        """Offer the tools of the MCP servers ``path`` configures in the chat ("": none); the
        servers of the config used before are closed. Off the UI thread; said when done."""
        if path == self.mcp_path:
            return
        self.mcp_path = path
        self.start_tools(path)

    @work(thread=True, group="mcp")
    def start_tools(self, path: str) -> None:
        with self._one_start:
            with self._handover:
                old, self.chat_tools = self.chat_tools, None
            if old is not None:
                old.tools.close()
            if not path or path != self.mcp_path:  # none wanted, or another config asked for since
                return
            try:
                with self._handover:
                    if self.closing:
                        return
                    tools = self.starting_tools = McpTools(path)
                started = ChatTools.open(path, tools)
            except SpecemError as error:
                self.post_message(ToolsStarted(path, None, str(error)))
                return
            finally:
                with self._handover:
                    self.starting_tools = None
            with self._handover:
                keep = not self.closing and path == self.mcp_path
                if keep:
                    self.chat_tools = started
        if not keep:
            started.tools.close()
            return
        self.post_message(ToolsStarted(path, started))

    def on_tools_started(self, message: ToolsStarted) -> None:
        if message.error is not None:
            self.notify(f"MCP servers of {message.path}: {message.error}", severity="error", timeout=10)
        if message.tools is None:
            return
        for problem in message.tools.tools.problems:
            self.notify(problem, severity="warning", timeout=15)
        names = [tool.name for tool in message.tools.tools.tools]
        said = (
            f"{len(names)} MCP tools offered: {', '.join(names)}"[:300] if names else "The MCP servers offer no tools."
        )
        self.notify(said, timeout=10)
        if isinstance(self.screen, ChatScreen):
            self.screen.show_status()

    @work(thread=True, exclusive=True, group="load")
    def load_models(self, config: Config) -> None:
        """Runs in a worker thread; reports through messages, never waits on the UI."""
        try:
            ensemble = self.loader(
                config,
                progress=lambda name, fraction: self.post_message(LoadProgress(name, fraction)),
                skip_failed=True,
            )
        except SpecemError as error:
            self.post_message(LoadFailed(str(error)))
            return
        with self._handover:
            quitting = self.closing
            if not quitting:
                self.loaded = ensemble
        if quitting:  # the user quit while the models loaded
            ensemble.close()
            return
        self.post_message(ModelsLoaded(ensemble, config))

    def on_load_progress(self, message: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.set_progress(message.model, message.fraction)

    def on_load_failed(self, message: LoadFailed) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.set_fatal(message.error)
        else:
            self.notify(f"Could not switch: {message.error}", severity="error", timeout=10)

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        if isinstance(self.screen, LoadingScreen):
            for failure in message.ensemble.load_failures:
                self.screen.set_failed(failure.model, failure.error)
        chat = self.screen.chat if isinstance(self.screen, ChatScreen) else self.initial_chat
        with self._handover:
            previous, self.ensemble, self.loaded = self.ensemble, message.ensemble, None
        self.config, self.colours = message.config, model_colours(message.config)
        self.switch_screen(ChatScreen(message.ensemble, self.colours, chat, self.history))
        if previous is not None:
            previous.close()

    async def on_unmount(self) -> None:
        """Stop the answer in flight, free the models and let the workers end. ``close()``
        cancels the answer and waits for the step it is in (a round at most), so no model is
        freed under a running decode; the workers never wait on the UI, so awaiting them
        cannot hang."""
        with self._handover:
            self.closing = True
            ensembles = [e for e in (self.ensemble, self.loaded) if e is not None]
            tools = [self.chat_tools.tools] if self.chat_tools is not None else []
            tools += [self.starting_tools] if self.starting_tools is not None else []
            self.chat_tools = None
        for servers in tools:  # a call in flight ends with them, so its worker does too
            await asyncio.to_thread(servers.close)
        for ensemble in ensembles:
            ensemble.close()
        await self.workers.wait_for_complete()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specem-chat", description="Chat with several local models at once.")
    parser.add_argument("--config", help="models.toml to use (default: the usual lookup, see specem --help)")
    parser.add_argument(
        "--ensemble", metavar="NAME", help=f"a built-in ensemble instead: {', '.join(builtin_ensembles())}"
    )
    parser.add_argument("--chat", help="resume a saved chat by its id")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.ensemble)
        history = History()
        chat = history.load(args.chat) if args.chat else None
    except SpecemError as error:
        print(f"specem-chat: error: {error}", file=sys.stderr)
        return 1
    app = SpecemChatApp(config, chat, history=history)
    app.run()
    return app.return_code or 0  # 1 when the app crashed


if __name__ == "__main__":
    sys.exit(main())
