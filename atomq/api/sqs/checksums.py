"""What SQS computes over a message, as the SDKs that check it compute it, and its rule on bodies.

``MD5OfMessageBody`` is the MD5 hex of the body's UTF-8. ``MD5OfMessageAttributes``
is the MD5 hex of the attributes encoded one after another in the order of their
names, each as:

    <name> <data type> <transport type: 1 byte> <value>

where every text or bytes field is its length as a 4-byte big-endian integer and
then its bytes (UTF-8 for text), the transport type is 1 for a ``String`` or
``Number`` data type (custom ``String.x``/``Number.x`` included) and 2 for a
``Binary`` one, and the value is the ``StringValue``'s UTF-8 or the
``BinaryValue``'s bytes. This is the algorithm of AWS's "Calculating the MD5
message digest for message attributes" (SQS Developer Guide) and of the SDKs
that check it: the JavaScript v3 SDK's ``@aws-sdk/middleware-sdk-sqs``
(``receive-message.ts``, ``send-message.ts``) and the Java SDK's
``MessageMD5ChecksumInterceptor``. Names are ordered as those SDKs order them:
the JS SDK sorts with JavaScript's default sort, by UTF-16 code units, which the
Java SDK's ``TreeMap`` of strings also does; the key below is the same order.
The same encoding with ``MessageSystemAttributes`` gives
``MD5OfMessageSystemAttributes``.

SQS's body rule (``InvalidMessageContents``) allows #x9, #xA, #xD, #x20 to
#xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF: the characters of XML 1.0.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Mapping
from typing import Any

from atomq.errors import SqsError

STRING_TRANSPORT = 1
BINARY_TRANSPORT = 2
OUTSIDE_BODY_RULE = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def md5_of_body(body: str | bytes) -> str:
    """SQS's ``MD5OfMessageBody`` (of the body's UTF-8, when it is given as text)."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _utf16_order(name: str) -> bytes:
    """A sort key that orders names by UTF-16 code units, as the SDKs that check the MD5 do."""
    return name.encode("utf-16-be", "surrogatepass")


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def md5_of_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """SQS's ``MD5OfMessageAttributes`` of ``{name: {"DataType", "StringValue" | "BinaryValue"}}``
    (``BinaryValue`` as bytes); None for no attributes, as SQS leaves the field out then."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes, key=_utf16_order):
        value = attributes[name]
        data_type = str(value["DataType"])
        digest.update(_field(name.encode("utf-8")) + _field(data_type.encode("utf-8")))
        if data_type.split(".", 1)[0] == "Binary":
            digest.update(bytes([BINARY_TRANSPORT]) + _field(bytes(value["BinaryValue"])))
        else:
            digest.update(bytes([STRING_TRANSPORT]) + _field(str(value["StringValue"]).encode("utf-8")))
    return digest.hexdigest()


def check_body(body: str, field: str = "MessageBody") -> str:
    """Returns ``body`` if every character is one SQS allows, else InvalidMessageContents naming the first.
    Printable ASCII, most bodies, is allowed without the search (tabs, line ends and the rest are searched)."""
    if body.isascii() and body.isprintable():
        return body
    bad = OUTSIDE_BODY_RULE.search(body)
    if bad is not None:
        raise SqsError("InvalidMessageContents", f"{field} holds the character U+{ord(bad.group()):04X} at "
                       f"{bad.start()}: SQS allows #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 "
                       "to #x10FFFF", field=field)
    return body
