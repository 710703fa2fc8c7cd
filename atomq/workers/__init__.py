"""Listeners and forked executions (rq work horses) that run the tenants' processes."""
