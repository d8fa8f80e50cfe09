"""SearchQA-v0 as an OpenEnv environment package: the server (``server/``) and its client (:mod:`.client`)."""

from .client import SearchQAEnvClient

__all__ = ["SearchQAEnvClient"]
