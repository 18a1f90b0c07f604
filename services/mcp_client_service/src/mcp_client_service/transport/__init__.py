"""The bytes between the gateway and one MCP server.

``open`` picks and opens the transport of one session from a server's config; ``stdio`` spawns a
server and speaks newline-delimited JSON-RPC over its pipes (with limits the SDK's own transport
lacks); ``legacy_sse`` is the older HTTP+SSE transport; ``ssrf_guard`` vets and pins every HTTP
endpoint; ``response_limits`` caps how much of one HTTP response is held in memory.
"""
