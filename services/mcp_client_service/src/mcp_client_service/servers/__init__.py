"""The MCP servers the gateway fronts: what is configured and what they offer, all together.

``config`` reads the ``mcpServers`` file (Claude Desktop's format) and ``references`` resolves the
``${env:...}``/``${file:...}`` secrets in it; ``options`` holds how every server is connected and
supervised (from the service's settings); ``schemas`` checks each server's tools and drops the
unusable ones; ``catalog`` merges every server's tools under one set of names; ``registry`` keeps
one supervised connection per server, their states, the catalog and config reloads.
"""
