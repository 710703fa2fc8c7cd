"""Listeners: what a tenant deployed on a queue, and the executions that run it.

The listeners' definitions and the state every node agrees on, the execution protocol (take,
extend, settle a batch) and the batch an execution took. Workers and Spark workers drive it
from outside the platform. It uses the store, queue names and the counters of ``watch``; an
execution works through ``QueueServer``.
"""
