"""The gateway as an MCP server itself (``/mcp``): one streamable HTTP endpoint for every server.

``endpoint`` serves the catalog's tools (``tools/list``, ``tools/call``) through the same router as
the REST API; ``features`` adds every server's resources and prompts under prefixed names.
"""
