"""HTML extraction on real pages of three documentation generators: Sphinx (the Python 3.11 library
reference, PSF licence), DocBook XSL (PostgreSQL 15, PostgreSQL licence) and rustdoc 1.63 (the Rust
standard library's `std::env::args` and `std::process::Child`, MIT or Apache-2.0), as Debian ships them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rag_tool.chunking import markdown_sections
from mcp_rag_tool.documents import parse_document
from mcp_rag_tool.html_text import extract_html

FIXTURES = Path(__file__).parent / "fixtures"


def _page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "name", ["sphinx/heapq.html", "sphinx/pwd.html", "docbook/sql-droptable.html", "docbook/functions-logical.html"]
)
def test_site_chrome_is_dropped_and_the_content_kept(name: str) -> None:
    page = extract_html(_page(name))

    for chrome in ("Copyright", "Found a bug", "Created using", "Quick search", "Previous topic", "Prev", "Home"):
        assert chrome not in page.markdown, chrome
    assert "¶" not in page.markdown
    assert not page.is_link_list


def test_sphinx_headings_carry_no_permalink_sign() -> None:
    _, sections = markdown_sections(extract_html(_page("sphinx/heapq.html")).markdown)

    headings = [section.headings[-1] for section in sections if section.headings]
    assert headings[0] == "heapq — Heap queue algorithm"
    assert all("¶" not in heading for heading in headings)


def test_api_entries_become_sub_headings_so_their_description_says_what_it_documents() -> None:
    _, sections = markdown_sections(extract_html(_page("sphinx/heapq.html")).markdown)

    nlargest = next(s for s in sections if s.headings and s.headings[-1].startswith("heapq.nlargest"))
    assert nlargest.headings == ("heapq — Heap queue algorithm", "heapq.nlargest(n, iterable, key=None)")
    assert "Return a list with the n largest elements" in "\n".join(block.text for block in nlargest.blocks)


def test_a_table_row_stays_one_line_when_its_cells_hold_paragraphs() -> None:
    sphinx = extract_html(_page("sphinx/pwd.html")).markdown
    docbook = extract_html(_page("docbook/functions-logical.html")).markdown

    assert "2 | pw_uid | Numerical user ID" in sphinx.splitlines()
    assert "TRUE | NULL | NULL | TRUE" in docbook.splitlines()


def test_docbook_pages_keep_their_sections_and_synopsis() -> None:
    markdown = extract_html(_page("docbook/sql-droptable.html")).markdown

    assert "## Synopsis" in markdown
    assert "DROP TABLE [ IF EXISTS ] name [, ...] [ CASCADE | RESTRICT ]" in markdown
    assert "## Parameters" in markdown


@pytest.mark.parametrize("name", ["sphinx/numeric.html", "docbook/functions.html"])
def test_tables_of_contents_are_marked_as_link_lists(name: str) -> None:
    parsed = parse_document(name, _page(name).encode(), "html")

    assert parsed.link_list


@pytest.mark.parametrize("name", ["rustdoc/fn.args.html", "rustdoc/struct.Child.html"])
def test_rustdoc_buttons_and_popups_are_dropped(name: str) -> None:
    page = extract_html(_page(name))

    for chrome in ("Expand description", "Notable traits", "ⓘ", "Copy item path", "collapse all docs", "§"):
        assert chrome not in page.markdown, chrome
    lines = page.markdown.splitlines()
    assert not [line for line in lines if line in ("source", "Run") or line.endswith("· source")]
    assert not page.is_link_list


def test_rustdoc_signatures_stay_clean_so_the_heading_path_names_the_method() -> None:
    args = extract_html(_page("rustdoc/fn.args.html")).markdown
    _, sections = markdown_sections(extract_html(_page("rustdoc/struct.Child.html")).markdown)

    assert "```\npub fn args() -> Args\n```" in args  # the popup of Args' notable traits sat inside it
    assert "Returns the arguments that this program was started with" in args
    kill = next(s for s in sections if s.headings and s.headings[-1].startswith("pub fn kill"))
    assert kill.headings == (
        "Struct std::process::Child",
        "Implementations",
        "impl Child",
        "pub fn kill(&mut self) -> Result<()>",
    )
    assert "Forces the child process to exit" in "\n".join(block.text for block in kill.blocks)


def test_only_the_marked_main_content_is_kept_when_a_page_has_one() -> None:
    html = (
        "<html><head><title>T</title></head><body><div class='sidebar'><p>Other pages: a, b</p></div>"
        "<main><h1>Widgets<a class='headerlink' href='#w'>¶</a></h1><p>Widgets spin.</p></main>"
        "<p>Site-wide banner text</p></body></html>"
    )

    page = extract_html(html)

    assert page.markdown == "# Widgets\n\nWidgets spin.\n"
