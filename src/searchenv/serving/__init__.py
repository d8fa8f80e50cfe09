"""Retrieval over HTTP: the server (:mod:`.server`) and the client that reads it and its peers (:mod:`.client`).

Both ends of the wire live here, so a dialect (Search-R1's batched ``/retrieve``, rLLM's single
query, GEM's msgpack) is read and written in one folder. The server imports ``fastapi`` and
``uvicorn`` (the ``serve`` extra); nothing imports it but ``searchenv serve`` and the MCP server
(:mod:`.mcp_server`, ``searchenv mcp``, the ``mcp`` extra), which serves an index as MCP tools.
"""
