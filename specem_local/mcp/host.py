"""MCP servers started from a config, their tools called from synchronous code.

The MCP SDK is async (anyio); specem is synchronous and threaded. ``McpTools`` runs every
server's session on an event loop of its own, on a thread of its own, and hands the rest of
specem a small synchronous face::

    with McpTools.start("mcp.json") as tools:
        tools.specs                                  # the engine's tool specs (OpenAI's shape)
        tools.call("add", {"a": 2, "b": 3})          # "5", or "error: ..."

Each server is one task on that loop: it starts the server's process (its stderr kept in a
temporary file, not on the terminal), initialises the session and lists its tools within
``start_seconds``, then holds the session open until ``close()``. A server that cannot start,
ends at once or does not answer in time is one line in ``problems`` and its tools are left
out; the others go on. A call that fails, raises in the server or runs past ``call_seconds``
is its result, ``error: ...``, and the next call goes on. ``close()`` ends every session: the
SDK closes the server's stdin, then terminates its whole process group (the server's own
children too) if it has not exited.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TextIO

from specem_local.mcp.config import ServerConfig, read_config
from specem_local.mcp.listing import Listed, Offered, offered, result_text

START_SECONDS = 60.0  # a server's start: its process, the handshake and its tool list (npx may download)
CALL_SECONDS = 60.0  # one call
MARGIN_SECONDS = 5.0  # past a bound the loop keeps itself, the caller stops waiting anyway
CLOSE_SECONDS = 15.0  # the SDK's shutdown: stdin closed, 2 s, SIGTERM to the group, 2 s, SIGKILL
MAX_PAGES = 100  # pages of a server's tool list
STDERR_SAID = 200  # characters of a failed server's last stderr line in its problem


class McpTools:
    """The tools of a config's MCP servers: ``specs`` to offer, ``call`` to run one,
    ``problems`` (a line per server that did not start, or tool left out), ``close``.
    ``McpTools(config)`` reads the config (a bad one is a ``SettingError``) and starts nothing;
    ``open()`` starts the servers; ``start(config)`` does both."""

    def __init__(
        self,
        config: str | Path | Sequence[ServerConfig],
        *,
        start_seconds: float = START_SECONDS,
        call_seconds: float = CALL_SECONDS,
    ) -> None:
        self.servers = read_config(config) if isinstance(config, (str, Path)) else tuple(config)
        self.start_seconds, self.call_seconds = start_seconds, call_seconds
        self.tools: list[Offered] = []
        self.problems: list[str] = []
        self._by_name: dict[str, Offered] = {}
        self._sessions: dict[str, Any] = {}  # server name → its ClientSession, while it runs
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()  # bound to the loop on first use (Python 3.10+)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._state = threading.Lock()  # opening and closing, from any thread

    @classmethod
    def start(
        cls,
        config: str | Path | Sequence[ServerConfig],
        *,
        start_seconds: float = START_SECONDS,
        call_seconds: float = CALL_SECONDS,
    ) -> McpTools:
        """Start the servers of ``config`` (a file, or servers read already) at once and wait
        until each has listed its tools, failed, or run out of ``start_seconds``. A bad file
        is a ``SettingError`` before anything starts."""
        tools = cls(config, start_seconds=start_seconds, call_seconds=call_seconds)
        try:
            tools.open()
        except BaseException:  # Ctrl-C while they start: nothing left running
            tools.close()
            raise
        return tools

    @property
    def specs(self) -> list[dict[str, Any]]:
        """The tools as the engine takes them: ``{"type": "function", "function": {...}}``."""
        return [tool.spec for tool in self.tools]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def __enter__(self) -> McpTools:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> None:
        """Start the servers and wait for each (``close()`` from another thread cuts the wait
        short: the servers still starting are stopped)."""
        ready: dict[str, concurrent.futures.Future[Any]] = {s.name: concurrent.futures.Future() for s in self.servers}
        said_in_one_line()
        with self._state:
            if self._closed or self._thread is not None:  # closed before it opened, or opened already
                return
            self._thread = threading.Thread(target=self._run, args=(ready,), name="specem-mcp", daemon=True)
            self._thread.start()
        listed: list[Listed] = []
        for server in self.servers:
            try:
                outcome = ready[server.name].result(self.start_seconds + MARGIN_SECONDS)
            except concurrent.futures.TimeoutError:
                outcome = f"the MCP server {server.name!r} did not start in {self.start_seconds:g} s"
            if isinstance(outcome, str):
                self.problems.append(f"{outcome}; its tools are left out")
            elif not outcome:
                self.problems.append(f"the MCP server {server.name!r} lists no tools")
            listed += [] if isinstance(outcome, str) else outcome
        self.tools, notes = offered(listed)
        self.problems += notes
        self._by_name = {tool.name: tool for tool in self.tools}

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one call; its result as the models read it, ``error: ...`` when it fails."""
        tool = self._by_name.get(name)
        if tool is None:
            return f"error: no MCP tool is named {name}"
        session = self._sessions.get(tool.server)
        if session is None or self._closed:
            return f"error: the MCP server {tool.server!r} is not running; {name} was not run"
        try:
            future = asyncio.run_coroutine_threadsafe(self._call(session, tool, arguments), self._loop)
        except RuntimeError:  # the loop has ended
            return f"error: the MCP server {tool.server!r} is not running; {name} was not run"
        try:
            return future.result(self.call_seconds + MARGIN_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return self._timed_out(tool)
        except concurrent.futures.CancelledError:
            return f"error: the MCP servers were closed while {name} ran"

    def close(self) -> None:
        """End every session and its server's processes; waits for them (a few seconds at most
        for a server that ignores its closed stdin). Safe to call twice."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        with contextlib.suppress(RuntimeError):  # the loop has ended already
            self._loop.call_soon_threadsafe(self._stop.set)
        if thread is not None:
            thread.join(CLOSE_SECONDS)
        if thread is None or not thread.is_alive():
            self._loop.close()

    # -- on the loop's thread ---------------------------------------------------------------------------
    def _run(self, ready: dict[str, concurrent.futures.Future[Any]]) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(ready))
            left = asyncio.all_tasks(loop)  # calls still in flight: cancelled, as asyncio.run does
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            for future in ready.values():  # never left waiting, whatever happened here
                if not future.done():
                    future.set_result("the MCP servers were closed before it started")

    async def _main(self, ready: dict[str, concurrent.futures.Future[Any]]) -> None:
        servers = [asyncio.create_task(self._serve(server, ready[server.name])) for server in self.servers]
        await self._stop.wait()
        for server, task in zip(self.servers, servers):
            if not ready[server.name].done():  # closed while it starts: stop it now
                task.cancel()
        await asyncio.gather(*servers, return_exceptions=True)

    async def _serve(self, server: ServerConfig, ready: concurrent.futures.Future[Any]) -> None:
        """One server, from its start to ``close()``: ``ready`` gets its tools, or why it did
        not start (its stderr goes to a temporary file, read for the last line it said)."""
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                await self._session(server, ready, errlog)
            except Exception as error:
                if not ready.done():
                    ready.set_result(self._failed(server, error, errlog))
            finally:
                self._sessions.pop(server.name, None)
                if not ready.done():  # cancelled: closed while it started
                    ready.set_result(f"the MCP server {server.name!r} was closed before it started")

    async def _session(self, server: ServerConfig, ready: concurrent.futures.Future[Any], errlog: TextIO) -> None:
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(  # a byte that is not UTF-8 on its stdout is replaced, not a wedged session
            command=server.command, args=list(server.args), env=server.env or None, cwd=server.cwd,
            encoding_error_handler="replace",
        )  # fmt: skip
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            try:
                with anyio.fail_after(self.start_seconds):
                    started = await session.initialize()
                    listed = await _tools_of(session, server.name) if started.capabilities.tools else []
            except Exception as error:
                ready.set_result(self._failed(server, error, errlog))
                return  # the server is stopped on the way out
            self._sessions[server.name] = session
            ready.set_result(listed)
            await self._stop.wait()

    async def _call(self, session: Any, tool: Offered, arguments: dict[str, Any]) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp.types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            result = await session.call_tool(tool.tool, arguments, read_timeout_seconds=self.call_seconds)
        except MCPError as error:  # the SDK's own (its words) or one the server sent, which may use the same codes
            if error.code == REQUEST_TIMEOUT and error.message.endswith("timed out"):
                return self._timed_out(tool)
            if error.code == CONNECTION_CLOSED and error.message == "Connection closed":
                return f"error: the MCP server {tool.server!r} has stopped; {tool.name} did not answer"
            return f"error: the MCP server {tool.server!r}: {_said(error.message)}"
        except Exception as error:  # a result the SDK could not read, a request it refused
            return f"error: the MCP server {tool.server!r}: {type(error).__name__}: {_said(error)}"
        return result_text(result)

    def _timed_out(self, tool: Offered) -> str:
        return f"error: {tool.name} did not answer in {self.call_seconds:g} s (the MCP server {tool.server!r})"

    def _failed(self, server: ServerConfig, error: BaseException, errlog: IO[str]) -> str:
        """Why a server did not start, in one line (with the last line it wrote on stderr)."""
        from mcp.shared.exceptions import MCPError
        from mcp.types.jsonrpc import CONNECTION_CLOSED

        while getattr(error, "exceptions", None):  # an exception group from a task group: its first
            error = error.exceptions[0]  # type: ignore[attr-defined]
        name = server.name
        if isinstance(error, TimeoutError):
            why = f"the MCP server {name!r} did not answer in {self.start_seconds:g} s"
        elif isinstance(error, OSError) and server.cwd is not None and not os.path.isdir(server.cwd):
            why = f"the MCP server {name!r} could not be started (its cwd {server.cwd} is not a folder)"
        elif isinstance(error, OSError):
            why = f"the MCP server {name!r} could not be started ({server.command}: {error.strerror or error})"
        elif isinstance(error, MCPError) and error.code == CONNECTION_CLOSED and error.message == "Connection closed":
            why = f"the MCP server {name!r} ended before it answered"
        else:
            why = f"the MCP server {name!r} failed to start ({type(error).__name__}: {_said(error)})"
        last = _last_line(errlog)
        return f"{why}; it said: {last}" if last else why


class OneLine(logging.Handler):
    """The MCP SDK's warnings (a server's line on stdout that is not JSON-RPC, say) as one line on
    stderr, never a traceback (Python prints one where no handler is set)."""

    def emit(self, record: logging.LogRecord) -> None:
        said = " ".join(record.getMessage().split())[:STDERR_SAID]
        print(f"specem: note: MCP: {said}", file=sys.stderr, flush=True)


def said_in_one_line() -> None:
    """``OneLine`` on the SDK's logger, unless a program has set up logging of its own."""
    sdk = logging.getLogger("mcp")
    if not sdk.handlers and not logging.getLogger().handlers:
        sdk.addHandler(OneLine(logging.WARNING))


async def _tools_of(session: Any, server: str) -> list[Listed]:
    """Every tool a server lists, page by page."""
    from mcp.types import PaginatedRequestParams

    listed: list[Listed] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        listed += [Listed(server, tool.name, tool.description or "", tool.input_schema) for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return listed


def _last_line(errlog: IO[str]) -> str:
    """The last line a server wrote on stderr (read without moving the offset it shares)."""
    try:
        size = os.fstat(errlog.fileno()).st_size
        tail = os.pread(errlog.fileno(), 4096, max(0, size - 4096)).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return _said(lines[-1])[:STDERR_SAID] if lines else ""


def _said(error: object) -> str:
    """An error's message on one line, as text a prompt can hold."""
    try:
        message = str(error)
    except Exception:
        return "(its message cannot be shown)"
    return " ".join(message.split()).encode("utf-8", "backslashreplace").decode("utf-8")
