"""The call path: a tool name from the catalog to one ``tools/call`` and its answer.

``router`` finds the server behind a catalog name; ``call`` checks the arguments (``validation``
against the tool's ``inputSchema``), makes the call and turns its outcome into the ``call-tool``
answer (``results``); ``progress`` relays the server's progress notifications to the caller;
``telemetry`` counts calls by server, tool and outcome. ``live_calls`` runs ``call-tool`` over SSE apart from its
caller's connection, so that a call whose server asks a question (``elicitation``: the broker of questions waiting
for a person) can wait for the answer and be followed again (``live_routes``).
"""
