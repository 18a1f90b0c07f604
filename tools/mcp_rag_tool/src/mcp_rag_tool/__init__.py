"""mcp_rag_tool."""
