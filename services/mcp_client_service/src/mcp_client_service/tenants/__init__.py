"""Tenant servers: the MCP servers a tenant registers at runtime, beside the servers file's shared ones.

``servers.TenantServers`` keeps every tenant's servers in memory, loaded from the gateway's store
(``mcp_client_service.store``) and re-synced when its revision changes, so a change made on any replica reaches every
replica within about a second; it answers the tenant API (``routes``) and each tenant's catalog (``catalogs``: the
shared tools and the tenant's own). ``sessions.TenantSessions`` opens their sessions on first use and bounds them.
``configs`` turns a stored server into the connection config of a remote server (never stdio).
"""
