"""One supervised session per MCP server, and what is said when it fails.

``server_connection.ServerConnection`` is what the rest of the service holds for one server: its
session loop (connect, list, probe, reconnect), its state, its tools and its calls, with the
circuit ``breaker`` that stops retries and fails calls fast. ``failures`` names the ways a server
can be unavailable and ``redaction`` keeps its secrets out of what is said about it.
"""
