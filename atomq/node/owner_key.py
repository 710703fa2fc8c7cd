"""The owner key: from ``ATOMQ_OWNER_KEY``, else from ``DIR/owner.key``, made on first start."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from atomq.errors import InvalidInput

OWNER_KEY_ENV = "ATOMQ_OWNER_KEY"
MIN_OWNER_KEY_CHARS = 32


def load_owner_key(data_dir: Path) -> tuple[str, Path | None]:
    """The owner key from ``ATOMQ_OWNER_KEY``, else from ``DIR/owner.key`` (made 0600 on first start).

    A key shorter than MIN_OWNER_KEY_CHARS is refused (InvalidInput): the owner key opens
    every tenant's data, and a short one falls to guessing.
    """
    key = os.environ.get(OWNER_KEY_ENV, "").strip()
    if key:
        return _long_enough(key, OWNER_KEY_ENV), None
    path = data_dir / "owner.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return _long_enough(path.read_text().strip(), str(path)), path
    with os.fdopen(fd, "w") as f:
        f.write(f"aq_owner_{secrets.token_urlsafe(32)}\n")
    return path.read_text().strip(), path


def _long_enough(key: str, source: str) -> str:
    if len(key) < MIN_OWNER_KEY_CHARS:
        raise InvalidInput(
            f"the owner key in {source} has {len(key)} characters; it needs at least {MIN_OWNER_KEY_CHARS}. "
            "Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'", field=source)
    return key
