"""HTML to Markdown-shaped text, with the standard library's tolerant ``html.parser``.

Headings become ``#`` lines (so the Markdown chunker finds the heading paths), block elements
become paragraphs, ``<pre>`` becomes a code fence, list items and table rows become lines.
What a reader does not see as content is dropped: scripts, styles, templates, ``<head>``
(except its ``<title>``), navigation and forms. Malformed HTML is read as far as it goes.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_to_markdown"]

_SKIPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "nav", "form", "select"}
)
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_BLOCKS = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "ul", "ol", "dl",
        "table", "thead", "tbody", "tfoot", "figure", "figcaption", "details", "summary", "address", "hr", "body",
        "center", "fieldset",
    }
)  # fmt: skip
_LINES = frozenset({"li", "tr", "dt", "dd", "br", "caption"})
_CELLS = frozenset({"td", "th"})
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_MARKDOWN_START = re.compile(r"^(\s{0,3})(#|```|~~~|={3,}\s*$|-{3,}\s*$)")


def html_to_markdown(html: str) -> tuple[str | None, str]:
    """The page's ``<title>`` (or ``None``) and its content as Markdown-shaped text."""
    parser = _MarkdownWriter()
    parser.feed(html)
    parser.close()
    return parser.title, parser.markdown()


class _MarkdownWriter(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: str | None = None
        self._out: list[str] = []
        self._line: list[str] = []
        self._skip_depth = 0
        self._skipped_tag: str | None = None
        self._in_head = False
        self._title_parts: list[str] | None = None
        self._heading: tuple[int, list[str]] | None = None
        self._pre_depth = 0
        self._pre: list[str] = []

    # --- structure ---------------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skip_depth:
            if tag == self._skipped_tag:
                self._skip_depth += 1
            return
        if tag in _SKIPPED or (tag == "div" and ("role", "navigation") in attrs):
            self._skipped_tag, self._skip_depth = tag, 1
            return
        if tag == "head":
            self._in_head = True
        elif tag == "title":
            self._title_parts = []
        elif tag == "pre":
            if self._pre_depth == 0:
                self._break(paragraph=True)
                self._pre = []
            self._pre_depth += 1
        elif self._pre_depth:
            return
        elif tag in _HEADINGS:
            self._close_heading()
            self._break(paragraph=True)
            self._heading = (_HEADINGS[tag], [])
        elif tag in _BLOCKS:
            self._close_heading()  # an unclosed heading ends where a block starts
            self._break(paragraph=True)
        elif tag in _LINES:
            self._break(paragraph=False)
            if tag == "li":
                self._line.append("- ")
        elif tag in _CELLS and self._line and not self._line[-1].endswith(" | "):
            self._line.append(" | ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._skip_depth:
            if tag == self._skipped_tag:
                self._skip_depth -= 1
            return
        if tag == "head":
            self._in_head = False
        elif tag == "title" and self._title_parts is not None:
            title = _SPACES.sub(" ", "".join(self._title_parts)).strip()
            self.title = self.title or title or None
            self._title_parts = None
        elif tag == "pre" and self._pre_depth:
            self._pre_depth -= 1
            if self._pre_depth == 0:
                self._emit_code("".join(self._pre))
        elif self._pre_depth:
            return
        elif tag in _HEADINGS:
            self._close_heading()
        elif tag in _BLOCKS:
            self._break(paragraph=True)
        elif tag in _LINES:
            self._break(paragraph=False)

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._title_parts is not None:
            self._title_parts.append(data)
        elif self._in_head:
            return
        elif self._pre_depth:
            self._pre.append(data)
        elif self._heading is not None:
            self._heading[1].append(data)
        else:
            self._line.append(_SPACES.sub(" ", data.replace("\n", " ")))

    # --- output ------------------------------------------------------------------------------

    def _close_heading(self) -> None:
        if self._heading is None:
            return
        level, parts = self._heading
        self._heading = None
        text = " ".join("".join(parts).split())
        if text:
            self._out.append(f"{'#' * level} {text}")

    def _break(self, *, paragraph: bool) -> None:
        line = _SPACES.sub(" ", "".join(self._line)).strip()
        self._line = []
        if line and line not in ("-", "|"):
            # Text that merely looks like Markdown syntax must not become a heading or a fence.
            self._out.append(_MARKDOWN_START.sub(r"\1\\\2", line))
        if paragraph and self._out and self._out[-1] != "":
            self._out.append("")

    def _emit_code(self, code: str) -> None:
        body = code.strip("\n")
        if body.strip():
            fence = "````" if "```" in body else "```"
            self._out.extend([fence, body, fence, ""])

    def markdown(self) -> str:
        self._close_heading()
        self._break(paragraph=True)
        text = "\n".join(self._out)
        return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
