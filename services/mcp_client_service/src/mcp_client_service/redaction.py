"""Keeping credentials out of error texts, status pages and logs.

An error can quote what it was given: a header value (``Illegal header value b'Bearer ...\\n'``),
an environment value, a URL with ``user:password@`` or a ``?token=`` query. Texts that leave the
process pass through ``redact`` first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "RedactUrlsFilter", "redact", "redact_urls", "secret_forms"]

MASK = "***"

_MIN_SECRET_CHARS = 4
"""Shorter values (``"1"``, ``"yes"``) would mask ordinary words, and guess nothing worth hiding."""

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>`]+")


def _redact_url(match: re.Match[str]) -> str:
    url = match.group(0)
    try:
        parts = urlsplit(url)
    except ValueError:  # an unparsable URL (a bad IPv6 host, say) is masked whole
        return url.split("://", 1)[0] + "://" + MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = MASK if parts.query else ""
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_urls(text: str) -> str:
    """Every URL in ``text`` without its userinfo, query and fragment: ``http://***@host/mcp?***``."""
    return _URL.sub(_redact_url, text)


def secret_forms(values: Iterable[str]) -> list[str]:
    """The values, and the escaped forms an error message may quote them in (``repr``, ``b'...'``).

    A token pasted with a trailing newline is quoted as ``...\\n`` by the HTTP library that
    refuses it, which a plain search for the value would miss. Longest first, so that a value
    containing another is masked whole.
    """
    forms: set[str] = set()
    for value in values:
        if len(value.strip()) < _MIN_SECRET_CHARS:
            continue
        forms.update({value, value.strip(), repr(value)[1:-1], repr(value.encode("utf-8", "replace"))[2:-1]})
    return sorted((form for form in forms if len(form) >= _MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with each of ``secrets`` (see ``secret_forms``) masked, and its URLs redacted."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return redact_urls(text)


class RedactUrlsFilter(logging.Filter):
    """Redacts URLs in the records of a standard-library logger (the SDK logs the URL it connects to)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_urls(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
