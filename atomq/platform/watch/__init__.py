"""Watching the platform: the figures an operator reads.

Counters of what happened to each queue's messages, the sampled overview, the nodes' records,
the sizes of the stores, memory use and the memory state, the request latency histogram, the
builds of the tenants' figures for ``/metrics``, and the consistency audit. It reads the store,
queue names and listeners' definitions; nothing in the request path waits on it.
"""
