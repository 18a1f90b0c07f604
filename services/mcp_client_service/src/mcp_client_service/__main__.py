"""``mcp-client-service``: serve the tool registry on MCP_CLIENT_HOST:MCP_CLIENT_PORT."""

from __future__ import annotations

import logging

from mcp_client_service.app import create_app
from mcp_client_service.config.servers_file import ConfigError
from mcp_client_service.redaction import RedactUrlsFilter
from mcp_client_service.settings import MCPClientSettings
from suite_common.startup import run_service


def main() -> None:
    # The SDK logs the URL it connects to (at debug level); a URL can carry credentials.
    for sdk_logger in ("mcp.client.streamable_http", "mcp.client.sse"):
        logging.getLogger(sdk_logger).addFilter(RedactUrlsFilter())
    run_service(MCPClientSettings, create_app, prog="mcp-client-service", refusals=(ConfigError, ValueError))


if __name__ == "__main__":
    main()
