"""A send's messages checked and encoded once, before the first try of its script: each message
on its own (a problem is named by its place in the request), then assembled into the arguments
of one script call, or of several (a publish to many topics groups its messages by queue); and
the script's refusals of them, as the errors the caller gets.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

from atomq import defaults
from atomq.errors import InvalidInput, QueueFull, TooLarge
from atomq.platform.models import BARE_ENVELOPE, DEFAULT_PRIORITY, OutgoingMessage, topic_envelope
from atomq.platform.queues.names import check_group
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.store import keys as k
from atomq.platform.store.stored_form import encode_document


def check_batch_size(messages: Sequence[OutgoingMessage], s: QueueSettings) -> None:
    """Refuses a batch of no message, or of more messages or documents than a send may hold."""
    if not messages:
        raise InvalidInput("messages must hold at least one message", field="messages")
    if len(messages) > s.max_messages_per_send:
        raise TooLarge(
            f"a send holds at most {s.max_messages_per_send} messages",
            field="messages", limit=s.max_messages_per_send,
        )
    if sum(len(m.documents) for m in messages) > s.max_documents_per_send:
        raise TooLarge(f"a send holds at most {s.max_documents_per_send} documents",
                       field="messages", limit=s.max_documents_per_send)


def with_delay(messages: Sequence[OutgoingMessage], delay_s: float | None) -> Sequence[OutgoingMessage]:
    """``messages``, each that gives no ``delay_s`` of its own given the send's (None: as they are)."""
    if delay_s is None:
        return messages
    check_delay(delay_s, "delay_s")
    return [m if m.delay_s is not None else dataclasses.replace(m, delay_s=delay_s) for m in messages]


def encode_each(messages: Sequence[OutgoingMessage], s: QueueSettings,
                topics: Sequence[str] | None = None) -> list[Encoded]:
    """Each message checked and encoded on its own (a problem is named by its place in the
    request), to be assembled into the arguments of one script or of several."""
    bare: dict[str, str] = {}
    out = []
    for i, m in enumerate(messages):
        topic = None if topics is None else topics[i]
        if not m.documents:
            raise InvalidInput("a message refers to at least one document",
                               field=f"messages.{i}.documents")
        if len(m.documents) > s.max_documents_per_message:
            raise TooLarge(f"a message refers to at most {s.max_documents_per_message} documents",
                           field=f"messages.{i}.documents", limit=s.max_documents_per_message)
        dedupe = None
        if m.dedupe_id is not None:
            if not isinstance(m.dedupe_id, str) or not 0 < len(m.dedupe_id) <= defaults.MAX_DEDUPE_ID_CHARS:
                raise InvalidInput(f"dedupe_id must be a string of 1 to {defaults.MAX_DEDUPE_ID_CHARS} characters",
                                   field=f"messages.{i}.dedupe_id")
            dedupe = (topic or "", m.dedupe_id)
        if m.group is not None:
            check_group(m.group, f"messages.{i}.group")
        try:
            envelope = m.envelope_json(topic)
        except (TypeError, ValueError):
            raise InvalidInput("message properties must be JSON values",
                               field=f"messages.{i}.properties") from None
        if envelope is None:
            envelope = BARE_ENVELOPE if topic is None else bare.get(topic) or bare.setdefault(
                topic, topic_envelope(topic))
        plain = m.priority is None and m.expires_at is None and m.ttl_s is None and m.delay_s is None
        rest: list[Any] = [envelope, len(m.documents)]
        for j, doc in enumerate(m.documents):
            data, props = encode_document(doc, s.max_document_bytes, f"messages.{i}.documents.{j}")
            rest += [data, props]
        out.append(Encoded(dedupe, "" if plain else timing(m, i), rest))
    return out


@dataclass(frozen=True)
class Encoded:
    """One message as the send script takes it, but for its dedupe key's index in its batch."""

    dedupe: tuple[str, str] | None
    """(topic, dedupe id); topic "" for a send."""
    timing: str
    """",<priority>,<expiry ms>,<ttl ms>[,<delay ms>]" for a message that sets any, else ""."""
    rest: list[Any]
    """The envelope, the number of documents, and each document's data and properties."""

    def digest_parts(self) -> list[Any]:
        """What the message is, for a request's digest (``RequestToken.digest``)."""
        return [*(self.dedupe or ("", "")), self.timing, *self.rest]


