"""The server side of the package: ``server.app:app``."""
