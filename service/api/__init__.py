"""The HTTP routers, one per resource, and their shared dependencies."""
