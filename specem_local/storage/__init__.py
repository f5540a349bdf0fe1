"""What is kept on disk, in ``specem.db`` (SQLite): the connection, migrations and preferences
(``database``), every chat and answer as it streams (``history``; its rows, ``history_rows``), the
weights each ensemble learned (``weights``), a conversation in memory (``chats``) and chats as
files (``chat_files``: JSON imports and exports, Markdown).

May import: ``events``, ``settings``, ``errors``, ``dirs``. Nothing here knows a model.
"""

from specem_local.storage.chats import Chat, Turn
from specem_local.storage.database import Preferences
from specem_local.storage.history import AnswerRecord, History
from specem_local.storage.weights import WeightStore, ensemble_key

__all__ = ["AnswerRecord", "Chat", "History", "Preferences", "Turn", "WeightStore", "ensemble_key"]
