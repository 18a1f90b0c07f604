"""Images in runs: the URLs a caller may send, the stored form by reference, references resolved before an LLM call,
and a tool result's image blocks as image parts."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable

import pytest

from agent_service.core.images import DecodedImage, by_reference, check_images, has_images
from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from agent_service.engine.images import MISSING_IMAGE, RunImages, image_room, image_summaries
from agent_service.engine.state import RunState
from agent_service.engine.tool_results import tool_result_content
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.wire import (
    CallToolResponse,
    ContentPart,
    ImagePart,
    ImageUrl,
    Message,
    TextPart,
    ToolCall,
    ToolResultImage,
)
from support.scripted import Scripted, answer

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PNG_SHA = hashlib.sha256(PNG).hexdigest()


def user(*urls: str, text: str = "What is this?") -> Message:
    parts: list[ContentPart] = [TextPart(text=text), *(ImagePart(image_url=ImageUrl(url=url)) for url in urls)]
    return Message(role="user", content=parts)


def refused(messages: list[Message], max_bytes: int = 1 << 20) -> ApiError:
    with pytest.raises(ApiError) as refusal:
        check_images(messages, max_bytes)
    return refusal.value


def test_https_and_data_image_urls_are_accepted() -> None:
    check_images([user("https://images.example/cat.png", PNG_URL)], 1 << 20)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://images.example/cat.png", "https://"),
        ("ftp://images.example/cat.png", "https://"),
        ("/api/v1/agent/images/" + "a" * 64, "https://"),
        ("data:text/plain;base64,aGVsbG8=", "data:image"),
        ("data:image/svg+xml;base64,PHN2Zz4=", "not accepted"),
        ("data:image/png;base64,not base64!", "base64"),
        ("data:image/png,rawbytes", "data:image"),
    ],
)
def test_other_image_urls_are_refused_naming_the_message(url: str, says: str) -> None:
    refusal = refused([Message(role="user", content="hi"), user(url)])
    assert (refusal.status, refusal.code) == (400, "invalid_request")
    assert refusal.message.startswith("messages.1: image_url")
    assert says in refusal.message


def test_a_runs_images_past_its_cap_are_refused_with_413() -> None:
    refusal = refused([user(PNG_URL), user(PNG_URL)], max_bytes=len(PNG) * 2 - 1)
    assert (refusal.status, refusal.code) == (413, "images_too_large")
    check_images([user(PNG_URL), user(PNG_URL)], len(PNG) * 2)


def test_a_stored_message_keeps_its_data_images_by_reference() -> None:
    message = user(PNG_URL, "https://images.example/cat.png")
    stored, images = by_reference(message)
    assert images == [DecodedImage("image/png", PNG)]
    assert stored.content == [
        TextPart(text="What is this?"),
        ImagePart(image_url=ImageUrl(url=f"/api/v1/agent/images/{PNG_SHA}")),
        ImagePart(image_url=ImageUrl(url="https://images.example/cat.png")),
    ]
    plain = Message(role="user", content="no images")
    assert by_reference(plain) == (plain, [])


class CountingSource:
    def __init__(self, images: dict[str, DecodedImage]) -> None:
        self.stored = images
        self.reads: list[set[str]] = []

    async def images(self, tenant: str, shas: Iterable[str]) -> dict[str, DecodedImage]:
        assert tenant == "acme"
        wanted = set(shas)
        self.reads.append(wanted)
        return {sha: image for sha, image in self.stored.items() if sha in wanted}


async def test_references_become_data_urls_before_each_llm_call_read_once_per_run() -> None:
    source = CountingSource({PNG_SHA: DecodedImage("image/png", PNG)})
    images = RunImages(source, "acme")
    stored, _ = by_reference(user(PNG_URL))
    gone = user("/api/v1/agent/images/" + "0" * 64)
    conversation = [Message(role="system", content="Be brief."), stored, gone]

    for _ in range(3):  # three rounds
        resolved = await images.resolve(conversation)
        assert resolved[1].images == [ImagePart(image_url=ImageUrl(url=PNG_URL))]
        assert resolved[2].content == [TextPart(text="What is this?"), TextPart(text=MISSING_IMAGE)]
    assert source.reads == [{PNG_SHA, "0" * 64}]


async def test_a_run_without_images_reads_nothing() -> None:
    source = CountingSource({})
    conversation = [Message(role="user", content="hi"), user("https://images.example/cat.png")]
    assert await RunImages(source, "acme").resolve(conversation) is conversation
    assert source.reads == []


def tiny_image_result(*, mime_type: str = "image/png") -> CallToolResponse:
    """What server-everything's ``get-tiny-image`` answers: text, an image, text."""
    return CallToolResponse(
        content=[
            {"type": "text", "text": "Here's the image you requested:"},
            {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": mime_type},
            {"type": "text", "text": "The image above is the MCP logo."},
        ],
        server="everything",
        duration_ms=1,
    )


def test_a_tool_results_image_blocks_become_image_parts_after_its_text() -> None:
    content, used = tool_result_content(tiny_image_result(), 10_000, image_room=1 << 20)
    assert used == len(PNG)
    assert content == [
        TextPart(text="Here's the image you requested:\nThe image above is the MCP logo."),
        ImagePart(image_url=ImageUrl(url=PNG_URL)),
    ]
    message = Message(role="tool", tool_call_id="c1", content=content)
    assert image_summaries(message) == [ToolResultImage(mime_type="image/png", size_bytes=len(PNG))]


@pytest.mark.parametrize(
    ("mime_type", "room"), [("image/png", 10), ("image/svg+xml", 1 << 20)], ids=["past the room", "svg"]
)
def test_a_tool_image_past_the_runs_room_or_of_another_type_is_said_in_the_text(mime_type: str, room: int) -> None:
    content, used = tool_result_content(tiny_image_result(mime_type=mime_type), 10_000, image_room=room)
    assert used == 0
    assert content == (
        f"Here's the image you requested:\n[image {mime_type} omitted]\nThe image above is the MCP logo."
    )


async def test_the_room_left_for_tool_images_counts_the_requests_images_and_the_earlier_results() -> None:
    held = await RunImages(CountingSource({}), "acme").held([user(PNG_URL)], resumed=False)
    assert held == len(PNG)
    assert image_room(held + 100, 1000) == 1000 - len(PNG) - 100
    assert image_room(1000, 1000) == 0


async def test_a_resumed_run_counts_its_stored_images_toward_its_cap_in_one_store_read() -> None:
    earlier = b"\x89PNG" + b"e" * 500
    source = CountingSource({PNG_SHA: DecodedImage("image/png", PNG), "e" * 64: DecodedImage("image/png", earlier)})
    request, _ = by_reference(user(PNG_URL))
    conversation = [
        user("/api/v1/agent/images/" + "e" * 64),  # an earlier run's image: not this run's
        Message(role="assistant", content="a logo"),
        request,
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="look", arguments={})]),
        Message(
            role="tool", tool_call_id="c1", content=[ImagePart(image_url=ImageUrl(url=request.images[0].image_url.url))]
        ),
    ]
    images = RunImages(source, "acme")
    assert await images.held(conversation, resumed=True) == len(PNG)
    await images.resolve(conversation)
    assert source.reads == [{PNG_SHA, "e" * 64}]  # one read, which the rounds then use
    assert await RunImages(CountingSource({}), "acme").held([Message(role="user", content="hi")], resumed=True) == 0


def test_a_run_state_knows_whether_its_conversation_has_images() -> None:
    state = RunState(conversation=[Message(role="user", content="hi")])
    assert not state.images
    state.append(Message(role="assistant", content="hello"))
    assert not state.images
    state.append(Message(role="tool", tool_call_id="c1", content=[ImagePart(image_url=ImageUrl(url=PNG_URL))]))
    assert state.images
    assert RunState(conversation=[user(PNG_URL)]).images


async def test_a_run_without_images_never_scans_its_messages_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent_service.engine.images as engine_images

    scans: list[int] = []

    def counting(messages: Iterable[Message]) -> bool:
        scans.append(1)
        return has_images(messages)

    monkeypatch.setattr(engine_images, "has_images", counting)
    scripted = Scripted([answer("hello")])
    plan = RunPlan(
        run_id="run_img",
        model="scripted",
        messages=[Message(role="user", content="hi")],
        tools=[],
        tool_choice="auto",
        limits=RunLimits(max_iterations=3, deadline=Deadline.after(10)),
    )

    async def ignored(event: object) -> None:
        pass

    outcome = await scripted.loop().run(plan, ignored, stream_text=False)
    assert outcome.finish_reason == "stop"
    assert scans == []
