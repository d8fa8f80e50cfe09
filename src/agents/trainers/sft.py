"""Cold-start supervised fine-tuning on search-and-reason demonstrations (R3-RAG's cold start).

Demonstrations are whole episodes in the environment's own protocol: the oracle agent
(:class:`agents.baselines.scripted.OracleAgent`, which follows the gold decomposition) run through
:class:`~searchenv.env.SearchQAEnv`, or a JSONL file of transcripts (one ``{"messages": [...]}``
per line, as written by ``searchenv eval``). Each is laid out exactly as a rollout sees it: the
chat prompt (system + user) from ``policy.chat_prompt_ids``, then each assistant turn's tokens
followed by the environment's reply. The loss is the mean negative log-likelihood of the
assistant turns only: prompt and retrieved documents are masked out (``loss_tokens="all"``: of
every token after the first, a language model's loss on the whole transcript).

An optional corpus phase (``corpus_steps``) first trains a language model's loss on the task's
own passages, ``batch_size`` a step, none of them gold evidence of a held-out question (the
splits other than ``split``): the model reads the world's names before it learns the protocol.

Read top to bottom: config, demonstrations, then the loop.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agents.devices import model_device
from agents.rollout.seeds import phase_seed
from agents.trainers.callbacks import TrainerCallback, trainer_callbacks
from agents.trainers.checkpoints import start_run
from agents.trainers.config import TrainConfig, _help
from agents.trainers.data import DataOrder, task_examples
from agents.trainers.frozen import FrozenLayers
from agents.trainers.losses import masked_sum
from agents.trainers.models import init_policy, pad_token_id, trainable_parameters
from agents.trainers.optim import gradient_norm, make_optimizer, make_scheduler, optimizer_step
from agents.trainers.run import TrainRun, restored_state
from agents.trainers.samples import Sample, forward_logprobs, pad_samples
from searchenv.corpus import DataWarning
from searchenv.utils.jsonsafe import iter_jsonl


@dataclass
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on demonstrations (see module docstring)."""

    demos: str = field(
        default="oracle", metadata=_help("'oracle' (run the oracle agent) or a JSONL file of transcripts.")
    )
    num_demos: int = field(default=256, metadata=_help("Questions of the split to demonstrate (oracle)."))
    successful_only: bool = field(
        default=True, metadata=_help("Keep only demonstrations whose final answer scored EM = 1.")
    )
    batch_size: int = field(default=8, metadata=_help("Sequences per optimizer step."))
    learning_rate: float | None = field(
        default=None, metadata=_help("Peak learning rate (AdamW); unset: 2e-5, or 5e-4 with lora=true.")
    )
    steps: int = field(default=60, metadata=_help("Optimizer steps."))
    loss_tokens: str = field(
        default="agent",
        metadata=_help("agent: the loss on the assistant's turns only; all: on every token after the first "
                       "(prompt and retrieved documents included)."),
    )
    corpus_steps: int = field(
        default=0,
        metadata=_help("Steps of language-model loss on the task's corpus passages before the demonstrations "
                       "(batch_size passages a step, none a held-out question's gold evidence); 0: none."),
    )
    corpus_tokens: int = field(default=256, metadata=_help("Tokens kept of each corpus passage."))
    reuse_frozen: bool = field(
        default=True,
        metadata=_help("With train_layers: keep each demonstration's hidden state where the trained layers begin "
                       "(computed the first time it is seen) and run only the trained layers on it afterwards."),
    )

    default_learning_rate: ClassVar[float] = 2e-5
    default_lora_learning_rate: ClassVar[float] = 5e-4
    #: The trainer's name in checkpoints and the ``searchenv train`` verb that resumes them.
    kind: ClassVar[str] = "sft"

    def demonstrations(self, policy: Any, retriever: Any = None) -> tuple[list[Sample], dict[str, float]]:
        """The samples this run trains on, and counts for the metrics (:func:`load_demos`)."""
        return load_demos(self, policy, retriever)

    def __post_init__(self) -> None:
        """Validate (see :class:`TrainConfig`)."""
        super().__post_init__()
        for name in ("num_demos", "batch_size", "corpus_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.corpus_steps, bool) or not isinstance(self.corpus_steps, int) or self.corpus_steps < 0:
            raise ValueError(f"corpus_steps must be a non-negative integer, got {self.corpus_steps!r}")
        if self.corpus_steps >= self.steps:
            raise ValueError(f"corpus_steps ({self.corpus_steps}) must leave steps for the demonstrations "
                             f"(steps={self.steps})")
        if self.loss_tokens not in ("agent", "all"):
            raise ValueError(f"loss_tokens must be 'agent' or 'all', got {self.loss_tokens!r}")
        if not self.demos:
            raise ValueError("demos must be 'oracle' or a JSONL path")
        if self.demos != "oracle" and not Path(self.demos).is_file():
            raise ValueError(f"demos must be 'oracle' or an existing JSONL file, got {self.demos!r}")


# ---------------------------------------------------------------------------------------------
# Demonstrations
# ---------------------------------------------------------------------------------------------


def messages_to_sample(policy: Any, messages: Sequence[Mapping[str, str]]) -> Sample:
    r"""Lay a transcript out as a rollout would see it; train on assistant turns only.

    ``messages`` is system, user, then alternating assistant / tool messages. The environment's
    replies are shown as ``"\n\n" + content + "\n\n"`` (how every tag protocol renders them).
    A ``tools`` transcript (assistant ``tool_calls``, ``tool`` messages with ``tool_call_id``) is
    laid out as the rollout engine lays it out: each turn as the call's text, the replies as the
    chat template's own markup (:func:`agents.policies.chat.reply_text`).

    Args:
        policy: Anything with ``chat_prompt_ids`` and ``encode``.
        messages: The transcript.

    Returns:
        The sample (mask 1 on assistant tokens).

    Raises:
        ValueError: If the transcript does not start with system/user or has an unknown role.
    """
    if len(messages) < 3 or [m["role"] for m in messages[:2]] != ["system", "user"]:
        raise ValueError("a transcript must start with system and user messages and hold a turn")
    if any(m.get("tool_calls") or m.get("tool_call_id") for m in messages[2:]):
        return _tool_call_sample(policy, messages)
    ids = list(policy.chat_prompt_ids([dict(m) for m in messages[:2]]))
    mask = [0] * len(ids)
    for m in messages[2:]:
        if m["role"] == "assistant":
            toks = list(policy.encode(m["content"]))
            ids += toks
            mask += [1] * len(toks)
        elif m["role"] == "tool":
            toks = list(policy.encode(f"\n\n{m['content']}\n\n"))
            ids += toks
            mask += [0] * len(toks)
        else:
            raise ValueError(f"unexpected role {m['role']!r} after the prompt")
    return Sample(ids, mask)


def _tool_call_sample(policy: Any, messages: Sequence[Mapping[str, Any]]) -> Sample:
    """A ``tools`` transcript as the rollout engine lays it out (:mod:`agents.policies.chat`).

    Each assistant turn is its text as a Hermes/Qwen template writes it
    (:func:`~searchenv.protocols.tool_turn_text`: the reasoning, then the call), trained on; the
    replies after it are the chat template's own text (the end of the assistant message, the
    ``tool`` or ``user`` messages, the next generation prompt), masked out.

    Raises:
        ValueError: If a reply comes before any turn.
    """
    from agents.policies.chat import chat_renderer, reply_text
    from searchenv.protocols import tool_turn_text

    render = chat_renderer(policy)
    ids = list(policy.chat_prompt_ids([dict(m) for m in messages[:2]]))
    mask = [0] * len(ids)
    i = 2
    while i < len(messages):
        m = messages[i]
        if m["role"] != "assistant":
            raise ValueError(f"unexpected role {m['role']!r} before the first assistant turn (message {i})")
        calls = m.get("tool_calls")
        toks = list(policy.encode(tool_turn_text(m.get("content") or "", calls) if calls else m["content"]))
        ids += toks
        mask += [1] * len(toks)
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j > i + 1:
            end, reply = reply_text(render, messages[:j], i, done=j == len(messages))
            toks = list(policy.encode(end)) + list(policy.encode(reply))
            ids += toks
            mask += [0] * len(toks)
        i = j
    return Sample(ids, mask)


def oracle_transcripts(
    cfg: TrainConfig, num: int, retriever: Any = None, *, plan: bool = False
) -> list[dict[str, Any]]:
    """Run the oracle agent on the first ``num`` questions of the configured split.

    Args:
        cfg: The run's settings (task, split, protocol, episode settings).
        num: Questions demonstrated.
        retriever: The retriever (default: the task's BM25).
        plan: Demonstrate with the ``oracle-plan`` agent (the chain of sub-questions written first).

    Returns:
        ``EpisodeResult.to_dict()`` per question (``messages`` and ``metrics`` among the keys).
    """
    from agents.baselines import run_agent
    from agents.baselines.scripted import OracleAgent

    examples, retr = task_examples(cfg, retriever)
    records = run_agent(
        OracleAgent(plan=plan),
        examples[:num],
        retr,
        protocol=cfg.protocol,
        top_k=cfg.top_k,
        max_turns=cfg.max_turns,
        reward=cfg.reward,
        env_kwargs={"max_doc_chars": cfg.max_doc_chars},
    )
    return [r.to_dict() for r in records]


def load_demos(cfg: SFTConfig, policy: Any, retriever: Any = None) -> tuple[list[Sample], dict[str, float]]:
    """Build the demonstration samples and report how many were kept.

    Demonstrations in which the retriever failed are dropped and counted (``demos_infra_errors``).
    Fewer than half kept (``successful_only`` drops the demonstrations whose answer missed) is
    warned about (:class:`~searchenv.corpus.DataWarning`): the run would learn a narrow slice of
    the task, which ``demos_kept`` in the metrics alone does not make plain.
    """
    if cfg.demos == "oracle":
        records = oracle_transcripts(cfg, cfg.num_demos, retriever)
    else:
        records = [record for _where, record in iter_jsonl(cfg.demos)]
    kept, counts = select_demos(cfg, records)
    samples = [messages_to_sample(policy, r["messages"]) for r in kept]
    if cfg.loss_tokens == "all":
        samples = [Sample(s.ids, [0] + [1] * (len(s.ids) - 1)) for s in samples]
    return samples, counts


def held_out_evidence(cfg: TrainConfig) -> set[str]:
    """Evidence ids of the questions in the task's splits other than ``cfg.split`` (a named task; else none).

    The gold evidence and every document a sub-question lists as stating its fact.
    """
    from searchenv.tasks.registry import load_task

    if Path(cfg.task).is_file():
        return set()
    task = load_task(cfg.task)
    held = [ex for split in task.splits if split != cfg.split for ex in task.examples(split)]
    return {i for ex in held for i in ex.evidence_ids} | {i for ex in held for d in ex.decomposition
                                                          for i in d.evidence_ids}


class CorpusPassages:
    """The corpus phase's passages: the task corpus minus held-out gold evidence, in a seeded order.

    A step's passages depend only on the step (``DataOrder`` from the seed, cursor
    ``(step - 1) * batch_size``), so a resumed run reads the same ones.
    """

    def __init__(self, cfg: SFTConfig, policy: Any) -> None:
        from searchenv.corpus import read_corpus
        from searchenv.make import corpus_file

        source = cfg.corpus if cfg.corpus is not None else cfg.task
        held = held_out_evidence(cfg)
        self.docs = [d for d in read_corpus(corpus_file(source)) if d.id not in held]
        if not self.docs:
            raise ValueError(f"the corpus of {source} has no passage that is not a held-out question's evidence")
        self.excluded = held
        self.policy, self.cfg = policy, cfg

    def batch(self, step: int) -> tuple[list[int], list[Sample]]:
        """Document indices and samples (loss on every token after the first) of corpus step ``step``."""
        order = DataOrder(len(self.docs), phase_seed(self.cfg.seed, "corpus"), cursor=(step - 1) * self.cfg.batch_size)
        picked = order.take(self.cfg.batch_size)
        out = []
        for i in picked:
            ids = list(self.policy.encode(f"{self.docs[i].title}\n{self.docs[i].text}"))[: self.cfg.corpus_tokens]
            out.append(Sample(ids, [0] + [1] * (len(ids) - 1)))
        return picked, out


def select_demos(cfg: SFTConfig, records: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]],
                                                                              dict[str, float]]:
    """The demonstrations worth learning from, and the counts ``demos_total``, ``demos_kept``, ``demos_infra_errors``.

    Raises:
        ValueError: If none is left.
    """
    # A demonstration in which the retriever failed shows the model an outage, not the task: never kept.
    infra = sum(1 for r in records if (r.get("metrics") or {}).get("infra_errors"))
    kept = [
        r
        for r in records
        if not (r.get("metrics") or {}).get("infra_errors")
        and (not cfg.successful_only or float(r.get("metrics", {}).get("em", r.get("em", 1.0)) or 0.0) >= 1.0)
    ]
    if not kept:
        raise ValueError(f"no demonstrations left out of {len(records)} (successful_only={cfg.successful_only})")
    if 2 * len(kept) < len(records):
        warnings.warn(
            f"SFT keeps {len(kept)} of {len(records)} demonstrations ({len(kept) / len(records):.0%}): "
            "successful_only drops those whose final answer did not score EM 1, so the model learns only the "
            "questions the demonstrator solved; check the demonstrations (with the oracle: an index that lacks "
            "the questions' evidence, or a turn budget shorter than their hops: max_turns, top_k), or set "
            "successful_only=false",
            DataWarning,
            stacklevel=2,
        )
    return kept, {"demos_total": float(len(records)), "demos_kept": float(len(kept)),
                  "demos_infra_errors": float(infra)}


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------


