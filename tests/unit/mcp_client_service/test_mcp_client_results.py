"""Turning an MCP ``CallToolResult`` into the ``call-tool`` answer, and reading the deadline header."""

from __future__ import annotations

import json

from mcp_types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from mcp_client_service.calls.results import dump_content, to_response


def test_content_blocks_are_the_mcp_models_as_camel_case_json() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="a cat"),
            ImageContent(data="aGVsbG8=", mime_type="image/png"),
        ],
        structured_content={"caption": "a cat"},
    )

    response = to_response(result, server="vision", duration_ms=12.5, max_chars=1000)

    assert response.content == [
        {"type": "text", "text": "a cat"},
        {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
    ]
    assert response.structured_content == {"caption": "a cat"}
    assert (response.is_error, response.server, response.duration_ms) == (False, "vision", 12.5)


def test_a_servers_own_error_result_passes_through() -> None:
    result = CallToolResult(content=[TextContent(text="no such city")], is_error=True)

    response = to_response(result, server="weather", duration_ms=1.0, max_chars=1000)

    assert response.is_error
    assert response.content == [{"type": "text", "text": "no such city"}]


def test_structured_content_that_is_not_an_object_is_wrapped_as_result() -> None:
    result = CallToolResult(content=[TextContent(text="[1, 2]")], structured_content=[1, 2])

    assert to_response(result, server="s", duration_ms=1.0, max_chars=1000).structured_content == {"result": [1, 2]}


BLOCK_JSON = len('{"type":"text","text":""}')
"""What a text block costs beyond its text."""


def test_text_beyond_the_limit_is_cut_with_a_visible_marker_and_the_blocks_left_are_counted() -> None:
    result = CallToolResult(
        content=[TextContent(text="a" * 80), TextContent(text="b" * 90), TextContent(text="c"), TextContent(text="d")]
    )

    first, second, rest = dump_content(result, max_chars=200)

    assert first["text"] == "a" * 80
    kept = 200 - 2 * BLOCK_JSON - 1 - 80  # each block's JSON counts too, and the comma between them
    assert second["text"].startswith("b" * kept + f"\n[... cut here: {90 - kept} more characters")
    assert "limit 200" in second["text"]
    assert rest == {
        "type": "text",
        "text": "[... cut here: 2 more content blocks left out of this tool result (limit 200 characters)]",
    }


def test_a_result_of_many_tiny_blocks_is_bounded_by_the_limit_with_one_marker() -> None:
    result = CallToolResult(content=[TextContent(text="x") for _ in range(100_000)])

    blocks = dump_content(result, max_chars=10_000)

    assert len(json.dumps(blocks, separators=(",", ":"))) < 10_000 + 300  # the limit, and one marker
    assert blocks[-1]["text"].startswith(f"[... cut here: {100_000 - len(blocks) + 1} more content blocks left out")
    assert all(block == {"type": "text", "text": "x"} for block in blocks[:-1])


def test_oversized_structured_content_is_dropped_the_text_carries_the_result() -> None:
    result = CallToolResult(content=[TextContent(text="x" * 500)], structured_content={"result": "x" * 500})

    response = to_response(result, server="s", duration_ms=1.0, max_chars=100)

    assert response.structured_content is None
    assert len(response.content[0]["text"]) < 200


def test_oversized_structured_content_leaves_a_marker_saying_so() -> None:
    result = CallToolResult(content=[TextContent(text="short")], structured_content={"result": "x" * 500})

    response = to_response(result, server="s", duration_ms=1.0, max_chars=100)

    assert response.content[0] == {"type": "text", "text": "short"}
    assert response.content[1]["text"].startswith("[... cut here: structuredContent of 514 characters")
    assert "limit 100" in response.content[1]["text"]


def test_structured_content_within_the_limit_is_kept_whole() -> None:
    result = CallToolResult(content=[TextContent(text="x" * 90)], structured_content={"result": "x" * 70})

    assert to_response(result, server="s", duration_ms=1.0, max_chars=100).structured_content == {"result": "x" * 70}


def test_a_binary_block_beyond_the_limit_is_replaced_by_a_marker_smaller_ones_pass() -> None:
    small = ImageContent(data="aGVsbG8=", mime_type="image/png")
    large = ImageContent(data="A" * 400, mime_type="image/png")
    result = CallToolResult(content=[small, large])

    first, second = dump_content(result, max_chars=200)

    assert first == {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}
    assert second["type"] == "text"
    assert second["text"].startswith("[... cut here: an image block of 4")
    assert "A" * 10 not in second["text"]


def test_the_text_of_an_embedded_resource_is_cut_like_text() -> None:
    resource = EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="r" * 150))
    result = CallToolResult(content=[resource])

    (block,) = dump_content(result, max_chars=150)

    overhead = len(json.dumps({**block, "resource": {**block["resource"], "text": ""}}, separators=(",", ":")))
    assert block["type"] == "resource"
    assert block["resource"]["uri"] == "file:///a.txt"
    kept = 150 - overhead
    assert block["resource"]["text"].startswith("r" * kept + f"\n[... cut here: {150 - kept} more characters")
