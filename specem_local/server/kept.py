"""The Responses API's kept responses (``store``, the default): a later request continues one by
``previous_response_id``, and a client reads one back (``GET /v1/responses/{id}``), lists the
items it read (``GET /v1/responses/{id}/input_items``) or deletes it (``DELETE``), as OpenAI's
API serves them to the ``openai`` client's ``responses.retrieve``, ``input_items.list`` and
``delete``.

A response is kept with its conversation as items, its own output last, each item with an id
(an item the client sent without one is given one, as OpenAI's API does), so that a page of
input items can be asked for ``after`` one of them. The items are kept in the history database
when the server records, else in memory (the last ``MEMORY`` responses).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specem_local.server.errors import ApiError, http_error
from specem_local.storage.history import History

log = logging.getLogger(__name__)
KEPT_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")  # a kept response's id ("resp_" and hex); any other is none of ours
ID_PREFIXES = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_"}
PAGE, MOST = 20, 100  # input items on a page unless ``limit`` says, and the most it may ask


class KeptResponses:
    """The responses kept, by id: each one's items and its object."""

    MEMORY = 1000

    def __init__(self, history: History | None) -> None:
        self.history = history
        self.memory: dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]] = {}

    def keep(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """``response`` with the conversation it read (``items``, its output not among them)."""
        kept = [*with_ids(items), *response["output"]]
        if self.history is not None:
            try:
                self.history.keep_response(response["id"], kept, response)
                return
            except Exception as error:  # a history that cannot be written costs the record, not the answer
                log.warning("specem serve: warning: response %s kept in memory only: %s", response["id"], error)
        self.memory[response["id"]] = (kept, response)
        while len(self.memory) > self.MEMORY:
            del self.memory[next(iter(self.memory))]

    def items(self, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation a kept response ends (its output included), to be continued."""
        kept = self._kept(response_id)
        return None if kept is None else kept[0]

    def _kept(self, response_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        if KEPT_ID.fullmatch(response_id) is None:
            return None
        if response_id in self.memory:
            return self.memory[response_id]
        return self.history.kept_response(response_id) if self.history is not None else None

    def _shown(self, response_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A kept response's input items and its object, or the 404 OpenAI's API answers."""
        kept = self._kept(response_id)
        if kept is None:
            raise ApiError(404, f"Response with id {response_id[:60]!r} not found.")
        items, response = kept
        if response is None:
            raise ApiError(404, f"Response with id {response_id[:60]!r} was kept by an older specem only to be "
                                "continued (previous_response_id); it cannot be read back")  # fmt: skip
        return items[: len(items) - len(response["output"])], response

    # -- the routes ----------------------------------------------------------------------------
    def routes(self) -> list[Route]:
        return [
            Route("/v1/responses/{response_id}", self.retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}", self.delete, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", self.input_items, methods=["GET"]),
        ]

    async def retrieve(self, request: HttpRequest) -> Response:
        try:
            if request.query_params.get("stream", "false").lower() not in ("false", "0"):
                said = "a kept response is not streamed again here (OpenAI's API streams only background ones again)"
                raise ApiError(400, f"stream: {said}", "stream")
            return JSONResponse(self._shown(request.path_params["response_id"])[1])
        except Exception as error:
            return http_error(error).response(request.url.path)

    async def delete(self, request: HttpRequest) -> Response:
        response_id = request.path_params["response_id"]
        try:
            if not self._forget(response_id):
                raise ApiError(404, f"Response with id {response_id[:60]!r} not found.")
            return JSONResponse({"id": response_id, "object": "response", "deleted": True})
        except Exception as error:
            return http_error(error).response(request.url.path)

    async def input_items(self, request: HttpRequest) -> Response:
        try:
            items, _response = self._shown(request.path_params["response_id"])
            return JSONResponse(input_page(items, request.query_params))
        except Exception as error:
            return http_error(error).response(request.url.path)

    def _forget(self, response_id: str) -> bool:
        if KEPT_ID.fullmatch(response_id) is None:
            return False
        forgotten = self.memory.pop(response_id, None) is not None
        return (self.history is not None and self.history.forget_response(response_id)) or forgotten


def with_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items``, each with an id: its own, or a new one of its type's prefix."""
    return [item if item.get("id") else {**item, "id": _new_id(item.get("type", "message"))} for item in items]


def _new_id(kind: Any) -> str:
    return ID_PREFIXES.get(kind, "item_") + uuid.uuid4().hex


def listed(item: dict[str, Any]) -> dict[str, Any]:
    """An item as ``input_items`` lists it: a message's text as content parts, as OpenAI's API
    writes them (an assistant's as ``output_text``, anyone else's as ``input_text``)."""
    if item.get("type", "message") != "message":
        return item
    content = item.get("content")
    if isinstance(content, str):
        part = ({"type": "output_text", "text": content, "annotations": []} if item.get("role") == "assistant"
                else {"type": "input_text", "text": content})  # fmt: skip
        content = [part]
    return {**item, "type": "message", "content": content, "status": item.get("status", "completed")}


def input_page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """A page of ``items`` as OpenAI's list of input items: ``limit`` (1 to 100, 20 unless
    said), ``order`` (``desc``, the newest first, unless ``asc``), ``after`` an item's id."""
    limit = _limit(query.get("limit"))
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be 'asc' or 'desc', not {order[:40]!r}", "order")
    ordered = [listed(item) for item in (items if order == "asc" else reversed(items))]
    start = 0
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise ApiError(400, f"after: the response read no item with id {after[:60]!r}", "after")
        start = ids.index(after) + 1
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }


def _limit(value: str | None) -> int:
    if value is None:
        return PAGE
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MOST:
        raise ApiError(400, f"limit must be a whole number from 1 to {MOST}, not {value[:40]!r}", "limit")
    return limit
