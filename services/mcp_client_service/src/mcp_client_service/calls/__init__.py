"""The call path: a tool name from the catalog to one ``tools/call`` and its answer.

``router`` finds the server behind a catalog name; ``call`` checks the arguments (``validation``
against the tool's ``inputSchema``), makes the call and turns its outcome into the ``call-tool``
answer (``results``); ``progress`` relays the server's progress notifications to the caller;
``telemetry`` counts calls by server, tool and outcome.
"""
