"""Adapter: the MCP server (tools, resource, prompt, stdio and streamable HTTP transports, IDE configs) over bridge.sessions."""
