"""A consistency audit of a tenant's stored queues.

Every multi-key change is one script, so these invariants hold after any
crash; the audit proves it in tests and lets an operator check a live server.
It reads every message of the tenant: meant for tests and for operators, not
for a request path.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from atomq import defaults
from atomq.platform.queues.delivery import HOLDER
from atomq.platform.queues.footprint import COPY_BYTES, DOC_BYTES, LAST_VALUE_BYTES
from atomq.platform.store import keys as k, send_keys
from atomq.platform.store.connection import RedisClient

IN_FLIGHT_DETAIL = re.compile(rf"[0-9]{{1,15}},(?:{HOLDER.pattern})?")
"""What follows the ``f`` of an in-flight state: ``<since ms>,<holder>`` (nothing in format 6)."""


def _index_problems(r: Any, tk: k.TenantKeys, d: k.DestinationKeys) -> list[str]:
    """The due indexes' promise: a destination's score is at or before its earliest due
    redelivery or ack deadline, and at or before its oldest message's send time."""
    if not d.member:
        return []
    problems = []
    firsts = [float(s) for key in (d.inflight, d.sched) for _, s in r.zrange(key, 0, 0, withscores=True)]
    due = r.zscore(tk.due, d.member)
    if firsts and (due is None or due > min(firsts)):
        problems.append(f"{d.base}: due at {min(firsts)} but indexed at {due}")
    oldest = r.zrange(d.all, 0, 0)
    indexed = r.zscore(tk.oldest, d.member)
    if oldest and (indexed is None or indexed > int(oldest[0].split(b"-")[0])):
        problems.append(f"{d.base}: oldest message {oldest[0].decode()} but indexed at {indexed}")
    return problems


def _last_value_problems(r: Any, d: k.DestinationKeys, states: dict[str, str]) -> list[str]:
    """A last-value queue's entries: each message's key entry names a stored message, each
    current value a message of that key, and no key has two waiting messages."""
    entries = {f.decode(): v.decode() for f, v in r.hgetall(d.last_values).items()}
    keys = {f[2:]: v[1:] for f, v in entries.items() if f.startswith("i:")}
    current = {f[2:]: v for f, v in entries.items() if f.startswith("k:")}
    problems = []
    if not set(keys) <= set(states):
        problems.append(f"{d.base}: last-value entries of messages it does not hold")
    if any(entries.get(f"i:{msg_id}") != f"={key}" for key, msg_id in current.items()):
        problems.append(f"{d.base}: a current last value that is not a message of its key")
    waiting = Counter(keys[i] for i in keys if i in states and states[i].split("|", 2)[2][:1] in "rzsw")
    if any(n > 1 for n in waiting.values()):
        problems.append(f"{d.base}: two waiting messages of one last-value key")
    return problems


def _group_of(env: str) -> str | None:
    """A stored envelope's group (its JSON's "g")."""
    group = json.loads(env.split("|", 1)[1]).get("g")
    return group if isinstance(group, str) else None


def _group_problems(r: Any, d: k.DestinationKeys, envs: dict[str, str], states: dict[str, str]) -> list[str]:
    """Message groups (``_lib_groups.lua``): each group's head is a message of that group that is
    out (ready, in flight or scheduled); each waiting message is of a group whose head is out,
    and waits in the waiting set under its group, at the place its state names. (A group may have
    more than its head out: those sent before its queue's ordering became ``group``, and delayed
    copies, which join their group when they fall due.)"""
    wheres = {msg_id: state.split("|", 2)[2] for msg_id, state in states.items()}
    tag = {msg_id: where[:1] for msg_id, where in wheres.items()}
    heads = {g.decode(): i.decode() for g, i in r.hgetall(d.groups).items()}
    problems = []
    for group, msg_id in heads.items():
        if tag.get(msg_id, "") not in ("r", "z", "f", "s") or _group_of(envs[msg_id]) != group:
            problems.append(f"{d.base}: group {group!r}'s head {msg_id} is not a message of it that is out")
    waiting = set()
    for member in (m.decode() for m in r.zrange(d.group_waiting, 0, -1)):
        group, _, rest = member.partition("\0")
        msg_id = rest[17:]
        waiting.add(msg_id)
        place = wheres.get(msg_id, "")[1:]
        if tag.get(msg_id) != "w" or _group_of(envs[msg_id]) != group or group not in heads or \
                not place.isdigit() or rest[:17] != f"{int(place):016d}|":
            problems.append(f"{d.base}: {member!r} waits in the group set but is not a waiting message of a "
                            "group whose head is out")
    if waiting != {msg_id for msg_id, t in tag.items() if t == "w"}:
        problems.append(f"{d.base}: the group waiting set and the states disagree")
    return problems


