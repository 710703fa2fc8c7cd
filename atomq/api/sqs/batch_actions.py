"""SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch: 1 to 10 entries of distinct
ids, each succeeding or failing on its own (``Failed``, with ``SenderFault`` and the code the
entry's error would have had as a request of its own).

A batch's send is one native send of its valid entries (one request to admit, one script): an
SQS batch costs the node what a native send of as many messages does. Its deletes are one ack.
The request as a whole is refused (nothing done) for the batch's own rules: no entries
(EmptyBatchRequest), more than 10 (TooManyEntriesInBatchRequest), an id that breaks SQS's rule
(InvalidBatchEntryId) or repeats (BatchEntryIdsNotDistinct), sends that together pass the
queue's MaximumMessageSize (BatchRequestTooLong); and for what refuses a native send whole
(a rate limit, a quota), which the SDKs retry. On a FIFO queue an entry without a MessageGroupId,
or without a MessageDeduplicationId where the queue has no ContentBasedDeduplication, refuses the
batch whole, as SQS does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from atomq.api.sqs.context import SqsContext, integer, required
from atomq.api.sqs.errors import legacy_code
from atomq.api.sqs.message_actions import MAX_VISIBILITY_S, change_visibility, checked_receipt, sent_answer
from atomq.api.sqs.message_model import Outgoing, check_fifo_ids, outgoing
from atomq.errors import InvalidInput, SqsError

MAX_ENTRIES = 10
ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _entries(params: dict[str, Any], action: str) -> list[dict[str, Any]]:
    """The batch's entries, checked against the batch's own rules."""
    entries = required(params, "Entries")
    if not isinstance(entries, list):
        raise SqsError("InvalidParameterValue", "Entries must be a list of entries")
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {action}RequestEntry in the request.")
    if len(entries) > MAX_ENTRIES:
        raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {MAX_ENTRIES}. "
                                                       f"You have sent {len(entries)}.")
    ids = []
    for entry in entries:
        entry_id = entry.get("Id") if isinstance(entry, dict) else None
        if not isinstance(entry_id, str) or not ENTRY_ID.fullmatch(entry_id):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                                                  "hyphens and underscores. It can be at most 80 letters long.")
        ids.append(entry_id)
    repeated = next((entry_id for i, entry_id in enumerate(ids) if entry_id in ids[:i]), None)
    if repeated is not None:
        raise SqsError("BatchEntryIdsNotDistinct", f"Id {repeated} repeated.")
    return entries


def _failed(entry_id: str, exc: SqsError) -> dict[str, Any]:
    return {"Id": entry_id, "SenderFault": True, "Code": legacy_code(exc.shape), "Message": exc.message}


def _each(entries: list[dict[str, Any]],
          check: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each entry's checked form (``check``), by id, and the entries ``check`` refused, as failures."""
    good, failed = {}, []
    for entry in entries:
        try:
            good[entry["Id"]] = check(entry)
        except SqsError as exc:
            failed.append(_failed(entry["Id"], exc))
    return good, failed


def _bytes_of(entry: dict[str, Any]) -> int:
    """An entry's size as SQS adds up a batch: its body and its attributes' names, types and values
    (what is not text counts nothing here; the entry's own check refuses it)."""
    body = entry.get("MessageBody")
    size = len(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else 0
    attributes = entry.get("MessageAttributes")
    for name, value in attributes.items() if isinstance(attributes, dict) else ():
        parts = [name, *(value.get(k) for k in ("DataType", "StringValue"))] if isinstance(value, dict) else [name]
        size += sum(len(part.encode("utf-8", "surrogatepass")) for part in parts if isinstance(part, str))
        binary = value.get("BinaryValue") if isinstance(value, dict) else None
        size += len(binary) * 3 // 4 if isinstance(binary, str) else 0  # base64's bytes, near enough
    return size


def send_message_batch(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    queue = ctx.queue(params, recent=True)
    entries = _entries(params, "SendMessageBatch")
    total = sum(_bytes_of(entry) for entry in entries)  # as SQS: before any entry is checked on its own
    if total > queue.max_size:
        raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {queue.max_size} bytes. "
                                              f"You have sent {total} bytes.")
    if queue.fifo:
        for entry in entries:
            check_fifo_ids(queue, entry)
    good, failed = _each(entries, lambda entry: outgoing(queue, entry, ctx.key_id))
    checked: dict[str, Outgoing] = good
    successful = []
    if checked:
        sent = ctx.services.send(ctx.tenant, queue.name, [out.message for out in checked.values()],
                                 ctx.content_length)
        successful = [{"Id": entry_id, **sent_answer(queue, message_id, out)}
                      for (entry_id, out), message_id in zip(checked.items(), sent.ids)]
    return {"Successful": successful, "Failed": failed}


def _receipt_of(entry: dict[str, Any]) -> str:
    """An entry's receipt handle; its failure names it, in SQS's words."""
    try:
        return checked_receipt(entry.get("ReceiptHandle"))
    except SqsError as exc:
        raise SqsError(exc.shape, f"The input receipt handle \"{entry.get('ReceiptHandle')}\" is not a valid "
                                  "receipt handle.") from None


def delete_message_batch(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """One ack of the valid receipts; a receipt that holds no delivery any more succeeds, as SQS."""
    name = ctx.queue_of(params, recent=True)
    entries = _entries(params, "DeleteMessageBatch")
    good, failed = _each(entries, _receipt_of)
    if good:
        try:
            ctx.services.queues.ack(ctx.tenant, name, receipts=list(dict.fromkeys(good.values())))
        except InvalidInput as exc:
            raise SqsError("ReceiptHandleIsInvalid", exc.message) from None
    return {"Successful": [{"Id": entry_id} for entry_id in good], "Failed": failed}


def change_message_visibility_batch(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params, recent=True)
    entries = _entries(params, "ChangeMessageVisibilityBatch")

    def change(entry: dict[str, Any]) -> None:
        receipt = checked_receipt(entry.get("ReceiptHandle"))
        required(entry, "VisibilityTimeout")
        change_visibility(ctx, name, receipt, integer(entry, "VisibilityTimeout", 0, MAX_VISIBILITY_S, 0))

    good, failed = _each(entries, change)
    return {"Successful": [{"Id": entry_id} for entry_id in good], "Failed": failed}
