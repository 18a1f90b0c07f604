"""The MCP servers the gateway fronts, all together: one supervised connection each, and their tools.

``server_registry`` keeps one ``ServerConnection`` per configured server, their states, the
catalog and config reloads; ``catalog`` merges every server's tools under one set of names.
"""
