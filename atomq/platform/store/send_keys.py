"""The keys of a staged send's documents and of a wide send's reservation
(``atomq.platform.queues.send_journal``), beside ``keys`` and in the tenant's slot like every other
of its keys: a request's upload before its prepare, and its journal's documents after, until the
steps have moved them; the destinations a wide send reserved before its prepare."""

from __future__ import annotations

import hashlib

from atomq.platform.store.keys import PREFIX, TenantKeys, tenant_prefix

STAGING_PATTERN = f"{PREFIX}:{{*}}:stg:*"
"""SCAN pattern of every tenant's uploads (:func:`send_staging`): temporary keys no index names."""


def send_staging(tk: TenantKeys, journal: str, digest: str) -> str:
    """Hash: a request's documents uploaded before its prepare (fields "<message>.<document>" and
    "<message>.<document>p" for the properties), expiring, so a client that dies mid-upload leaves
    nothing. Named by the journal's name and the request's body digest too, so two bodies sent
    with one Idempotency-Key never upload into one hash."""
    body = hashlib.sha1(digest.encode("utf-8")).hexdigest()[:16]
    return f"{tenant_prefix(tk.tenant)}:stg:{journal}:{body}"


def journal_documents(tk: TenantKeys, journal: str) -> str:
    """Hash: the upload, renamed by the prepare that accepted it, until the journal's steps have
    moved its documents into the tenant's documents (``send_apply.lua``)."""
    return f"{tenant_prefix(tk.tenant)}:jd:{journal}"


RESERVATION_NAME_PREFIX = "r."
"""What starts a reservation's name in the tenant's index of journals, where a journal's name is
hexadecimal: the maintenance releases a stale reservation and finishes a stale journal."""


def reservation_of_plan(journal: str, digest: str, plan: list[str]) -> str:
    """What names the reservation of the call of journal ``journal`` for a body (its digest) and
    the destinations it was planned to (``plan``, in order): a retry that read other routes (a
    subscriber came or left) reserves in a reservation of its own, never on from the steps of
    another list, which would reserve one destination twice and another never. The first
    prepare renames its own to the journal; the other's caller gives its own back."""
    body = hashlib.sha1("\n".join([digest, *plan]).encode("utf-8")).hexdigest()[:16]
    return f"{journal}.{body}"


def reservation_name(reservation: str) -> str:
    """A wide send's reservation's name in the tenant's index of journals (``TenantKeys.send_journals``),
    from :func:`reservation_of_plan`'s."""
    return RESERVATION_NAME_PREFIX + reservation


def send_reservation(tk: TenantKeys, reservation: str) -> str:
    """Hash: a wide send's destinations, checked and reserved in steps before its prepare
    (``send_reserve.lua``), which renames it to the journal; named by :func:`reservation_of_plan`."""
    return f"{tenant_prefix(tk.tenant)}:jrs:{reservation}"
