"""Guards: what keeps one tenant, or all of them, within bounds.

Rate limits, failed key checks, the server settings every node shares and the server's limits
on what all tenants store. It uses the store, and the bounds of the queue settings and the
memory thresholds that the settings hold.
"""
