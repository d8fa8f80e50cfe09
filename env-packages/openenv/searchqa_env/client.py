"""The client of the SearchQA-v0 OpenEnv server: OpenEnv's MCP tool client, which its tool calls need.

The server's actions are OpenEnv's ``CallToolAction`` / ``ListToolsAction`` (tools ``search`` and
``answer``), so OpenEnv's own ``MCPToolClient`` speaks to it as it is; this module names it for this
package, as OpenEnv's environment packages do::

    from searchqa_env import SearchQAEnvClient
    from openenv.core.env_server.mcp_types import CallToolAction

    async with SearchQAEnvClient(base_url="http://127.0.0.1:8000") as env:
        first = await env.reset(seed=3)
        step = await env.step(CallToolAction(tool_name="search", arguments={"query": first.observation.question}))
"""

from __future__ import annotations

from openenv.core.mcp_client import MCPToolClient


class SearchQAEnvClient(MCPToolClient):
    """OpenEnv's ``MCPToolClient`` for the SearchQA-v0 server (reset takes seed, split, index or example_id)."""
