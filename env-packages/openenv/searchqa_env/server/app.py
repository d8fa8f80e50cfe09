"""The SearchQA-v0 OpenEnv server's app: ``uvicorn server.app:app`` from this folder (``openenv.yaml``'s ``app:``).

Configured by environment variables (``SEARCHQA_TASK``, ``SEARCHQA_SPLIT``, ``SEARCHQA_INDEX``, ...:
``searchenv.integrations.openenv.ENVIRONMENT_VARIABLES``); the defaults serve the ``synthetic-2hop``
task over a BM25 index of its corpus, as ``searchenv serve-openenv --task synthetic-2hop --index bm25``.
"""

from __future__ import annotations

from searchenv.integrations.openenv_server import app

__all__ = ["app", "main"]


def main() -> None:
    """Serve the app with ``searchenv serve-openenv``'s limits (``python -m server.app [--port N]``)."""
    import argparse

    import uvicorn

    from searchenv.integrations.openenv import uvicorn_config

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.Server(uvicorn_config(app, args.host, args.port)).run()


if __name__ == "__main__":
    main()