def assembled(encoded: Sequence[Encoded]) -> tuple[list[Any], list[tuple[str, str]]]:
    """The send script's arguments for a batch of encoded messages, and its distinct (topic, dedupe
    id) pairs in order: a message's first argument is its pair's index (0: none), with its timing."""
    args: list[Any] = [len(encoded)]
    index: dict[tuple[str, str], int] = {}
    for e in encoded:
        dd = 0 if e.dedupe is None else index.setdefault(e.dedupe, len(index) + 1)
        args.append(f"{dd}{e.timing}" if e.timing else dd)
        args += e.rest
    return args, list(index)


def timing(m: OutgoingMessage, i: int) -> str:
    """What follows the dedupe key index in the first script argument of a message that sets its
    priority, expiry or delay: the priority, expiry (ms, 0 for none), time to live (ms, 0 for none)
    and, when it gives one, its delay (ms, 0 for none, whatever the queue's), as
    ``<index>,<priority>,<expiry>,<ttl>[,<delay>]`` (a message that sets none of them passes the
    index alone, and gets its queue's delay)."""
    least, most = defaults.PRIORITY_RANGE
    priority = DEFAULT_PRIORITY if m.priority is None else m.priority
    if type(priority) is not int or not least <= priority <= most:
        raise InvalidInput(f"priority must be an integer from {least} to {most}", field=f"messages.{i}.priority")
    expires_ms = ttl_ms = 0
    if m.expires_at is not None:
        if not _finite_number(m.expires_at) or not 0 <= m.expires_at <= defaults.LATEST_TIME_S:
            raise InvalidInput("expires_at must be a time in seconds since the epoch", field=f"messages.{i}.expires_at")
        expires_ms = max(1, round(m.expires_at * 1000))
    if m.ttl_s is not None:
        most_ttl = defaults.MAX_MESSAGE_TTL_S
        if not _finite_number(m.ttl_s) or not 0 < m.ttl_s <= most_ttl:
            raise InvalidInput(f"ttl_s must be a number of seconds above 0 and at most {most_ttl:g}",
                               field=f"messages.{i}.ttl_s")
        ttl_ms = max(1, round(m.ttl_s * 1000))
    if m.delay_s is None:
        return f",{priority},{expires_ms},{ttl_ms}"
    check_delay(m.delay_s, f"messages.{i}.delay_s")
    return f",{priority},{expires_ms},{ttl_ms},{round(m.delay_s * 1000)}"


def check_delay(delay_s: object, field: str) -> None:
    """Refuses a delay that is not a number of seconds from 0 to ``defaults.MAX_DELAY_S``."""
    most = defaults.MAX_DELAY_S
    if not isinstance(delay_s, (int, float)) or isinstance(delay_s, bool) or not 0 <= delay_s <= most:
        raise InvalidInput(f"delay_s must be a number of seconds from 0 (none) to {most:g}", field=field)


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def queue_full_error(targets: list[k.QueueKeys], words: list[str]) -> QueueFull:
    """The send script's QUEUEFULL <queue index> <setting> <max> <count> <overflow> <fits> as the error."""
    queue, (setting, most, held, overflow, fits) = targets[int(words[0]) - 1].name, words[1:6]
    what = "messages" if setting == "max_messages" else "bytes of messages"
    if fits == "1":
        advice = "this send would pass it; consume or delete messages first"
    else:
        advice = "this send alone is past it; send fewer or smaller messages at a time"
    full = QueueFull(f"queue {queue} holds at most {most} {what} not yet acked ({setting}) and holds {held}: "
                     f"{advice}", queue=queue, limit=setting, max=int(most), count=int(held), overflow=overflow)
    full.can_fit = fits == "1"
    return full


def message_too_big_error(targets: list[k.QueueKeys], words: list[str]) -> TooLarge:
    """The send script's TOOBIG <queue index> <message index> <bytes> <max> as the error."""
    queue, message, size, most = targets[int(words[0]) - 1].name, int(words[1]) - 1, int(words[2]), int(words[3])
    return TooLarge(f"queue {queue} takes messages of at most {most} bytes (max_message_bytes: the documents' "
                    f"data and properties and the message's envelope); this one has {size}",
                    field=f"messages.{message}", queue=queue, limit=most, size=size)
