"""Credentials never leave in error texts or logs: configured values, their escaped forms, URL parts."""

from __future__ import annotations

import logging

import pytest

from mcp_client_service.config.servers_file import HttpServerConfig, StdioServerConfig
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.redaction import RedactUrlsFilter, redact, redact_urls, secret_forms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET http://alice:pa55word@search:8102/mcp failed", "GET http://***@search:8102/mcp failed"),
        ("for url 'https://search/mcp?api_key=abc123&x=1'", "for url 'https://search/mcp?***'"),
        ("see https://search/callback#access_token=abc123", "see https://search/callback#***"),
        (
            '"http://t0ken@127.0.0.1:9/mcp?k=v" and wss://u:p@h/ws',
            '"http://***@127.0.0.1:9/mcp?***" and wss://***@h/ws',
        ),
        ("http://search:8102/mcp answered 404", "http://search:8102/mcp answered 404"),
        ("no URL here: user:pass@host?x", "no URL here: user:pass@host?x"),
    ],
)
def test_urls_lose_their_userinfo_query_and_fragment_but_keep_where_they_point(text: str, expected: str) -> None:
    assert redact_urls(text) == expected


def test_an_unparsable_url_is_masked_whole() -> None:
    assert redact_urls("bad http://[::1:80/mcp?k=secret-value") == "bad http://***"


def test_a_secret_is_masked_as_given_and_as_an_error_would_quote_it() -> None:
    secrets = secret_forms(["Bearer s3cret-token\n"])

    quoted = "Illegal header value b'Bearer s3cret-token\\n'; raw Bearer s3cret-token\n; repr 'Bearer s3cret-token\\n'"
    redacted = redact(quoted, secrets)

    assert "s3cret-token" not in redacted
    assert redacted == "Illegal header value b'***'; raw ***; repr '***'"


def test_values_too_short_to_be_secrets_are_not_masked() -> None:
    assert secret_forms(["yes", "1", " ab "]) == []
    assert redact("yes, 1 server", secret_forms(["yes", "1"])) == "yes, 1 server"


def test_a_server_redacts_its_env_values_and_its_urls_credentials() -> None:
    http = ServerConnection(
        "search",
        HttpServerConfig(url="http://bot:pa55word@search/mcp?key=k3y-in-query", headers={"X-Api-Key": "h3ader-key"}),
    )
    stdio = ServerConnection("rag", StdioServerConfig(command="rag", env={"RAG_TOKEN": "env-t0ken"}))

    assert http.redact("pa55word / key=k3y-in-query / h3ader-key") == "*** / *** / ***"
    assert stdio.redact("RAG_TOKEN=env-t0ken rejected") == "RAG_TOKEN=*** rejected"


def test_the_log_filter_redacts_urls_in_standard_library_records() -> None:
    record = logging.LogRecord("mcp", logging.DEBUG, __file__, 1, "Connecting to %s", ("http://u:p@h/mcp?t=1",), None)

    assert RedactUrlsFilter().filter(record) is True
    assert record.getMessage() == "Connecting to http://***@h/mcp?***"
