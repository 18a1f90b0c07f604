"""A downloaded page to readable text: which content types are read, and HTML's main text as Markdown.

Pure functions over bytes (trafilatura does the HTML work); no I/O.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from typing import Literal

import trafilatura

__all__ = ["ContentKind", "Extracted", "UnsupportedContent", "content_kind", "extract"]

ContentKind = Literal["html", "markdown", "text", "json"]

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
_JSON_TYPES = frozenset({"application/json", "text/json", "application/ld+json"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_HEADING = re.compile(r"^#\s+(.+)$", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n{3,}")


class UnsupportedContent(Exception):
    """The page is of a kind fetch_url does not read; ``message`` says so and what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Extracted:
    title: str | None
    text: str


def _media_type(content_type: str | None) -> tuple[str, str | None]:
    """``("text/html", "utf-8")`` from ``text/html; charset=UTF-8``."""
    if not content_type:
        return "", None
    media, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media.strip().lower(), charset


def content_kind(content_type: str | None, head: bytes) -> ContentKind:
    """How to read a body of ``content_type`` (``head``: its first bytes, for a missing type).

    Raises ``UnsupportedContent`` for anything but HTML, Markdown, plain text and JSON.
    """
    media, _ = _media_type(content_type)
    if media in _HTML_TYPES:
        return "html"
    if media in _MARKDOWN_TYPES:
        return "markdown"
    if media in _JSON_TYPES or media.endswith("+json"):
        return "json"
    if media.startswith("text/"):
        return "text"
    if not media:
        start = head.lstrip()[:64].lower()
        if start.startswith((b"<!doctype html", b"<html")):
            return "html"
        if b"\x00" not in head:
            return "text"
    if media == "application/pdf":
        raise UnsupportedContent(
            "The URL is a PDF document, which fetch_url cannot read; look for an HTML version of the same content."
        )
    raise UnsupportedContent(
        f"The URL serves {media or 'binary data'}, which fetch_url cannot read: it reads HTML pages, plain text, "
        "Markdown and JSON. Fetch a web page instead."
    )


def _decode(body: bytes, charset: str | None, kind: ContentKind) -> str:
    if charset is None and kind == "html":
        declared = _META_CHARSET.search(body[:4096])
        charset = declared.group(1).decode("ascii", "replace") if declared else None
    try:
        codecs.lookup(charset or "utf-8")
    except LookupError:
        charset = None
    return body.decode(charset or "utf-8", errors="replace")


def _html_title(html: str) -> str | None:
    metadata = trafilatura.extract_metadata(html)
    if metadata is not None and metadata.title:
        return str(metadata.title).strip()
    found = _TITLE.search(html)
    return " ".join(found.group(1).split()) if found else None


def _html_to_markdown(html: str, url: str) -> str:
    markdown = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_comments=False,
        favor_recall=True,
    )
    if markdown:
        return str(markdown)
    # No main text found (a very short page, an app shell): all of the page's text is the next best thing.
    return str(trafilatura.html2txt(html))


def extract(body: bytes, content_type: str | None, url: str) -> Extracted:
    """The readable text of a page (Markdown for HTML) and its title when it has one."""
    kind = content_kind(content_type, body[:512])
    _, charset = _media_type(content_type)
    text = _decode(body, charset, kind)
    if kind == "html":
        title = _html_title(text)
        content = _html_to_markdown(text, url)
    elif kind == "json":
        title = None
        try:
            content = "```json\n" + json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n```"
        except ValueError:  # cut by the size cap, or not JSON after all: show it as it is
            content = text
    else:
        heading = _HEADING.search(text) if kind == "markdown" else None
        title = heading.group(1).strip() if heading else None
        content = text
    return Extracted(title=title or None, text=_BLANK_LINES.sub("\n\n", content.strip()))
