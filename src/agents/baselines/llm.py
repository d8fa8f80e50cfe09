"""LLM-prompted agents (``direct``, ``rag``, ``iterative``, ``llm``, ``searcher``) and their chat helpers.

LLM contexts are kept as token ids: the chat prompt (system + user) from
``policy.chat_prompt_ids``, then each turn's generated ids exactly as generated, and between two
generated turns the text written there (the environment's replies, scripted turns, the answer
slot's ``<answer>``) encoded as one string; nothing generated is retokenized. A
:class:`~agents.policies.base.ChatPolicy` gets the transcript as messages instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from agents.baselines.episode import EpisodeState, Turn, with_system_prompt
from agents.policies.base import ChatPolicy, Generation, GenerationError, Policy
from agents.policies.chat import chat_renderer, reply_text
from agents.rollout.seeds import agent_seed
from searchenv.protocols import ActionProtocol

DIRECT_PROMPT = (
    "Answer the question with a short answer (a name, place, year or a few words) and no "
    "explanation, written inside <answer> and </answer>, for example <answer> Ostrava </answer>."
)

RAG_PROMPT = (
    "Answer the question using the information retrieved for it. Give a short answer (a name, "
    "place, year or a few words) and no explanation, written inside <answer> and </answer>, for "
    "example <answer> Ostrava </answer>."
)

#: The worked example the ``iterative`` agent is shown: a made-up world, not from any task.
FEW_SHOT_EXAMPLE = (
    "Question: In which country was the author of The Amber Gate born?\n"
    "<think> I need the author of The Amber Gate first. </think>\n"
    "<search> Who wrote The Amber Gate? </search>\n\n"
    "<information>Doc 1(Title: The Amber Gate) The Amber Gate is a novel written by Irena Voss."
    "</information>\n\n"
    "<think> The author is Irena Voss. Now I need where Irena Voss was born. </think>\n"
    "<search> Where was Irena Voss born? </search>\n\n"
    "<information>Doc 1(Title: Irena Voss) Irena Voss is a writer born in Halden, a town in "
    "Norway.</information>\n\n"
    "<think> Irena Voss was born in Halden, which is in Norway. </think>\n"
    "<answer> Norway </answer>"
)


class LLMAgent:
    """An agent whose turns a :class:`~agents.policies.base.Policy` generates, batched.

    Args:
        name: Short name.
        policy: The model: a :class:`~agents.policies.base.Policy` (the context is kept as token
            ids) or a :class:`~agents.policies.base.ChatPolicy` (the context is sent as messages,
            see :meth:`_act_chat`).
        system_prompt: ``f(protocol) -> str`` giving the system prompt (None: the protocol's own).
        first_search: Make the first turn a scripted search for the question itself (``rag``).
        script: ``script(episode) -> text or None``: a scripted turn for this episode now (sent as
            is, nothing generated), or None to let the model write it. ``first_search`` is the
            script that searches the question at turn 0.
        answer_slot: Answer-only turns: the turn starts with ``<answer>`` and the model writes
            the answer; if it never closes the tag, its first line is the answer.
        max_turns: The agent's own turn budget (None: the environment's).
        max_new_tokens: Generation cap per turn.
        temperature: 0 is greedy.
        top_p: Nucleus sampling threshold.
    """

    def __init__(
        self,
        name: str,
        policy: Policy | ChatPolicy,
        *,
        system_prompt: Callable[[ActionProtocol], str] | None = None,
        first_search: bool = False,
        script: Callable[[EpisodeState], str | None] | None = None,
        answer_slot: bool = False,
        max_turns: int | None = None,
        max_new_tokens: int = 96,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> None:
        _check_generation(max_new_tokens, temperature, max_turns)
        self.name = name
        self.policy = policy
        self.system_prompt = system_prompt
        self.first_search = first_search
        self.script = script
        self.answer_slot = answer_slot
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p

    def adapt_protocol(self, protocol: ActionProtocol) -> ActionProtocol:
        """Install this agent's system prompt (if any) on a copy of ``protocol``."""
        if self.system_prompt is None:
            return protocol
        return with_system_prompt(protocol, self.system_prompt(protocol))

    def _context(self, ep: EpisodeState) -> tuple[list[int], list[str]]:
        """The episode's context: ids up to the end of the last generated turn, and the text written since.

        The text (the environment's replies, scripted turns) is not encoded yet.
        """
        policy = self.policy
        if isinstance(policy, ChatPolicy):
            raise TypeError("a chat policy keeps no token-id context")
        ids: list[int] | None = ep.memory.get("ids")
        if ids is None:
            ids = list(policy.chat_prompt_ids(ep.messages[:2]))
            ep.memory["ids"] = ids
            ep.memory["text"] = []
            ep.memory["synced"] = 0
        text: list[str] = ep.memory["text"]
        # Add what the environment said after turns we have not yet added (under ``tools``: the
        # chat template's text around the tool message, as the rollout engine inserts it).
        synced = ep.memory["synced"]
        render = chat_renderer(policy) if ep.protocol.native_tools and len(ep.steps) > synced else None
        for k, step in enumerate(ep.steps[synced:], start=synced):
            if not step.info["new_text"]:
                continue
            if render is None:
                text.append(step.info["new_text"])
                continue
            turn = _assistant_index(ep.messages, len(ep.steps) - k)
            after = next((i for i in range(turn + 1, len(ep.messages)) if ep.messages[i]["role"] == "assistant"),
                         len(ep.messages))
            end, reply = reply_text(render, ep.messages[:after], turn, done=False)
            tokenizer = getattr(policy, "tokenizer", None)
            eos, eos_id = getattr(tokenizer, "eos_token", None), getattr(tokenizer, "eos_token_id", None)
            if not text and ids and ids[-1] == eos_id and isinstance(eos, str) and end.startswith(eos):
                end = end[len(eos):]  # the turn ended at the end-of-turn token, which its ids already hold
            text.append(end + reply)
        ep.memory["synced"] = len(ep.steps)
        return ids, text

    def _scripted(self, ep: EpisodeState) -> str | None:
        if self.first_search and ep.turn == 0:
            return ep.protocol.from_tags(f"<search> {ep.example.question} </search>")
        return self.script(ep) if self.script is not None else None

    def _stop(self, episodes: Sequence[EpisodeState]) -> tuple[str, ...]:
        return ("</answer>",) if self.answer_slot else tuple(episodes[0].protocol.stop) if episodes else ()

    def _seeds(self, episodes: Sequence[EpisodeState], todo: Sequence[int], seed: int) -> list[int]:
        # Per-episode seeds make sampling independent of which other episodes share the batch.
        return [agent_seed(seed, episodes[j].seed * 64 + episodes[j].turn) for j in todo]

    def act(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """Generate one turn per episode with one batched ``generate`` (or ``generate_chat``) call."""
        if isinstance(self.policy, ChatPolicy):
            return self._act_chat(episodes, seed=seed)
        policy = self.policy
        out: list[Turn | None] = [None] * len(episodes)
        todo: list[int] = []
        prompts: list[list[int]] = []
        prefixes: list[str] = []
        for i, ep in enumerate(episodes):
            ids, written = self._context(ep)
            scripted = self._scripted(ep)
            if scripted is not None:
                written.append(scripted)
                out[i] = Turn(scripted, 0)
                continue
            prefix = "<answer>" if self.answer_slot else ""
            # Text written since the last generated turn is encoded as one string (with the
            # answer slot's "<answer>"), so those ids are the tokenizer's own encoding of that
            # text, as a server that takes only text would make them; generated ids stay as
            # generated.
            written.append(prefix)
            tail = "".join(written)
            todo.append(i)
            prompts.append(ids + (self.policy.encode(tail) if tail else []))
            prefixes.append(prefix)
        if todo:
            # One generate call for the whole round (the policy chunks it by its max_batch_size and
            # reuses the key/values of the previous round's prompts).
            gens, failures = _generations_or_failures(lambda: policy.generate(
                prompts,
                stop=self._stop(episodes),
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                seed=self._seeds(episodes, todo, seed),
            ))
            if len(gens) != len(prompts):
                raise RuntimeError(f"policy returned {len(gens)} generations for {len(prompts)} prompts")
            for j, prompt, prefix, gen, failure in zip(todo, prompts, prefixes, gens, failures, strict=True):
                if gen is None:
                    out[j] = Turn("", 0, failure or "the model gave no generation")
                    continue
                memory = episodes[j].memory
                memory["ids"] = prompt + list(gen.token_ids)
                memory["text"] = []
                text = prefix + gen.text
                if self.answer_slot:
                    text = episodes[j].protocol.from_tags(close_answer(text))  # a call under tools
                out[j] = Turn(text, gen.num_tokens)
        return [t if t is not None else Turn("", 0) for t in out]

    def _act_chat(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """One turn per episode from a chat policy: the transcript as messages, no token ids.

        A chat API cannot continue a prefix, so an answer-slot turn is the reply from its
        ``<answer>`` on (the whole reply as the answer if it has none).
        """
        policy: ChatPolicy = self.policy  # type: ignore[assignment]
        out: list[Turn | None] = [None] * len(episodes)
        todo: list[int] = []
        conversations: list[list[dict[str, str]]] = []
        for i, ep in enumerate(episodes):
            scripted = self._scripted(ep)
            if scripted is not None:
                out[i] = Turn(scripted, 0)
                continue
            todo.append(i)
            conversations.append(chat_messages(ep.messages, tools=ep.protocol.native_tools,
                                               text_turns=ep.memory.get("text_turns", ()),
                                               turn_texts=[s.text for s in ep.steps]))
        if todo:
            protocol = episodes[todo[0]].protocol
            # native tool calls: the protocol's tools, and no stop strings (a server's tool-call
            # parser needs the call's closing markup; the server ends the turn after the call)
            native = {"tools": protocol.tools} if protocol.native_tools else {}
            gens, failures = _generations_or_failures(lambda: policy.generate_chat(
                conversations,
                stop=() if native else self._stop(episodes),
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                seed=self._seeds(episodes, todo, seed),
                **native,
            ))
            if len(gens) != len(conversations):
                raise RuntimeError(f"policy returned {len(gens)} replies for {len(conversations)} conversations")
            for j, gen, failure in zip(todo, gens, failures, strict=True):
                if gen is None:
                    out[j] = Turn("", 0, failure or "the model gave no reply")
                    continue
                text = gen.text
                if self.answer_slot:
                    start = text.find("<answer>")
                    text = close_answer(text[start:] if start >= 0 else "<answer>" + text)
                    text = episodes[j].protocol.from_tags(text)  # the scaffold's answer as a call under tools
                if protocol.native_tools and not gen.tool_calls:  # the server did not parse a call: a text turn
                    episodes[j].memory.setdefault("text_turns", set()).add(episodes[j].turn)
                out[j] = Turn(text, gen.num_tokens)
        return [t if t is not None else Turn("", 0) for t in out]


def chat_messages(messages: Sequence[Mapping[str, Any]], *, tools: bool = False, text_turns: Collection[int] = (),
                  turn_texts: Sequence[str] = ()) -> list[dict[str, Any]]:
    """An episode's transcript as chat-API messages.

    Chat APIs take a ``tool`` message only as the answer to a structured tool call: under the tag
    protocols the environment's ``tool`` replies become ``user`` turns (the environment speaks as
    the user); with ``tools`` (native tool calls) the messages are kept as the environment has
    them (``tool_calls``, ``tool`` messages with ``tool_call_id``), except the turns in
    ``text_turns``: the server gave those as text, not as parsed calls (it has no tool-call parser
    for the model), so they go back as that text (``turn_texts[k]``) and their replies as ``user``
    messages, as under the tag protocols. A chat template without tool markup would otherwise
    render an assistant message of only ``tool_calls`` as an empty turn.

    Args:
        messages: The environment's messages.
        tools: The protocol speaks native tool calls.
        text_turns: Turn numbers (0-based) written as text by a server that parses no calls.
        turn_texts: Each turn's text as sent to the environment.
    """
    if not tools:
        return [{"role": "user" if m["role"] == "tool" else m["role"], "content": m["content"]} for m in messages]
    out: list[dict[str, Any]] = []
    turn = -1
    as_text = False
    for m in messages:
        if m["role"] == "assistant":
            turn += 1
            as_text = turn in text_turns and turn < len(turn_texts)
            out.append({"role": "assistant", "content": turn_texts[turn]} if as_text else dict(m))
        elif m["role"] == "tool" and as_text:
            out.append({"role": "user", "content": m["content"]})
        else:
            out.append(dict(m))
    return out


def _assistant_index(messages: Sequence[Mapping[str, Any]], back: int) -> int:
    """Index of the ``back``-th last ``assistant`` message (1: the last)."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            seen += 1
            if seen == back:
                return i
    raise ValueError(f"the transcript has fewer than {back} assistant messages")


def close_answer(text: str) -> str:
    """Close an answer-slot turn ``<answer> ...`` the model left open.

    A turn that already holds ``</answer>`` is cut just after it; otherwise the first
    non-empty line of the continuation becomes the answer, or the turn is returned as it is
    when there is none (the environment then marks it invalid).

    Args:
        text: ``"<answer>"`` followed by the model's continuation.

    Returns:
        The turn to send.
    """
    end = text.find("</answer>")
    if end >= 0:
        return text[: end + len("</answer>")]
    body = text[len("<answer>") :] if text.startswith("<answer>") else text
    for line in body.splitlines():
        line = line.strip()
        if line:
            return f"<answer> {line} </answer>"
    return text


def _generations_or_failures(
    call: Callable[[], Sequence[Generation]],
) -> tuple[list[Generation | None], list[str | None]]:
    """A batched generate call's results, and per prompt why it failed (None where it did not).

    When some requests fail (:class:`~agents.policies.base.GenerationError`), the others'
    generations are kept: their episodes go on and only the failed ones fail.
    """
    try:
        gens: list[Generation | None] = list(call())
    except GenerationError as exc:
        return list(exc.results), list(exc.errors)
    return gens, [None] * len(gens)


def _check_generation(max_new_tokens: int, temperature: float, max_turns: int | None = None) -> None:
    """Refuse generation settings of a model-played agent (:class:`LLMAgent`) or role (``LLMRole``).

    Args:
        max_new_tokens: Generation cap per output: a positive integer.
        temperature: Sampling temperature: at least 0.
        max_turns: The agent's own turn budget: a positive integer, or None.

    Raises:
        ValueError: Naming the first setting refused, checked in the order ``max_new_tokens``,
            ``max_turns``, ``temperature``.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
        raise ValueError(f"max_turns must be a positive integer or None, got {max_turns!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
