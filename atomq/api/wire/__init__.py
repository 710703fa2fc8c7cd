"""The bytes of the HTTP contract: JSON read and written strictly (``strict_json``), the send
body parsed without marshmallow on the hot path (``send_body``), and the queue server's
objects rendered as the contract's JSON (``render``)."""
