"""Queues: what a tenant sends, gets and manages.

Queue components and their settings and config, names, what a send fans out to (routes,
topics and their index), sending, delivery and settling, browsing and bulk management,
streaming consumers, request records (a retried request stores once) and what a message costs
the store. It uses the store, what the queue server's parts share (``shared``) and the
counters of ``watch``; it knows no HTTP.
"""
