"""The bytes between the gateway and one MCP server.

``session_transport`` resolves a server's config and opens the transport of one session, watched
on its way to the SDK; ``stdio`` spawns a server and speaks newline-delimited JSON-RPC over its
pipes (with limits the SDK's own transport lacks); ``legacy_sse`` is the older HTTP+SSE transport;
``ssrf_guard`` vets and pins every HTTP endpoint; ``response_limits`` caps how much of one HTTP
response is held in memory.
"""
