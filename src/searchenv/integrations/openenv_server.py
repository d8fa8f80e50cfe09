"""The ``serve-openenv`` app at module level: ``uvicorn searchenv.integrations.openenv_server:app``.

OpenEnv's packaging names an ASGI app by import path (``openenv.yaml``'s ``app:``, the Dockerfile's
``uvicorn server.app:app``, ``GenericEnvClient.from_env(..., use_docker=False)``); this module builds
it on import from environment variables (:func:`~searchenv.integrations.openenv.app_from_environ`),
opening the index then. ``searchenv serve-openenv`` remains the way to serve it by hand: it also sets
uvicorn's connection and WebSocket limits (:func:`~searchenv.integrations.openenv.uvicorn_config`).
"""

from __future__ import annotations

from searchenv.integrations.openenv import app_from_environ

app = app_from_environ()
