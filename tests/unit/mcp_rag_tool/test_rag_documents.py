"""Reading documents by format: Markdown front matter, HTML structure, PDF pages (pypdf), broken files."""

from __future__ import annotations

import pytest

from mcp_rag_tool.chunking import ChunkLimits, chunk_sections
from mcp_rag_tool.documents import UnreadableDocument, kind_of, parse_document, parse_tags
from mcp_rag_tool.html_text import html_to_markdown


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica text line per string, one page per list."""
    objects: list[bytes] = []
    kids = " ".join(f"{4 + 2 * index} 0 R" for index in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for index, lines in enumerate(pages):
        content_number = 5 + 2 * index
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {content_number} 0 R >>".encode()
        )
        text = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
        objects.append(f"<< /Length {len(text)} >>\nstream\n{text}\nendstream".encode())
    info_number = len(objects) + 1
    objects.append(f"<< /Title ({title}) >>".encode() if title else b"<< >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info_number} 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _chunks(source: str, data: bytes) -> list[tuple[str, str]]:
    kind = kind_of(source)
    assert kind is not None
    parsed = parse_document(source, data, kind)
    return [(c.heading, c.text) for c in chunk_sections(parsed.sections, source, parsed.title, ChunkLimits(200, 0))]


def test_the_suffix_decides_the_format() -> None:
    assert [kind_of(name) for name in ("a.MD", "b.markdown", "c.txt", "d.html", "e.htm", "f.pdf", "g.docx")] == [
        "markdown",
        "markdown",
        "text",
        "html",
        "html",
        "pdf",
        None,
    ]
    assert kind_of("notes/meeting", "markdown") == "markdown"


def test_markdown_front_matter_gives_the_title_and_lower_cased_tags() -> None:
    data = b'---\ntitle: "Rate limits (v2)"\ntags: [API, v2, api]\n---\n# Limits\n\nThree hundred a minute.\n'

    parsed = parse_document("limits.md", data, "markdown")

    assert (parsed.title, parsed.tags) == ("Rate limits (v2)", ("api", "v2"))
    assert _chunks("limits.md", data) == [("Limits", "Three hundred a minute.")]


def test_tags_given_by_the_caller_come_first_and_a_title_given_wins() -> None:
    parsed = parse_document("n.md", b"---\ntags: ops\n---\n# Heading\n\nText.", "markdown", title="Mine", tags=["Q2"])

    assert (parsed.title, parsed.tags) == ("Mine", ("q2", "ops"))


def test_front_matter_tags_take_several_spellings() -> None:
    assert parse_tags("[a, 'b', \"c\"]") == ("a", "b", "c")
    assert parse_tags("ops infra") == ("ops", "infra")
    assert parse_tags("") == ()


def test_html_headings_make_heading_paths_and_scripts_styles_and_navigation_vanish() -> None:
    html = b"""<!DOCTYPE html><html><head><title>Ops wiki: timeouts</title><style>p{color:red}</style>
    <script>var secret = "x";</script></head><body>
    <nav><a href="/">Home</a></nav>
    <h1>Proxy timeouts</h1><p>Three timeouts   apply
    to upstreams.</p>
    <h2>Read timeout</h2><p>After <code>proxy_read_timeout</code> nginx answers <b>504</b>.</p>
    <ul><li>first item</li><li>second item</li></ul>
    <pre>proxy_read_timeout 60s;
    proxy_send_timeout 60s;</pre>
    <table><tr><td>a</td><td>b</td></tr></table>
    <p># not a heading</p>
    </body></html>"""

    parsed = parse_document("timeouts.html", html, "html")
    chunks = _chunks("timeouts.html", html)

    assert parsed.title == "Ops wiki: timeouts"
    assert chunks[0] == ("Proxy timeouts", "Three timeouts apply to upstreams.")
    read_section = "\n\n".join(text for heading, text in chunks if heading == "Proxy timeouts > Read timeout")
    assert "After proxy_read_timeout nginx answers 504." in read_section
    assert "- first item\n- second item" in read_section
    assert "```\nproxy_read_timeout 60s;\n    proxy_send_timeout 60s;\n```" in read_section
    assert "a | b" in read_section
    assert "\\# not a heading" in read_section
    everything = " ".join(text for _, text in chunks)
    assert "secret" not in everything
    assert "color" not in everything
    assert "Home" not in everything


def test_malformed_html_is_read_as_far_as_it_goes() -> None:
    title, markdown = html_to_markdown("<h2>Unclosed <p>para one<p>para two <div>tail &amp; more")

    assert title is None
    assert "Unclosed" in markdown
    assert "tail & more" in markdown


def test_a_pdf_is_read_page_by_page_with_its_title() -> None:
    pdf = make_pdf(
        [["Quarterly report.", "Revenue grew by twelve percent."], ["Costs fell.", "Headcount is stable."]],
        title="Q2 report",
    )

    parsed = parse_document("reports/q2.pdf", pdf, "pdf")
    chunks = _chunks("reports/q2.pdf", pdf)

    assert parsed.title == "Q2 report"
    assert [heading for heading, _ in chunks] == ["Page 1", "Page 2"]
    assert "Revenue grew by twelve percent." in chunks[0][1]
    assert "Headcount is stable." in chunks[1][1]


def test_a_pdf_without_a_title_is_named_by_its_file() -> None:
    assert parse_document("scan.pdf", make_pdf([["Hello."]]), "pdf").title == "scan.pdf"


def test_bytes_that_are_not_a_pdf_are_unreadable_not_a_crash() -> None:
    with pytest.raises(UnreadableDocument, match="not a readable PDF"):
        parse_document("broken.pdf", b"%PDF-1.4\nthis is not really a pdf", "pdf")


def test_text_in_another_encoding_is_read_with_replacement_characters() -> None:
    parsed = parse_document("latin.txt", "café crème".encode("latin-1"), "text")

    assert "caf" in parsed.sections[0].blocks[0].text
