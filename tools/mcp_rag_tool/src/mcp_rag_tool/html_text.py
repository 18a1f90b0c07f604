"""HTML to Markdown-shaped text, with the standard library's tolerant ``html.parser``.

Headings become ``#`` lines (so the Markdown chunker finds the heading paths), block elements
become paragraphs, ``<pre>`` becomes a code fence, list items become lines and a table row
becomes one line whatever its cells hold (Sphinx wraps cell text in ``<p>``). What a reader
does not see as the page's content is dropped: scripts, styles, templates, ``<head>`` (except
its ``<title>``), forms, navigation, headers and footers of the site, sidebars and permalink
anchors (Sphinx's ``¶``, rustdoc's ``§``), and rustdoc's buttons and popups (``source``, ``Run``,
``ⓘ``, "Notable traits for ...", "Expand description"). When the page marks its own content (``<main>``,
``role="main"``, rustdoc's ``#main-content``, MkDocs' ``md-content``), only that is kept.
An API entry (``<dt id="heapq.nlargest">``: Sphinx, and any generator that gives its terms
ids) becomes a sub-heading, so every chunk of its description says which entry it documents.

``link_share`` (the share of the text that is link text) tells index pages and tables of
contents from content: the ranking puts such pages below content pages.
Malformed HTML is read as far as it goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["LINK_LIST_SHARE", "HtmlPage", "extract_html", "html_to_markdown"]

LINK_LIST_SHARE = 0.5
"""A page whose text is mostly link text (an index, a table of contents) is a link list."""

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
_SKIPPED_ROLES = frozenset({"navigation", "search", "banner", "contentinfo", "complementary"})
_SKIPPED_CLASSES = frozenset(
    {
        "headerlink", "anchor", "navheader", "navfooter", "footer", "related", "sphinxsidebar", "bodyfooter",
        "md-footer", "md-header", "md-sidebar", "md-source-file", "rustdoc-breadcrumbs", "out-of-band",
        "copyright", "skip-link",
        # rustdoc: source links and "since" versions, the "Run" button of examples, the ⓘ of examples
        # that panic or are not run, the "Notable traits" popup inside signatures, "Expand description".
        "rightside", "srclink", "test-arrow", "tooltip", "notable-traits", "hideme",
    }
)  # fmt: skip
# Where a page marks its own content; the first of these in the page is what gets indexed.
_MAIN_MARKERS = re.compile(
    r"""<main[\s>]|role\s*=\s*["']main["']|id\s*=\s*["']main-content["']|class\s*=\s*["'][^"']*\bmd-content\b""",
    re.IGNORECASE,
)
_PERMALINK_SIGNS = "¶§#🔗"
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_MARKDOWN_START = re.compile(r"^(\s{0,3})(#|```|~~~|={3,}\s*$|-{3,}\s*$)")


@dataclass(frozen=True)
class HtmlPage:
    title: str | None
    """The page's ``<title>``, or ``None``."""
    markdown: str
    link_share: float
    """Share of the kept text that is link text, 0 to 1."""

    @property
    def is_link_list(self) -> bool:
        return self.link_share >= LINK_LIST_SHARE


def extract_html(html: str) -> HtmlPage:
    """The page's title, its own content as Markdown-shaped text, and how much of it is links."""
    parser = _MarkdownWriter(main_only=_MAIN_MARKERS.search(html) is not None)
    parser.feed(html)
    parser.close()
    markdown = parser.markdown()
    return HtmlPage(parser.title, markdown, parser.link_share())


def html_to_markdown(html: str) -> tuple[str | None, str]:
    """The page's ``<title>`` (or ``None``) and its content as Markdown-shaped text."""
    page = extract_html(html)
    return page.title, page.markdown


