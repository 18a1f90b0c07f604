"""What the gateway is told: the servers file and the options of every connection (the leaf layer).

``servers_file`` reads the ``mcpServers`` file (Claude Desktop's format) and ``references``
resolves the ``${env:...}``/``${file:...}`` secrets in it; ``options`` holds how every server is
connected and supervised (from the service's settings), with the defaults of its caps;
``schemas`` checks each server's tools and drops the unusable ones. Nothing here imports another
part of the service.
"""