def _topic_log_problems(r: Any, tk: k.TenantKeys, version: int) -> list[str]:
    """The log of topic pattern changes: at most its length, each entry one change of a queue's
    patterns, newest first, none past the patterns' version (``topics_changed`` in the scripts)."""
    entries = [e.decode().partition(":") for e in r.lrange(tk.topic_changes, 0, -1)]
    versions = [int(v) for v, _, queue in entries if v.isdigit() and queue]
    if len(versions) < len(entries):
        return ["the log of topic pattern changes holds an entry that is not <version>:<queue>"]
    problems = []
    if len(entries) > defaults.TOPIC_CHANGE_LOG_LENGTH:
        problems.append(f"the log of topic pattern changes holds {len(entries)} entries, past its length")
    if versions != sorted(set(versions), reverse=True) or (versions and versions[0] > version):
        problems.append(f"the log of topic pattern changes is out of order or past version {version}: {versions[:5]}")
    return problems


def _envelopes_and_states(r: Any, d: k.DestinationKeys) -> tuple[dict[str, str], dict[str, str]]:
    """A destination's stored envelopes and states by message id."""
    envs = {i.decode(): v.decode() for i, v in r.hgetall(d.msg).items()}
    states = {i.decode(): v.decode() for i, v in r.hgetall(d.state).items()}
    return envs, states


def _delayed_count(states: dict[str, str]) -> int:
    """The copies waiting out their send's delay: scheduled, never delivered (delivery count 0)."""
    return sum(1 for state in states.values() if state.startswith("0|") and state.split("|", 2)[2][:1] == "s")


def _doc_count(env: str) -> int:
    """A stored envelope's document count: its head up to the first "," or "|"."""
    return int(env.split("|", 1)[0].split(",", 1)[0])


def _held_bytes(r: Any, tk: k.TenantKeys, envs: dict[str, str], states: dict[str, str]) -> int:
    """The bytes of a destination's copies neither acked nor dead, recounted from its data (what
    its ``held`` counter must say): each stored envelope and its documents' data and properties."""
    total = 0
    for msg_id, state in states.items():
        env = envs.get(msg_id)
        if env is None or state.split("|", 2)[2][:1] == "d":
            continue
        total += len(env.encode())
        for n in range(1, _doc_count(env) + 1):
            doc = f"{msg_id}.{n}"
            total += r.hstrlen(tk.doc, doc) + r.hstrlen(tk.doc_props, doc)
    return total


def _destinations(client: Any, tk: k.TenantKeys) -> list[k.DestinationKeys]:
    """Every destination holding messages: the live ones and those a removal still drains."""
    out = []
    for raw in client.smembers(tk.queues):
        qk = tk.queue(raw.decode())
        out.append(qk.destination())
        out.extend(qk.destination(s.decode()) for s in client.smembers(qk.subscribers))
    for marker in client.smembers(tk.deleting):
        removal_id, _, count = marker.decode().partition(":")
        out.extend(tk.removed_destination(removal_id, i) for i in range(int(count)))
    return out