def train_sft(
    cfg: SFTConfig,
    *,
    policy: Any = None,
    retriever: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, Any]:
    """Fine-tune the policy on demonstrations.

    Args:
        cfg: The configuration.
        policy: A ready policy (default: load ``cfg.model``).
        retriever: Retriever for the oracle's episodes (default: ``cfg.retriever`` over the task corpus).
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist (same data order, optimizer, RNG).
        overwrite: Replace a run already in ``cfg.output_dir`` (its checkpoint and metrics); without it
            (or ``resume``) a folder holding a run is refused.
        stop_after: Stop (after checkpointing) once this many steps are done, as if killed there.
        callbacks: Trainer callbacks (:class:`~agents.trainers.callbacks.TrainerCallback`); a step's batch
            is its samples (demonstrations, or corpus passages in the corpus phase).

    Returns:
        A summary: final step, last metrics, run folder.

    Raises:
        FileExistsError: If the run folder holds a run and neither ``resume`` nor ``overwrite`` is set.
        FileNotFoundError: If ``resume`` is set and there is no checkpoint.
        CheckpointError: If a checkpoint to resume from (or ``init_from``) is damaged, unsafe or does not fit.
    """
    run_dir = start_run(cfg, resume=resume, overwrite=overwrite)
    policy = init_policy(cfg, policy)
    model = policy.model
    device = model_device(model)
    samples, demo_stats = cfg.demonstrations(policy, retriever)
    pad_id = pad_token_id(policy)
    params = trainable_parameters(model)
    opt = make_optimizer(params, cfg)
    sched = make_scheduler(opt, cfg, cfg.steps)
    run = TrainRun(cfg=cfg, kind=cfg.kind, run_dir=run_dir, policy=policy, model=model, params=params, optimizer=opt,
                   scheduler=sched, callbacks=trainer_callbacks(callbacks, trainer="train_sft"), stop_after=stop_after,
                   **restored_state(cfg, cfg.kind, run_dir, model=model, optimizer=opt, scheduler=sched,
                                    items=len(samples), resume=resume))
    run.callbacks.on_train_begin(cfg.kind, policy)
    frozen = FrozenLayers(model, cfg.train_layers) if cfg.train_layers is not None and cfg.reuse_frozen else None
    corpus = CorpusPassages(cfg, policy) if cfg.corpus_steps else None

    for step, timer in run.steps():
        # ---- 1. the batch: corpus passages (the corpus phase), then demonstrations ------------------
        reading = corpus is not None and step <= cfg.corpus_steps
        if reading:
            picked, batch = corpus.batch(step)  # type: ignore[union-attr]
        else:
            picked = list(run.order.take(cfg.batch_size))
            batch = [samples[i] for i in picked]
        n_tok = sum(s.num_policy_tokens for s in batch)
        run.callbacks.on_batch(step, batch)

        # ---- 2. optimise: the mean negative log-likelihood of the trained tokens -------------------
        total_loss = 0.0
        # micro-batches of similar lengths pad less (the loss is a sum over tokens: the grouping does not change it)
        by_length = sorted(range(len(batch)), key=lambda i: len(batch[i].ids))
        with timer("training"):
            for at in range(0, len(batch), cfg.micro_batch_size):
                chosen = by_length[at : at + cfg.micro_batch_size]
                mb = [batch[i] for i in chosen]
                padded = pad_samples(mb, pad_id, device)
                if frozen is not None and not reading:  # a demonstration's frozen part seen before is reused
                    out = frozen.forward_logprobs(mb, [picked[i] for i in chosen], padded, pad_id, bf16=cfg.bf16)
                else:
                    out = forward_logprobs(model, padded, bf16=cfg.bf16)
                loss = -masked_sum(out.logprobs, padded.mask) / max(n_tok, 1)
                loss.backward()
                total_loss += float(loss.detach())
            grad_norm = gradient_norm(params, cfg.max_grad_norm)  # clips the gradients to max_grad_norm
            optimizer_step(params, opt, sched, None)  # so no clipping here

        # ---- 3. record ------------------------------------------------------------------------------
        last = {
            "step": step,
            "loss": total_loss,
            "policy_tokens": n_tok,
            "sequences": len(batch),
            "grad_norm": grad_norm,
            "lr": sched.get_last_lr()[0],
            "seconds": timer.totals(),
            "tokens_per_s": n_tok / max(timer.seconds.get("training", 1e-9), 1e-9),
            **({} if frozen is None else {"frozen_reused": frozen.reused, "frozen_computed": frozen.computed}),
            **demo_stats,
            "phase": "corpus" if reading else "demonstrations",
        }
        if run.end_step(last, {"loss": f"{total_loss:.3f}"}, ("step", "loss")):
            break
    return run.finish()
