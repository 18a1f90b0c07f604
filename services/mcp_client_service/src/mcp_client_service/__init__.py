"""mcp_client_service."""
