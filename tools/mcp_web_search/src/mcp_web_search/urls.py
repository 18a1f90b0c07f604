"""Pure URL helpers for search results: tracking parameters, duplicate detection, site restriction."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["clean_url", "host_in_site", "normalize_site", "url_key"]

# Parameters that say where a click came from, never which page it is.
_TRACKING_PREFIXES = ("utm_", "mtm_", "pk_", "_hs")
_TRACKING_NAMES = frozenset(
    {"gclid", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "igshid", "mc_cid", "mc_eid", "ref_src"}
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
# A host name: labels of letters, digits and hyphens (IDNs in their xn-- form or as Unicode letters).
_SITE = re.compile(r"^(?=.{1,253}$)([\w-]{1,63}\.)*[\w-]{1,63}$")


def _is_tracking(name: str) -> bool:
    lowered = name.lower()
    return lowered in _TRACKING_NAMES or lowered.startswith(_TRACKING_PREFIXES)


def clean_url(url: str) -> str:
    """``url`` without tracking parameters (``utm_*``, ``gclid``...); anything else is kept as it was."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(name, value) for name, value in pairs if not _is_tracking(name)]
    if len(kept) == len(pairs):
        return url
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))


def url_key(url: str) -> str:
    """What two URLs share when they are the same page.

    Ignored: the scheme (http and https serve the same page), host case, a default port, a trailing
    slash, the fragment, tracking parameters and the order of the other query parameters.
    """
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    path = parts.path.rstrip("/") or "/"
    query = sorted(
        (name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True) if not _is_tracking(name)
    )
    return f"{host}{path}?{urlencode(query)}"


def normalize_site(site: str) -> str | None:
    """The host name a ``site`` argument names (``https://Docs.Python.org/3/`` gives ``docs.python.org``).

    ``None`` when it is not a host name.
    """
    text = site.strip()
    if "://" in text:
        text = urlsplit(text).hostname or ""
    text = text.split("/", 1)[0].lower().rstrip(".")
    text = text.removeprefix("www.") if text.count(".") > 1 else text
    return text if text and "." in text and _SITE.match(text) else None


def host_in_site(url: str, site: str) -> bool:
    """Whether ``url`` is on ``site`` (a normalised host name) or one of its subdomains."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    return host == site or host.endswith("." + site)