def _journals(client: Any, tk: k.TenantKeys) -> tuple[dict[str, int], Counter[str], int, set[str], dict[str, str]]:
    """What the chunked sends under way (``send_journal``) still owe: the pending hash's fields
    they account for, a reference to each of their documents per destination not yet copied to, the
    usage bytes of those copies, which their first step counted, with those of the documents a
    staged send has not moved yet into the tenant's, those documents, and the entries of the owed
    set (``send_keys.send_owed``) they may hold: "<member>|<journal>" per destination not yet copied
    to or still reserved, each with the generation of the destination's queue it was owed in."""
    owes: dict[str, str] = {}
    pending: Counter[str] = Counter()
    refs: Counter[str] = Counter()
    reserved, unmoved = 0, set[str]()
    for name in client.zrange(tk.send_journals, 0, -1):
        if name.decode().startswith(send_keys.RESERVATION_NAME_PREFIX):
            journal_name = name.decode()[len(send_keys.RESERVATION_NAME_PREFIX):]
            reserved_here = _reserved(client, tk, journal_name)
            pending.update(reserved_here)
            owes.update((f"{field.split('|')[0]}|{journal_name}", field.split("|")[1]) for field in reserved_here)
            continue
        journal = {f.decode(): v.decode() for f, v in client.hgetall(tk.send_journal(name.decode())).items()}
        if not journal:
            continue
        reserved_n, reserved_b = journal["rv"].split("|") if "rv" in journal else (journal["nf"], None)
        docs = [f"{m.split('|', 2)[0]}.{n}" for f, m in journal.items() if f[0] == "m" and f[1:].isdigit()
                for n in range(1, int(m.split("|", 2)[1]) + 1)]
        if "dm" in journal:
            reserved += _unmoved(client, tk, name.decode(), journal, unmoved)
        # Before its first step a journal's documents have no reference counts (that step writes
        # them): each stands as one reference, which no count records.
        counts_owed = "dc" in journal
        for i in range(int(journal["c"]) + 1, int(journal["n"]) + 1):
            queue, gen, member = journal[f"d{i}"].split("|", 2)
            owes[f"{member}|{journal.get('ow', name.decode())}"] = gen  # a reserved send's: its reservation's name
            _, add_b, copy_b = journal[f"q{queue}"].split("|")
            pending[f"{member}|{gen}"] += int(reserved_n)
            pending[f"{member}|{gen}|b"] += int(reserved_b or add_b)
            reserved += int(copy_b)
            if not counts_owed:
                refs.update(docs)
        if counts_owed:
            refs.update(docs)
    return {f: n for f, n in pending.items() if n}, refs, reserved, unmoved, owes


def _keeps_order(client: Any, tk: k.TenantKeys, member: str, gen: str) -> bool:
    """Whether destination ``member`` is of an exclusive or group-ordered queue of generation ``gen``,
    whose entry in the owed set holds back the sends that would land before a chunked send's copies."""
    access, ordering, now = client.hmget(tk.destination_named(member)[0].config, "access", "ordering", "gen")
    return now is not None and now.decode() == gen and (access == b"exclusive" or ordering == b"group")


def _reserved(client: Any, tk: k.TenantKeys, name: str) -> Counter[str]:
    """The pending hash's fields a wide send's reservation (``send_reserve.lua``) accounts for."""
    reservation = {f.decode(): v.decode() for f, v in client.hgetall(send_keys.send_reservation(tk, name)).items()}
    pending: Counter[str] = Counter()
    if reservation:
        copies, size = reservation["rv"].split("|")
        for i in range(1, int(reservation["c"]) + 1):
            _, gen, member = reservation[f"d{i}"].split("|", 2)
            pending[f"{member}|{gen}"] += int(copies)
            pending[f"{member}|{gen}|b"] += int(size)
    return pending


def _unmoved(client: Any, tk: k.TenantKeys, name: str, journal: dict[str, str], docs: set[str]) -> int:
    """Adds to ``docs`` the documents a staged send's journal has not moved yet (its ``dm`` on);
    returns their usage bytes."""
    held, size = client.hgetall(send_keys.journal_documents(tk, name)), 0
    places = journal["sm"].split(",")
    for f in range(int(journal["dm"]), int(journal["nf"]) + 1):
        message_id, count = journal[f"m{f}"].split("|", 2)[:2]
        for n in range(1, int(count) + 1):
            docs.add(f"{message_id}.{n}")
            props = held.get(f"{places[f - 1]}.{n}p".encode(), b"")
            size += DOC_BYTES + len(held[f"{places[f - 1]}.{n}".encode()]) + (DOC_BYTES + len(props) if props else 0)
    return size


