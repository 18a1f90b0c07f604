"""mcp_client_service: the gateway between the suite and its MCP servers.

Layers, each importing only those below it (``make lint`` checks it): ``app`` (the composition
root) > ``mcp_face`` (the gateway's own MCP endpoint) > ``calls`` (the call path) > ``registry``
(every server, the catalog) > ``connection`` (one supervised session) > ``transport`` (the bytes
to one server) > ``failures`` and ``settings`` > ``config`` (the servers file, the options) >
``redaction``.
"""
