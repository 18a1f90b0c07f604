"""``mcp-client-service``: serve the tool registry on MCP_CLIENT_HOST:MCP_CLIENT_PORT."""

from __future__ import annotations

import logging
import sys

from pydantic import ValidationError

from mcp_client_service.app import create_app
from mcp_client_service.config import ConfigError
from mcp_client_service.redaction import RedactUrlsFilter
from mcp_client_service.settings import MCPClientSettings
from suite_common.http import describe_validation_error
from suite_common.serve import serve


def main() -> None:
    try:
        settings = MCPClientSettings()
        app = create_app(settings)
    except ValidationError as error:
        sys.exit(f"mcp-client-service: bad settings (MCP_CLIENT_* environment): {describe_validation_error(error)}")
    except (ConfigError, ValueError) as error:
        sys.exit(f"mcp-client-service: {error}")
    # The SDK logs the URL it connects to (at debug level); a URL can carry credentials.
    for sdk_logger in ("mcp.client.streamable_http", "mcp.client.sse"):
        logging.getLogger(sdk_logger).addFilter(RedactUrlsFilter())
    serve(app, settings)


if __name__ == "__main__":
    main()
