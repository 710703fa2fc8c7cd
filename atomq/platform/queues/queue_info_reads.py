"""A queue's info built from the counts read of it: what ``Components`` answers for a queue or a
tenant's list, kept apart from the reads themselves."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from atomq import defaults
from atomq.platform.models import (
    ConsumerInfo,
    DestinationCounts,
    Durability,
    OnExpire,
    QueueAccess,
    QueueInfo,
    QueueModel,
    QueueOrdering,
)
from atomq.platform.queues.dead_letter_targets import NAME_FIELD as DEAD_LETTER_QUEUE_FIELD
from atomq.platform.queues.queue_config import read_limits
from atomq.platform.watch.counters import QUEUE_COUNTS

PER_DEST = 9
"""The reads of one destination in a queue's info (``Components._queue_infos``): its stream, ranked, scheduled,
in-flight and dead counts, its held bytes, its delayed count, the messages waiting behind their
group's head and the groups with a message out."""



def queue_info_from_reads(name: str, model: str, cfg: dict[bytes, bytes], dests: list[str | None], exclusive: bool,
                raw: list[Any], ranked_by_priority: Counter[int]) -> QueueInfo:
    """One queue's info from the reads ``Components._queue_infos`` made of it: ``PER_DEST`` a
    destination, then an exclusive queue's consumers, its topics and its totals."""
    ack_timeout_s = int(cfg[b"ack_timeout_ms"]) / 1000
    consumers = consumers_in_line(raw[-3], ack_timeout_s) if exclusive else ()
    per_sub: dict[str, DestinationCounts] = {}
    total = [0, 0, 0, 0, 0, 0, 0, 0]
    by_priority: Counter[int] = Counter(ranked_by_priority)
    for i, sub in enumerate(dests):
        stream, ordered, sched, flight, dead, held, delayed, waiting, groups = raw[i * PER_DEST:(i + 1) * PER_DEST]
        counts = DestinationCounts(depth=stream + ordered + sched + waiting, in_flight=flight, dead_letters=dead,
                                   scheduled=sched, held_bytes=int(held or 0), delayed=int(delayed or 0))
        by_priority[defaults.DEFAULT_PRIORITY] += stream
        total[0] += counts.depth
        total[1] += counts.in_flight
        total[2] += counts.dead_letters
        total[3] += counts.scheduled
        total[4] += counts.held_bytes
        total[5] += counts.delayed
        total[6] += groups
        total[7] += waiting
        if sub is not None:
            per_sub[sub] = counts
    return QueueInfo(
        name=name,
        model=QueueModel(model),
        max_redeliveries=int(cfg[b"max_redeliveries"]),
        ack_timeout_s=ack_timeout_s,
        depth=total[0],
        in_flight=total[1],
        dead_letters=total[2],
        scheduled=total[3],
        delayed=total[5],
        subscribers=per_sub,
        depth_by_priority={p: n for p, n in sorted(by_priority.items(), reverse=True) if n},
        message_ttl_s=int(cfg.get(b"message_ttl_ms", 0)) / 1000,
        on_expire=OnExpire(cfg.get(b"on_expire", b"dead_letter").decode()),
        last_value=cfg.get(b"lv") == b"1",
        last_value_key=cfg.get(b"lv_key", b"").decode(),
        access=QueueAccess.EXCLUSIVE if exclusive else QueueAccess.NON_EXCLUSIVE,
        consumers=consumers,
        totals={kind: int(n or 0) for kind, n in zip(QUEUE_COUNTS, raw[-1])},
        topics=tuple(json.loads(raw[-2])) if raw[-2] else (),
        held_bytes=total[4],
        limits=read_limits(cfg),
        durability=Durability(cfg.get(b"durability", b"async").decode()),
        delay_s=int(cfg.get(b"delay_ms", 0)) / 1000,
        ordering=QueueOrdering(cfg.get(b"ordering", b"none").decode()),
        dead_letter_queue=cfg.get(DEAD_LETTER_QUEUE_FIELD.encode(), b"").decode(),
        groups=total[6],
        held_by_group=total[7],
    )


def consumers_in_line(raw: dict[bytes, bytes], ack_timeout_s: float) -> tuple[ConsumerInfo, ...]:
    """An exclusive queue's consumers still in line (those silent for ``ack_timeout_s`` have lost
    their place, whether or not a call has dropped them yet), the active one first, then the
    others in the order they first called."""
    active = raw.get(b"#active", b"").decode()
    now = time.time()
    line = []
    for name, value in raw.items():
        if name == b"#active":
            continue
        first, last = (int(v) / 1000 for v in value.split(b"|"))
        if last + ack_timeout_s > now:
            line.append((name.decode() != active, first, ConsumerInfo(name.decode(), name.decode() == active, last)))
    return tuple(c for _, _, c in sorted(line, key=lambda entry: entry[:2]))
