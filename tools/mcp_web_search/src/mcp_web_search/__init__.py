"""mcp_web_search."""
