"""Retrieval over HTTP: the server (:mod:`.server`), in every peer's dialect.

The server answers Search-R1's batched ``/retrieve``, rLLM's single query and GEM's msgpack. The
client of such a server is a retriever like any other, so it lives among them
(:mod:`searchenv.retrievers.remote`) and the environment's parts never import this folder. The
server imports ``fastapi`` and ``uvicorn`` (the ``serve`` extra); nothing imports it but ``searchenv
serve`` and the MCP server (:mod:`.mcp_server`, ``searchenv mcp``, the ``mcp`` extra), which serves an
index as MCP tools.
"""
