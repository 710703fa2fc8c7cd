"""The store: how atomq reaches Redis or Valkey and what it keeps there.

The connection to an outside store and the embedded Valkey with its files (the data directory,
its lock, private files, child processes), the boundary that turns redis-py's errors into
atomq's (``storage``), every key atomq uses (``keys`` and ``listener_keys``, the one place a key is built), the stored
form of documents and its format version, leases, figures cached off one shared key, and a
request's API key check carried by its operation's script (``carried_check``).
It uses the scripts and ``models``, and nothing of the other rooms: they all stand on it.
"""
