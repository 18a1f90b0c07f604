"""What the API's requests that call mcp-client-service share: how long such a call may take, and how a failure of
it is documented. One value each, for the admin API's tenant servers, the OAuth consents and the connections."""

from __future__ import annotations

__all__ = ["GATEWAY_DOWN", "GATEWAY_SECONDS"]

GATEWAY_SECONDS = 15.0
"""How long one call of the gateway's admin or OAuth endpoints may take: a registration lists its tools in the
background, a callback exchanges a code with the authorization server, each bounded by the gateway's own timeouts."""

GATEWAY_DOWN = "mcp-client-service is unreachable or did not answer in time (upstream_unavailable, upstream_timeout)."
"""The 503 of an operation that calls the gateway, as its OpenAPI error documentation says it."""