def _recount(client: Any, tk: k.TenantKeys) -> tuple[int, int, int]:
    """What the tenant's data holds, as the usage hash's fields count it: bytes, markers, messages."""
    stored, copies = 0, 0
    for d in _destinations(client, tk):
        for env in client.hvals(d.msg):
            stored += COPY_BYTES + len(env)
            copies += 1
        for _, fields in client.xrange(d.dlq):
            stored += len(fields.get(b"r", b""))
        for field, mark in client.hgetall(d.last_values).items():
            if field.startswith(b"i:"):
                stored += LAST_VALUE_BYTES + 2 * (len(mark) - 1)
    for doc in client.hkeys(tk.doc):
        props = client.hstrlen(tk.doc_props, doc)
        stored += DOC_BYTES + client.hstrlen(tk.doc, doc) + (DOC_BYTES + props if props else 0)
    markers = sum(int(v) for v in client.hvals(tk.marker_ledger))
    return stored + _journals(client, tk)[2], markers, copies


def recount_usage(client: Any, tenant: str) -> dict[str, int]:
    """The tenant's usage counted from its data (what ``aq:{T}:usage`` must say), as the
    scripts count it (``atomq.platform.queues.footprint``); de-duplication markers count as their
    ledger says, since an expired marker leaves nothing to recount."""
    stored, markers, copies = _recount(client, k.TenantKeys(tenant))
    return {"stored_bytes": stored + markers, "messages": copies}


def repair_usage(client: Any, tenant: str) -> dict[str, int]:
    """Sets the tenant's usage to what its data holds; returns the recount.

    The recount reads the whole keyspace, so sends and acks during it can
    leave the counters off by what they changed: run it when the tenant is
    quiet, and audit again after.
    """
    tk = k.TenantKeys(tenant)
    stored, markers, copies = _recount(client, tk)
    client.hset(tk.usage, mapping={"bytes": stored, "markers": markers, "messages": copies})
    for d in _destinations(client, tk):
        envs, states = _envelopes_and_states(client, d)
        client.set(d.held, _held_bytes(client, tk, envs, states))
        delayed = _delayed_count(states)
        if delayed:
            client.set(d.delayed, delayed)
        else:
            client.delete(d.delayed)
    return {"stored_bytes": stored + markers, "messages": copies}


