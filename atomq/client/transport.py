"""The client's HTTP: urllib3's connection pools, the library requests itself runs on.

A consumer's get of 100 messages that acks the batch before cost the caller
0.9 ms of CPU through a ``requests.Session`` and 0.4 ms through urllib3 with
orjson reading the answer (one client, one node on the same machine): the
rest was requests' own work on each call (its hooks, prepared requests,
cookies and adapters), which this client never uses. What requests gave the
client is kept: the proxy the environment names, chosen by requests' own
rules (a user and password in its URL sign in to it; SOCKS with PySocks),
the CA bundle or directory it names (``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``) or certifi's, no retry (a request that may have reached
the node is never sent twice), redirects followed, and keep-alive
connections.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import certifi
import requests.utils
import urllib3
from urllib3.util import Retry, Timeout

NO_RETRY = Retry(total=None, connect=0, read=0, status=0, other=0, redirect=10, raise_on_redirect=True)
"""As requests does it: nothing is sent again, redirects are followed (up to 10)."""


class TransportError(Exception):
    """The node could not be reached, or the connection broke before its answer came."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Any
    data: bytes


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url``, chosen by requests' own rules (``<SCHEME>_PROXY``,
    ``ALL_PROXY``, per-host entries, ``NO_PROXY`` with its CIDR and ``host:port`` entries, a proxy
    given without a scheme read as ``http://``)."""
    proxy = requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
    return requests.utils.prepend_scheme_if_needed(proxy, "http") if proxy else None


def proxy_manager(proxy: str, **options: Any) -> urllib3.PoolManager:
    """A pool manager through ``proxy``. An HTTP proxy signs in with the user and password its URL
    carries, as requests does (urllib3 itself leaves them out); a SOCKS proxy needs PySocks
    (``pip install requests[socks]``), as it did through requests."""
    if proxy.lower().startswith("socks"):
        if importlib.util.find_spec("socks") is None:  # urllib3's module would warn, then fail
            raise urllib3.exceptions.ProxySchemeUnknown(f"{urlsplit(proxy).scheme} (install PySocks)")
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(proxy, **options)
    auth = urllib3.util.parse_url(proxy).auth
    headers = urllib3.make_headers(proxy_basic_auth=unquote(auth)) if auth else None
    return urllib3.ProxyManager(proxy, proxy_headers=headers, **options)


def ca_options() -> dict[str, str]:
    """Where TLS finds the CAs it trusts: the bundle (a file) or the directory the environment
    names (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``), else certifi's bundle."""
    named = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if named and os.path.isdir(named):
        return {"ca_cert_dir": named}
    return {"ca_certs": named or certifi.where()}


class Transport:
    """Requests to one node, over keep-alive connections (up to 10 kept a host, as requests keeps them)."""

    def __init__(self, url: str) -> None:
        proxy = proxy_for(url)
        options: dict[str, Any] = {"retries": NO_RETRY, "maxsize": 10, **ca_options()}
        self._unusable: str | None = None
        try:
            self._pools = proxy_manager(proxy, **options) if proxy else urllib3.PoolManager(**options)
        except urllib3.exceptions.ProxySchemeUnknown as exc:
            # A scheme no manager takes (SOCKS without PySocks): every call fails saying so, as through requests.
            self._pools, self._unusable = urllib3.PoolManager(**options), f"the proxy cannot be used: {exc}"

    def request(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str],
                timeout: float) -> Answer:
        if self._unusable is not None:
            raise TransportError(self._unusable)
        try:
            response = self._pools.request(method, url, body=body, headers=headers,
                                           timeout=Timeout(connect=timeout, read=timeout))
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(_reason(exc)) from None
        return Answer(response.status, response.headers, response.data)

    def close(self) -> None:
        self._pools.clear()


def _reason(exc: urllib3.exceptions.HTTPError) -> str:
    """What went wrong, without urllib3's wrapping (a MaxRetryError names the cause it wraps)."""
    cause = getattr(exc, "reason", None)
    return str(cause or exc)
