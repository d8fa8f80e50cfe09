"""Oracle demonstrations of the tools as an SFT dataset, laid out as TRL's ``environment_factory`` loop does."""

from __future__ import annotations

from typing import Any

from agents.integrations.trl.tool_env import SearchQAArenaToolEnv, _ToolEnvFactory, tool_schemas


def tool_sft_dataset(make_env: _ToolEnvFactory, n: int | None = None, *, reasoning: bool = False,
                     successful_only: bool = True) -> list[dict[str, Any]]:
    """Oracle demonstrations of the tools, laid out as TRL's ``environment_factory`` loop lays out a rollout.

    A cold start for a model that never called these tools (``GRPOTrainer(environment_factory=...)``
    scores 0 until it does): for each question the oracle agent
    (:class:`~agents.baselines.scripted.OracleAgent`: the gold decomposition, one hop a search) plays
    an episode *through the tools* of an instance of ``make_env``, so every tool result is the text
    TRL would get from the same call. A row is a conversation for ``trl.SFTTrainer``:

    - ``messages``: the question as ``make_env.dataset()`` asks it (one ``user`` message), then per
      turn an ``assistant`` message with one ``tool_calls`` entry and the ``tool`` message with its
      result (``name`` and ``content``, as TRL appends it), and a last ``assistant`` message with
      the answer in words, after the ``answer`` tool's confirmation (TRL generates once more after
      every tool result; the model learns to stop there);
    - ``tools``: :func:`tool_schemas` as a JSON string (Arrow would merge the schemas' parameter
      structs into one, adding every tool's parameters to every tool);
    - ``example_id``.

    Build the dataset with ``datasets.Dataset.from_list(rows, on_mixed_types="use_json")``
    (datasets >= 5): a plain ``from_list`` merges the calls' ``arguments`` into one struct, so
    every ``search`` call would carry ``"answer": null`` and the model would learn to write it
    (TRL then fails every such call: ``search()`` takes no ``answer``).

    Rendered with the chat template TRL generates with (and its training twin for
    ``assistant_only_loss``), a row is token for token the prompt, completions and tool suffixes
    of TRL's tool-calling loop for the same calls. Supported protocols: the tag protocols with one
    query a turn (``search-r1``), ``browse`` (``open`` calls) and ``tools``/``tools-browse``.

    Args:
        make_env: A factory from :meth:`SearchQAToolEnv.factory` (its task, retriever and settings).
        n: Demonstrate the first ``n`` questions (default all).
        reasoning: Put the oracle's ``<think>`` text before each call as the message's content
            (default: calls only, the shortest completions).
        successful_only: Keep only episodes whose answer scored EM 1.

    Returns:
        The rows, in question order.

    Raises:
        ValueError: For ``n`` < 1, an unsupported protocol, or when no demonstration is left.
    """
    import json
    import re

    from agents.baselines import EpisodeState, StepRecord
    from agents.baselines.scripted import OracleAgent
    from searchenv.protocols import Answer, Open, Search

    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    tool_env = make_env()
    if isinstance(tool_env, SearchQAArenaToolEnv):
        raise ValueError("tool_sft_dataset does not support protocol='arena' (its answer cites documents)")
    env = tool_env._env
    tools = json.dumps(tool_schemas(tool_env))
    agent = OracleAgent()
    rows = []
    for position, (ex, row) in enumerate(zip(make_env.examples, make_env.dataset(n), strict=False)):
        tool_env.reset(**row)
        state = EpisodeState(position, ex, env.protocol, env.max_turns, 0, env.messages())
        messages: list[dict[str, Any]] = list(row["prompt"])
        while not tool_env._done:
            arguments: dict[str, Any]
            tags = agent.turn(state)
            action = env.protocol.parse(env.protocol.from_tags(tags))
            if isinstance(action, Search) and len(action.queries) == 1:
                name, arguments = "search", {"query": action.queries[0]}
            elif isinstance(action, Answer):
                name, arguments = "answer", {"answer": action.text}
            elif isinstance(action, Open):
                name, arguments = "open", {"number": action.number, "page": action.page}
            else:
                raise ValueError(f"protocol {env.protocol.name!r}: the oracle's turn is not one tool call: "
                                 f"{tags[:200]!r}")
            thought = re.search(r"<think>(.*?)</think>", tags, re.S)
            content = " ".join(thought.group(1).split()) if reasoning and thought else ""
            result = getattr(tool_env, name)(**arguments)
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]})
            messages.append({"role": "tool", "name": name, "content": result})
            info = dict(tool_env._info or {})
            state.steps.append(StepRecord(tags, info, env.shown_hits))
            state.messages = env.messages()
            if name == "answer":
                messages.append({"role": "assistant", "content": arguments["answer"]})
        tool_env.get_reward()
        if successful_only and tool_env.final_metrics.get("em", 0.0) < 1.0:
            continue
        rows.append({"messages": messages, "tools": tools, "example_id": ex.id})
    if not rows:
        raise ValueError(f"no demonstration left of {len(make_env.dataset(n))} (successful_only={successful_only}): "
                         "check that the index holds the questions' evidence and max_turns covers their hops")
    return rows
