"""The dashboard's cookies: one names a session, the other guards the sign-in form.

The session cookie holds only a random id; the record it names, and why it
holds no key, is ``atomq.tenants.dashboard_sessions``'s.
"""

SESSION_COOKIE = "atomq_session"
SIGNIN_COOKIE = "atomq_signin"
COOKIE_PATH = "/dashboard"
