"""The hosted dashboard at ``/dashboard/``: server-rendered pages for people.

The owner sees the server's state and every tenant with its usage, and may
open any tenant; a tenant sees its own queues and listeners. Per queue:
counts, a chart of send and ack rates, messages and dead letters to browse,
resend and delete, and the queue to clear or delete; per listener: its state
and counts, to pause, resume or restart.

Sign-in takes an API key and keeps a server-side session (``sessions``
holds the cookies, ``access`` checks them); every action is a plain form POST with a CSRF token. Pages
refresh their numbers from a JSON endpoint of their own (``live``) with a
small script shipped in ``static/``: no build step, nothing fetched from
elsewhere. ``create_app`` registers ``bp``, a plain Flask blueprint kept out
of the OpenAPI document.
"""

from atomq.api.dashboard import actions, errors, listener_page, live, pages, signin
from atomq.api.dashboard.blueprint import bp

__all__ = ["actions", "bp", "errors", "listener_page", "live", "pages", "signin"]