def audit_tenant(client: RedisClient, tenant: str) -> list[str]:
    """Returns the broken invariants of a tenant's data (an empty list when consistent)."""
    r: Any = client  # redis-py types every reply as a union; these are bytes (decode_responses=False)
    tk = k.TenantKeys(tenant)
    problems: list[str] = []
    refs: Counter[str] = Counter()
    for d in _destinations(r, tk):
        envs, states = _envelopes_and_states(r, d)
        members = {m.decode() for m in r.zrange(d.all, 0, -1)}
        if not (set(envs) == set(states) == members):
            problems.append(f"{d.base}: msg, state and all disagree")
        ready = {e.decode(): f[b"m"].decode() for e, f in r.xrange(d.ready)}
        dead = {e.decode(): f[b"m"].decode() for e, f in r.xrange(d.dlq)}
        inflight = {m.decode() for m in r.zrange(d.inflight, 0, -1)}
        sched = {m.decode() for m in r.zrange(d.sched, 0, -1)}
        ranked = {m.decode() for m in r.zrange(d.ordered, 0, -1)}
        expiring = {m.decode() for m in r.zrange(d.expiry, 0, -1)}
        seen: dict[str, set[str]] = {"r": set(), "z": set(), "d": set(), "f": set(), "s": set(), "w": set()}
        for msg_id, state in states.items():
            where = state.split("|", 2)[2]
            tag, entry = where[:1], where[1:]
            seen[tag].add(msg_id)
            if tag == "r" and ready.get(entry) != msg_id:
                problems.append(f"{d.base}: {msg_id} is ready but not at {entry}")
            if tag == "d" and dead.get(entry) != msg_id:
                problems.append(f"{d.base}: {msg_id} is dead but not at {entry}")
            if tag == "f" and entry and not IN_FLIGHT_DETAIL.fullmatch(entry):
                problems.append(f"{d.base}: {msg_id} is in flight with a malformed holder and time {entry!r}")
        if set(ready.values()) != seen["r"] or len(ready) != len(seen["r"]):
            problems.append(f"{d.base}: ready stream and states disagree")
        if set(dead.values()) != seen["d"] or len(dead) != len(seen["d"]):
            problems.append(f"{d.base}: dead letter stream and states disagree")
        if inflight != seen["f"]:
            problems.append(f"{d.base}: in-flight set and states disagree")
        if sched != seen["s"]:
            problems.append(f"{d.base}: schedule and states disagree")
        delayed, waiting = int(r.get(d.delayed) or 0), _delayed_count(states)
        if delayed != waiting:
            problems.append(f"{d.base}: the delayed count says {delayed}, the schedule holds {waiting} never delivered")
        if ranked != seen["z"]:
            problems.append(f"{d.base}: ordered ready set and states disagree")
        if not expiring <= seen["r"] | seen["z"] | seen["s"] | seen["f"] | seen["w"]:
            problems.append(f"{d.base}: the expiry index names messages that are not waiting or in flight")
        problems += _index_problems(r, tk, d)
        problems += _last_value_problems(r, d, states)
        problems += _group_problems(r, d, envs, states)
        held, holding = int(r.get(d.held) or 0), _held_bytes(r, tk, envs, states)
        if held != holding:
            problems.append(f"{d.base}: held bytes say {held}, the messages hold {holding}")
        for msg_id, env in envs.items():
            for n in range(1, _doc_count(env) + 1):
                refs[f"{msg_id}.{n}"] += 1
    owed, journal_refs, _, unmoved, owes = _journals(r, tk)
    refs.update(journal_refs)
    entries = {e.decode() for e in r.zrange(send_keys.send_owed(tk), 0, -1)}
    stale = entries - owes.keys()
    if stale:
        problems.append(f"the owed set names destinations no chunked send under way owes: {sorted(stale)[:5]}")
    missing = sorted(e for e, gen in owes.items() if e not in entries and _keeps_order(r, tk, e.rsplit("|", 1)[0], gen))
    if missing:
        problems.append(f"the owed set misses ordered destinations chunked sends under way owe: {missing[:5]}")
    pending = {f.decode(): int(v) for f, v in r.hgetall(tk.pending_copies).items()}
    if pending != owed:
        problems.append(f"pending copies say {pending}, the chunked sends under way owe {owed}")
    stored_refs = {i.decode(): int(v) for i, v in r.hgetall(tk.doc_refs).items()}
    if stored_refs != {doc: n for doc, n in refs.items() if n > 1}:
        problems.append("document reference counts disagree with the messages that refer to them")
    docs = {i.decode() for i in r.hkeys(tk.doc)} | unmoved
    if docs != set(refs):
        problems.append("stored documents differ from the documents messages refer to")
    orphans = {i.decode() for i in r.hkeys(tk.doc_props)} - docs
    if orphans:
        problems.append(f"{len(orphans)} document properties without a document")
    stored = r.hmget(tk.usage, "bytes", "markers", "messages")
    kept = {"stored_bytes": int(stored[0] or 0) + int(stored[1] or 0), "messages": int(stored[2] or 0)}
    if int(stored[0] or 0) < 0 or int(stored[1] or 0) < 0 or kept["messages"] < 0:
        problems.append(f"usage counters are negative: {kept}")
    counted = recount_usage(r, tenant)
    if kept != counted:
        problems.append(f"usage counters say {kept}, the data holds {counted}")
    patterns = r.hgetall(tk.topic_patterns)
    total = patterns.pop(b"#n", None)
    held = sum(len(json.loads(v)) for f, v in patterns.items() if not f.startswith(b"#"))
    if total is not None and int(total) != held:
        problems.append(f"the count of topic patterns says {int(total)}, the queues attract {held}")
    problems += _topic_log_problems(r, tk, int(patterns.get(b"#v", 0)))
    return problems
