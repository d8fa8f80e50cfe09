"""Adapters that put SearchQA-v0 behind other environment APIs, one module per engine.

Each module imports its engine at import time, and nothing in ``searchenv`` imports these
modules, so ``import searchenv`` pulls no engine:

- :mod:`searchenv.integrations.skyrl`: a SkyRL-gym ``BaseTextEnv`` (``pip install 'searchenv[skyrl]'``).
"""
