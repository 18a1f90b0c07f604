"""One supervised session per MCP server, split into the parts it is made of.

``server_connection.ServerConnection`` is what the rest of the service holds for one server: its
state and its calls. Its session loop (connect, list, probe, reconnect) is ``supervisor``; the two
share a ``state.ConnectionState``, which the loop keeps up to date. The tools of its listings are
``tool_listing``; calls in flight and their outcomes, which feed the circuit ``breaker``, are
``call_accounting``; what a stdio child writes besides JSON-RPC is logged by ``child_output``; a server's questions
during a call are matched to that call by ``elicitation``.
"""
