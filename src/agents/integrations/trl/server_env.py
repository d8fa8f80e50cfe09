"""TRL's ``environment_factory`` against a served SearchQA-v0: each rollout is a session of ``searchenv serve-openenv``.

:class:`SearchQAServerToolEnv` gives TRL's ``GRPOTrainer`` the same tools as the in-process
:class:`~agents.integrations.trl.tool_env.SearchQAToolEnv` under the ``tools`` protocol (``search``,
``answer``; the server's protocol), but each instance holds one session of an OpenEnv server, so the
index, the questions and the reward live in the server's process (or on another machine)::

    from agents.integrations.trl.server_env import SearchQAServerToolEnv

    make_env = SearchQAServerToolEnv.factory("http://127.0.0.1:8000", split="train")
    trainer = GRPOTrainer(model, train_dataset=Dataset.from_list(make_env.dataset()),
                          environment_factory=make_env, args=GRPOConfig(...))

A rollout's reward is the sum of the rewards the server sent for its calls; the tool replies, and so
the returns, are the in-process tool env's for the same calls (a test replays them). Against a server in
evaluation mode (``serve-openenv --mode evaluation``) the whole return comes with the call that ends the
episode, so a rollout cut off before then gets 0; train against a server in training mode. Nothing derived
from the answer reaches the model before its episode ends (the server withholds it). Needs OpenEnv's
client beside TRL: ``make`` builds ``.venv-openenv`` with both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.integrations.trl.tool_env import SearchQAToolEnv


class SearchQAServerToolEnv(SearchQAToolEnv):
    """One rollout's session of a ``serve-openenv`` server, as TRL's tools (``search``, ``answer``).

    The tools, their replies and the return are :class:`~agents.integrations.trl.tool_env.SearchQAToolEnv`'s;
    only the step goes to the server (the episode lives there).

    Args:
        base_url: The server (``http://host:port``).
        split: The split whose questions the rows name (a row's ``example_id`` is looked up in every
            split when it is None).
        token: Bearer token, if the server requires one.
    """

    def __init__(self, base_url: str, *, split: str | None = None, token: str | None = None) -> None:
        self._base_url, self._token, self._split = base_url, token, split
        self._client: Any = None
        self._return = 0.0
        self._done = True
        self._final: dict[str, Any] | None = None
        self._info: dict[str, Any] | None = None

    @classmethod
    def factory(cls, base_url: str, *, split: str | None = None,  # type: ignore[override]
                token: str | None = None) -> _ServerEnvFactory:
        """A zero-argument factory for ``environment_factory`` (one session per instance)."""
        return _ServerEnvFactory(cls, base_url, split, token)

    def reset(self, **row: Any) -> str | None:
        """Start the session's episode on the row's ``example_id``; nothing is added to the prompt.

        Raises:
            ValueError: If the row has no ``example_id``, or the server refuses it.
        """
        if "example_id" not in row:
            raise ValueError("a row for the served environment needs its example_id (make_env.dataset() has it)")
        args: dict[str, Any] = {"example_id": str(row["example_id"])}
        if self._split is not None:
            args["split"] = self._split
        try:
            self._session().reset(**args)
        except Exception:  # noqa: BLE001 - the server closed a session idle past its --idle-timeout: reopen once
            self._close()
            self._session().reset(**args)
        self._return, self._done, self._final, self._info = 0.0, False, None, None
        return None

    def _session(self) -> Any:
        """The open session's client (opened on first use, and again after the server closed it)."""
        if self._client is None:
            from openenv.core.generic_client import GenericEnvClient

            kwargs: dict[str, Any] = {"base_url": self._base_url}
            if self._token:
                kwargs["headers"] = {"Authorization": f"Bearer {self._token}"}
            self._client = GenericEnvClient(**kwargs).sync()
        return self._client

    def _refused(self, arguments: Mapping[str, Any]) -> str | None:
        """Nothing is refused here: the server's ``tools`` protocol checks every argument (``bad_arguments``)."""
        return None

    def _turn(self, name: str, arguments: dict[str, Any], tags: str) -> dict[str, Any]:
        """One call as a step of the server's episode: the step's info as the server sends it."""
        result = self._session().step({"type": "call_tool", "tool_name": name, "arguments": arguments})
        observation = result.observation if isinstance(result.observation, dict) else {}
        self._return += float(result.reward or 0.0)
        info = {**dict(observation.get("metadata") or {}), "new_text": str(observation.get("result") or "")}
        self._info = info
        if result.done:
            self._done, self._final = True, info
        return info

    def get_reward(self) -> float:
        """The rollout's return: the rewards the server sent for its calls."""
        return self._return

    @property
    def final_info(self) -> dict[str, Any] | None:
        """The info of the step that ended the episode (gold answers, EM, summary), or None before."""
        return self._final

    def _close(self) -> None:
        """End the session (private: TRL offers every public method as a tool)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a session the server already closed
                pass

    def __del__(self) -> None:
        self._close()


class _ServerEnvFactory:
    """Builds :class:`SearchQAServerToolEnv` instances on one server; lists its questions for the dataset."""

    def __init__(self, cls: type[SearchQAServerToolEnv], base_url: str, split: str | None, token: str | None) -> None:
        self._cls, self.base_url, self.split, self.token = cls, base_url.rstrip("/"), split, token

    def __call__(self) -> SearchQAServerToolEnv:
        return self._cls(self.base_url, split=self.split, token=self.token)

    def dataset(self, n: int | None = None) -> list[dict[str, Any]]:
        """Rows for ``datasets.Dataset.from_list`` from the server's task API: a chat ``prompt`` and ``example_id``.

        Raises:
            RuntimeError: If the server's task API does not answer.
        """
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        split = self.split or "train"
        response = httpx.post(f"{self.base_url}/searchqa/task_range", json={"split": split, "start": 0, "stop": n},
                              headers=headers, timeout=60)
        if response.status_code != 200:
            raise RuntimeError(f"{self.base_url}: the task API answered {response.status_code}: {response.text[:200]}")
        return [{"prompt": [{"role": "user", "content": t["question"]}], "example_id": t["id"]}
                for t in response.json()["tasks"]]