def _is_skipped(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    if tag in _SKIPPED or tag == "footer":
        return True
    for name, value in attrs:
        if name == "role" and value in _SKIPPED_ROLES:
            return True
        if name == "class" and value and not _SKIPPED_CLASSES.isdisjoint(value.split()):
            return True
    return False


def _is_main(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    if tag == "main":
        return True
    for name, value in attrs:
        if (name == "role" and value == "main") or (name == "id" and value == "main-content"):
            return True
        if name == "class" and value and "md-content" in value.split():
            return True
    return False


class _MarkdownWriter(HTMLParser):
    def __init__(self, *, main_only: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self.title: str | None = None
        # main_only: text counts only inside the page's content element (entered once).
        self._main_only = main_only
        self._main_tag: str | None = None
        self._main_depth = 0
        self._main_done = False
        self._cell_depth = 0
        self._link_depth = 0
        self._link_chars = 0
        self._text_chars = 0
        self._context_level = 0
        self._dl_levels: list[int] = []
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
        if tag in _VOID and tag not in ("br", "hr"):
            return  # a void element never gets an end tag: it must not open a skipped span
        if _is_skipped(tag, attrs):
            self._skipped_tag, self._skip_depth = tag, 1
            return
        if self._main_only and not self._main_done:
            if self._main_tag is None:
                if _is_main(tag, attrs):
                    self._main_tag, self._main_depth = tag, 1
            elif tag == self._main_tag:
                self._main_depth += 1
        if tag == "a":
            self._link_depth += 1
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
            self._context_level = _HEADINGS[tag]
        elif self._cell_depth:
            if tag in _CELLS:
                self._cell_depth += 1
            self._line.append(" ")  # whatever a cell holds stays on its row's line
        elif tag == "dt" and any(name == "id" and value for name, value in attrs) and self._heading is None:
            # An API entry (or a glossary term with an anchor): a heading one level below its context.
            self._break(paragraph=True)
            level = min(6, (self._dl_levels[-1] if self._dl_levels else self._context_level) + 1)
            self._heading = (level, [])
            self._context_level = level
        elif tag in _CELLS:
            if self._line and not self._line[-1].endswith(" | "):
                self._line.append(" | ")
            self._cell_depth = 1
        elif tag in _BLOCKS:
            if tag == "dl":
                self._dl_levels.append(self._context_level)
            self._close_heading()  # an unclosed heading ends where a block starts
            self._break(paragraph=True)
        elif tag in _LINES:
            self._break(paragraph=False)
            if tag == "li":
                self._line.append("- ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._skip_depth:
            if tag == self._skipped_tag:
                self._skip_depth -= 1
            return
        if self._main_tag is not None and tag == self._main_tag and not self._main_done:
            self._main_depth -= 1
            if self._main_depth == 0:
                self._main_done = True
                self._close_heading()
                self._break(paragraph=True)
        if tag == "a" and self._link_depth:
            self._link_depth -= 1
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
        elif tag in _HEADINGS or (tag == "dt" and self._heading is not None and not self._cell_depth):
            self._close_heading()
        elif self._cell_depth:
            if tag in _CELLS:
                self._cell_depth -= 1
            else:
                self._line.append(" ")
        elif tag in _BLOCKS:
            if tag == "dl" and self._dl_levels:
                self._context_level = self._dl_levels.pop()
            self._break(paragraph=True)
        elif tag in _LINES:
            self._break(paragraph=False)

    def _keeps_text(self) -> bool:
        return not self._main_only or (self._main_tag is not None and not self._main_done)

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._title_parts is not None:
            self._title_parts.append(data)
        elif self._in_head or not self._keeps_text():
            return
        elif self._pre_depth:
            self._pre.append(data)
        elif self._heading is not None:
            self._heading[1].append(data)
        else:
            text = _SPACES.sub(" ", data.replace("\n", " "))
            self._line.append(text)
            visible = len(text.strip())
            self._text_chars += visible
            if self._link_depth:
                self._link_chars += visible

    # --- output ------------------------------------------------------------------------------

    def _close_heading(self) -> None:
        if self._heading is None:
            return
        level, parts = self._heading
        self._heading = None
        text = " ".join("".join(parts).split()).rstrip(_PERMALINK_SIGNS + " ")
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

    def link_share(self) -> float:
        return self._link_chars / self._text_chars if self._text_chars else 0.0

    def markdown(self) -> str:
        self._close_heading()
        self._break(paragraph=True)
        text = "\n".join(self._out)
        return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
