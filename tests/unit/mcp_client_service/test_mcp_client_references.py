"""Secrets by reference: ``${env:NAME}`` and ``${file:/path}`` resolved when a server connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_client_service.config.references import MAX_SECRET_FILE_BYTES, ReferenceResolver, UnresolvedReferenceError


def test_env_and_file_references_are_replaced_and_their_values_remembered_for_masking(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-t0ken\n")  # written by `echo`: the newline is not the secret's
    resolver = ReferenceResolver(environ={"USER_KEY": "env-k3y"}, base_dir=tmp_path)

    header = resolver.resolve("Bearer ${file:token}")
    query = resolver.resolve("https://h/mcp?key=${env:USER_KEY}&v=${env:USER_KEY}")

    assert header == "Bearer file-t0ken"
    assert query == "https://h/mcp?key=env-k3y&v=env-k3y"
    assert set(resolver.values) == {"file-t0ken", "env-k3y"}


def test_an_absolute_file_path_is_read_as_given(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("abs-value")

    assert ReferenceResolver(environ={}, base_dir=Path("/nowhere")).resolve(f"${{file:{secret}}}") == "abs-value"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${env:MISSING_TOKEN}", "${env:MISSING_TOKEN} is not set in the gateway's environment"),
        ("${file:absent.txt}", "${file:absent.txt}: cannot read "),
        ("${file:big.txt}", f"is larger than {MAX_SECRET_FILE_BYTES} bytes"),
        ("${file:binary.bin}", "is not UTF-8 text"),
    ],
)
def test_a_reference_that_cannot_be_resolved_says_which_without_any_value(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / "big.txt").write_text("x" * (MAX_SECRET_FILE_BYTES + 1))
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00secret")
    resolver = ReferenceResolver(environ={"OTHER": "other-value"}, base_dir=tmp_path)

    with pytest.raises(UnresolvedReferenceError) as raised:
        resolver.resolve(text)

    assert expected in str(raised.value)
    assert "other-value" not in str(raised.value)
    assert "xxxx" not in str(raised.value)


def test_text_without_references_is_unchanged() -> None:
    resolver = ReferenceResolver(environ={})

    assert resolver.resolve("plain ${HOME} $USER") == "plain ${HOME} $USER"
    assert resolver.values == []
