"""Sandboxes the profiles run in: the sandbox protocol and its Docker runtime (client, containers,
archives crossing the boundary, capped output capture)."""
