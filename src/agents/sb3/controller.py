"""Train a PPO controller (stable-baselines3) on the macro-action view and compare it with fixed policies.

The controller learns, per question, whether to search (with the question or a next-hop
reformulation) and when to answer, under a reward that charges for every search.

Example:
    >>> cfg = ControllerConfig(task="synthetic-mixed", search_cost=0.1, total_timesteps=30_000)  # doctest: +SKIP
    >>> ctrl = train_controller(cfg)                                                            # doctest: +SKIP
    >>> env = ctrl.make_env(split="dev")                                                       # doctest: +SKIP
    >>> evaluate_policy(env, ctrl, name="ppo").summary()                                       # doctest: +SKIP

stable-baselines3 seeds Python's, NumPy's and torch's global generators when given a seed and
draws minibatches from NumPy's global generator; every SB3 call here runs inside
:func:`isolated_global_rng`, which seeds them from the config and restores their previous state
afterwards, so the caller's global random state is untouched.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agents.sb3.features import Encoder, QuestionEmbedder
from agents.sb3.wrapper import MacroAction, MacroActionEnv, make_macro_env, observation_box

#: The files :meth:`Controller.save` writes into its folder.
SAVED_FILES = ("ppo.zip", "embedder.npz", "config.json")

#: Fixed reference policies: the macro-actions they take in order (the last one answers).
FIXED_POLICIES: dict[str, tuple[MacroAction, ...]] = {
    "answer-now": (MacroAction.ANSWER_CLOSED_BOOK,),
    "search-once": (MacroAction.SEARCH_QUESTION, MacroAction.ANSWER_EXTRACTED),
    "search-twice": (MacroAction.SEARCH_QUESTION, MacroAction.SEARCH_REFORMULATED, MacroAction.ANSWER_EXTRACTED),
    "search-thrice": (
        MacroAction.SEARCH_QUESTION,
        MacroAction.SEARCH_REFORMULATED,
        MacroAction.SEARCH_REFORMULATED,
        MacroAction.ANSWER_EXTRACTED,
    ),
}


@dataclass(frozen=True)
class ControllerConfig:
    """Everything that defines a controller run.

    Attributes:
        task: Task name (or QA file) to train and evaluate on.
        retriever: Retriever name or index folder.
        search_cost: Reward is exact match minus this per search (``frugal`` uses 0.1).
        corpus: Corpus file, when the task is a file.
        train_split: Split to train on (the embedding reduction is fitted on it).
        eval_split: Held-out split for evaluation.
        encoder: ``"minilm"`` (packaged all-MiniLM-L6-v2) or ``"hashing"``.
        embed_dim: Reduced question-embedding dimension.
        reduction: ``"pca"`` or ``"random"``.
        max_turns: Turn budget per episode.
        top_k: Documents per search.
        total_timesteps: PPO environment steps.
        n_envs: Parallel environment copies (one process).
        n_steps: Steps per environment per PPO rollout.
        batch_size: PPO minibatch size.
        n_epochs: PPO epochs per rollout.
        learning_rate: Adam learning rate.
        gamma: Discount (episodes are a few steps; 1.0 optimises the return itself).
        gae_lambda: GAE lambda.
        ent_coef: Entropy bonus.
        net_arch: Hidden layer sizes of the policy and value networks.
        seed: Seed of PPO, the environments and the random projection.
        torch_threads: Torch CPU threads while training (restored afterwards); None leaves it.
        max_doc_chars: Retrieved document text is cut to this many characters.
        train_limit: Train on only the first ``train_limit`` questions of the training split (a
            reader's answers must be precomputed for every question trained on).
        reader: Folder of precomputed reader answers (:mod:`agents.sb3.reader`); the answer
            actions then answer with them instead of the rule-based extractor.
    """

    task: str = "synthetic-mixed"
    retriever: str = "bm25"
    search_cost: float = 0.1
    corpus: str | None = None
    train_split: str = "train"
    eval_split: str = "dev"
    encoder: str = "minilm"
    embed_dim: int = 16
    reduction: str = "pca"
    max_turns: int = 6
    top_k: int = 3
    total_timesteps: int = 60_000
    n_envs: int = 8
    n_steps: int = 128
    batch_size: int = 256
    n_epochs: int = 10
    learning_rate: float = 1e-3
    gamma: float = 1.0
    gae_lambda: float = 0.95
    ent_coef: float = 0.05
    net_arch: tuple[int, ...] = field(default=(64, 64))
    seed: int = 0
    torch_threads: int | None = 1
    max_doc_chars: int = 1500
    train_limit: int | None = None
    reader: str | None = None

    def __post_init__(self) -> None:
        if self.train_limit is not None and (isinstance(self.train_limit, bool) or not isinstance(
                self.train_limit, int) or self.train_limit < 1):
            raise ValueError(f"train_limit must be a positive integer or None, got {self.train_limit!r}")
        for name in ("embed_dim", "max_turns", "top_k", "total_timesteps", "n_envs", "n_steps", "batch_size",
                     "n_epochs", "max_doc_chars"):
            value = getattr(self, name)
            minimum = 0 if name == "embed_dim" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        cost = self.search_cost
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
            raise ValueError(f"search_cost must be a finite number >= 0, got {self.search_cost!r}")
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate!r}")
        if not 0 < self.gamma <= 1 or not 0 < self.gae_lambda <= 1:
            raise ValueError(f"gamma and gae_lambda must be in (0, 1], got {self.gamma!r}, {self.gae_lambda!r}")
        if self.ent_coef < 0:
            raise ValueError(f"ent_coef must be >= 0, got {self.ent_coef!r}")
        if not self.net_arch or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.net_arch):
            raise ValueError(f"net_arch must be positive layer sizes, got {self.net_arch!r}")
        if self.reduction not in ("pca", "random"):
            raise ValueError(f"reduction must be 'pca' or 'random', got {self.reduction!r}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"torch_threads must be >= 1 or None, got {self.torch_threads!r}")

    def to_json(self) -> dict[str, Any]:
        """The config as a JSON-ready dict."""
        d = asdict(self)
        d["net_arch"] = list(self.net_arch)
        return d

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerConfig:
        """Rebuild a config saved by :meth:`to_json` (unknown keys raise ``ValueError``)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown controller config keys {sorted(unknown)}")
        d = dict(data)
        if "net_arch" in d:
            d["net_arch"] = tuple(d["net_arch"])
        return cls(**d)


@contextlib.contextmanager
def isolated_global_rng(seed: int | None) -> Iterator[None]:
    """Seed Python/NumPy/torch global generators for SB3, restoring their states on exit."""
    import torch

    py_state = random.getstate()
    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed)  # noqa: NPY002 - SB3 draws minibatches from the global generator
            torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Controller:
    """A trained PPO controller with the question embedder it was trained with.

    Args:
        model: The stable-baselines3 PPO model.
        embedder: The fitted question embedder.
        config: The run's config.
    """

    def __init__(self, model: Any, embedder: QuestionEmbedder, config: ControllerConfig) -> None:
        self.model = model
        self.embedder = embedder
        self.config = config

    def make_env(
        self, split: str | None = None, *, search_cost: float | None = None, **kwargs: Any
    ) -> MacroActionEnv:
        """A macro-action environment like the training one (default: the eval split).

        Args:
            split: Split of the task (default ``config.eval_split``).
            search_cost: Override the cost (default ``config.search_cost``).
            **kwargs: Other :func:`make_macro_env` arguments (``task``, ``corpus``, ``retriever``).
        """
        return config_env(self.config, self.embedder, split or self.config.eval_split, search_cost=search_cost,
                         **kwargs)

    def __call__(self, obs: np.ndarray, step: int) -> int:
        """The deterministic action for ``obs`` (the policy interface of :func:`evaluate_policy`)."""
        with isolated_global_rng(None):
            action, _ = self.model.predict(obs, deterministic=True)
        return int(np.asarray(action).reshape(()))

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Save ``ppo.zip`` (SB3 format), ``embedder.npz`` and ``config.json`` (:data:`SAVED_FILES`) into ``folder``.

        Raises:
            ValueError: Naming it, if one of those files is a symbolic link (nothing is written through one).
        """
        from searchenv.utils.files import refuse_link

        out = Path(folder)
        for name in SAVED_FILES:
            refuse_link(out / name)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save(out / "ppo.zip")
        self.embedder.save(out / "embedder.npz")
        (out / "config.json").write_text(json.dumps(self.config.to_json(), indent=2, sort_keys=True) + "\n")
        return out

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike[str],
        *,
        encoder: str | Encoder | None = None,
        embedding_cache: str | os.PathLike[str] | None = None,
    ) -> Controller:
        """Load a controller saved by :meth:`save`.

        Only the network weights are read from ``ppo.zip`` (with ``torch.load(weights_only=True)``);
        stable-baselines3's ``data`` entry, which holds cloudpickled objects that could run code, is
        never read: the model is rebuilt from ``config.json`` and the embedder's dimension.

        Args:
            folder: The folder.
            encoder: Override the encoder (an instance, or a name); default: the saved name.
            embedding_cache: Folder of cached raw question embeddings.

        Returns:
            The controller.

        Raises:
            FileNotFoundError: If a file is missing.
            ValueError: If ``ppo.zip`` is damaged, holds unsafe objects, or does not fit ``config.json``.
        """
        from stable_baselines3.common.save_util import load_from_zip_file

        src = Path(folder)
        for name in ("ppo.zip", "embedder.npz", "config.json"):
            if not (src / name).is_file():
                raise FileNotFoundError(f"{src / name} is missing; is {src} a saved controller?")
        config = ControllerConfig.from_json(json.loads((src / "config.json").read_text()))
        embedder = QuestionEmbedder(encoder if encoder is not None else config.encoder, dim=config.embed_dim,
                                    method=config.reduction, seed=config.seed,
                                    cache_dir=embedding_cache).load(src / "embedder.npz")
        path = src / "ppo.zip"
        try:
            _, params, _ = load_from_zip_file(path, load_data=False, device="cpu")
        except Exception as exc:  # BadZipFile (as ValueError), UnpicklingError, RuntimeError, ...
            raise ValueError(f"{path} is damaged or holds objects other than tensors ({type(exc).__name__})") from None
        if "policy" not in params:
            raise ValueError(f"{path} holds no policy weights (policy.pth); save the controller again")
        with isolated_global_rng(None):
            model = _ppo(config, None, _init_setup_model=False)
            model.observation_space = observation_box(embedder.dim)
            model.action_space = spaces.Discrete(len(MacroAction))
            model.n_envs = 1
            model._setup_model()
        try:
            model.policy.load_state_dict(params["policy"])
            if "policy.optimizer" in params:
                model.policy.optimizer.load_state_dict(params["policy.optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"{path} does not fit {src / 'config.json'}: {exc}") from None
        return cls(model, embedder, config)


def _ppo(config: ControllerConfig, env: Any, **kwargs: Any) -> Any:
    """A stable-baselines3 PPO with the config's hyper-parameters and MLP policy."""
    from stable_baselines3 import PPO

    return PPO(
        "MlpPolicy",
        env,
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        ent_coef=config.ent_coef,
        policy_kwargs={"net_arch": list(config.net_arch)},
        device="cpu",
        **kwargs,
    )


def config_env(
    config: ControllerConfig,
    embedder: QuestionEmbedder,
    split: str,
    *,
    search_cost: float | None = None,
    **overrides: Any,
) -> MacroActionEnv:
    """The macro-action environment of a run's split: its task, retriever, budget, reader and limits.

    Args:
        config: The run.
        embedder: The question embedder.
        split: The split (``train_limit`` applies to ``config.train_split``).
        search_cost: Override the cost.
        **overrides: Other :func:`make_macro_env` arguments (they win over the config's).
    """
    kwargs: dict[str, Any] = {
        "task": config.task,
        "retriever": config.retriever,
        "max_turns": config.max_turns,
        "top_k": config.top_k,
        "max_doc_chars": config.max_doc_chars,
    }
    if config.corpus is not None:
        kwargs["corpus"] = config.corpus
    if config.reader is not None:
        kwargs["reader"] = _reader(config.reader)
    kwargs.update(overrides)
    if config.train_limit is not None and split == config.train_split and isinstance(kwargs["task"], str):
        from searchenv.tasks import load_task

        task = load_task(kwargs["task"])
        kwargs["task"] = list(task.examples(split))[: config.train_limit]
        kwargs.setdefault("corpus", task.corpus_path)
    cost = config.search_cost if search_cost is None else search_cost
    return make_macro_env(embedder=embedder, split=split, search_cost=cost, **kwargs)


_READERS: dict[str, Any] = {}


def _reader(folder: str) -> Any:
    """Precomputed reader answers, read once per folder and process."""
    from agents.sb3.reader import ReaderAnswers

    key = os.path.abspath(folder)
    if key not in _READERS:
        _READERS[key] = ReaderAnswers.load(folder)
    return _READERS[key]


def shared_retriever(config: ControllerConfig, overrides: Mapping[str, Any] | None = None) -> Any:
    """One retriever for every environment of a run, behind an in-memory query cache.

    Training meets the same questions (and so the same queries) many times; the cache
    (:class:`searchenv.retrievers.cache.CachedRetriever`) answers repeats from memory. A
    retriever instance given in ``overrides["retriever"]`` is wrapped as is.

    Args:
        config: The run (task, corpus and retriever).
        overrides: :func:`make_macro_env` overrides (``retriever``, ``corpus``, ``task``).

    Returns:
        The (cached) retriever.
    """
    from searchenv.retrievers import open_index, retriever_for_corpus
    from searchenv.tasks import load_task

    ov = dict(overrides or {})
    spec = ov.get("retriever", config.retriever)
    if isinstance(spec, str | os.PathLike):
        if Path(spec).is_dir():
            inner = open_index(spec)
        else:
            corpus = ov.get("corpus", config.corpus)
            if corpus is None:
                task = ov.get("task", config.task)
                if not isinstance(task, str) or Path(task).is_file():
                    raise ValueError("a corpus is needed for a task given as a file or a list of examples")
                corpus = load_task(task).corpus_path
            inner = retriever_for_corpus(str(spec), corpus)
    else:
        inner = spec
    try:
        from searchenv.retrievers.cache import CachedRetriever
    except ModuleNotFoundError as exc:
        if exc.name != "searchenv.retrievers.cache":
            raise
        return inner
    return CachedRetriever(inner, maxsize=200_000)


def train_controller(
    config: ControllerConfig,
    *,
    encoder: Encoder | None = None,
    env_overrides: Mapping[str, Any] | None = None,
    embedding_cache: str | os.PathLike[str] | None = None,
    verbose: int = 0,
) -> Controller:
    """Train a PPO controller.

    Args:
        config: The run.
        encoder: An encoder instance to use instead of ``config.encoder`` (e.g. a preloaded one).
        env_overrides: Extra :func:`make_macro_env` arguments (``task`` as a list of examples,
            ``corpus``, a retriever instance).
        embedding_cache: Folder to keep raw question embeddings in across runs (see
            :class:`~agents.sb3.features.QuestionEmbedder`).
        verbose: SB3 verbosity.

    Returns:
        The trained controller.
    """
    from stable_baselines3.common.logger import HumanOutputFormat, Logger
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    overrides = dict(env_overrides or {})
    overrides["retriever"] = shared_retriever(config, overrides)
    embedder = QuestionEmbedder(encoder if encoder is not None else config.encoder, dim=config.embed_dim,
                                method=config.reduction, seed=config.seed, cache_dir=embedding_cache)
    first = config_env(config, embedder, config.train_split, **overrides)  # fits the reduction on train questions
    envs = [first] + [config_env(config, embedder, config.train_split, **overrides) for _ in range(config.n_envs - 1)]
    # Monitor writes SB3's {"r", "l", "t"} into info["episode"]; searchenv's totals stay in info["summary"].
    vec = DummyVecEnv([(lambda e=e: Monitor(e)) for e in envs])  # type: ignore[misc]
    vec.seed(config.seed)
    with isolated_global_rng(config.seed), _torch_threads(config.torch_threads):
        model = _ppo(config, vec, seed=config.seed, verbose=verbose)
        # SB3's own logger makes an empty SB3-<time> folder in the temp directory on every learn():
        # log to standard output when verbose, else nowhere, and leave no folder behind.
        model.set_logger(Logger(None, [HumanOutputFormat(sys.stdout)] if verbose else []))
        model.learn(total_timesteps=config.total_timesteps)
    return Controller(model, embedder, config)


class FixedPolicy:
    """A policy that takes the same macro-actions in order on every question.

    Args:
        actions: The sequence; the last action is repeated if the episode runs longer.
    """

    def __init__(self, actions: Sequence[MacroAction | int]) -> None:
        if not actions:
            raise ValueError("actions must not be empty")
        self.actions = tuple(MacroAction(int(a)) for a in actions)

    def __call__(self, obs: np.ndarray, step: int) -> int:
        """The action at ``step`` (0-based)."""
        return int(self.actions[min(step, len(self.actions) - 1)])


def question_kind(example: Any) -> str:
    """``single-hop``, or the type and hop count (``bridge-2hop``, ``comparison-2hop``)."""
    return "single-hop" if example.type == "single-hop" else f"{example.type}-{example.hops}hop"


class PerKindPolicy(FixedPolicy):
    """The fixed policy that earned most on training questions of the same kind.

    Args:
        choice: Question kind -> a :data:`FIXED_POLICIES` name.
        default: The policy for a kind not seen in training.
    """

    def __init__(self, choice: Mapping[str, str], default: str) -> None:
        unknown = ({default} | set(choice.values())) - set(FIXED_POLICIES)
        if unknown:
            raise ValueError(f"unknown fixed policies {sorted(unknown)}; known: {', '.join(FIXED_POLICIES)}")
        self.choice = dict(choice)
        self.default = default
        super().__init__(FIXED_POLICIES[default])

    def start(self, env: MacroActionEnv) -> None:
        """Pick the sequence for this episode's question kind."""
        self.actions = FIXED_POLICIES[self.choice.get(question_kind(env.base.example), self.default)]


def probe_score(env: MacroActionEnv) -> float:
    """The retriever's best score for the episode's question, looked up without an environment turn."""
    hits = env.base.retriever.search_batch([env.base.example.question], 1)
    return float(hits[0][0].score) if hits and hits[0] else float("-inf")


class ThresholdFetch(FixedPolicy):
    """Fetch or skip by retrieval similarity ("RL for RAG chatbots"' similarity baseline).

    Search the question and answer from what it returns when the retriever's best score for the
    question reaches ``threshold``; otherwise answer closed-book. The score is looked up before
    the episode's first turn and is not charged as a search (the rule sees one number the
    controller only sees after searching).

    Args:
        threshold: The score at or above which to fetch.
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = float(threshold)
        super().__init__(FIXED_POLICIES["answer-now"])

    def start(self, env: MacroActionEnv) -> None:
        """Decide fetch or skip for this episode's question."""
        fetch = probe_score(env) >= self.threshold
        self.actions = FIXED_POLICIES["search-once" if fetch else "answer-now"]


def fit_baselines(env: MacroActionEnv, *, limit: int | None = None) -> dict[str, Any]:
    """Fit the two tuned baselines on training questions.

    ``best-per-kind``: each question kind's fixed policy with the highest mean reward.
    ``similarity-threshold``: the :class:`ThresholdFetch` threshold (among the observed probe
    scores, and "never fetch") with the highest total reward; ties go to fewer searches.

    Args:
        env: A macro-action environment over the training questions.
        limit: Only the first ``limit`` questions.

    Returns:
        ``{"policies": {name: policy}, "fit": {"best_per_kind": {kind: name}, "threshold": t,
        "default": name}}``.
    """
    evals = {n: evaluate_policy(env, FixedPolicy(seq), name=n, limit=limit) for n, seq in FIXED_POLICIES.items()}
    ids = next(iter(evals.values())).example_ids
    by_id = {ex.id: ex for ex in env.base.examples}
    kinds = [question_kind(by_id[i]) for i in ids]
    default = max(evals, key=lambda n: float(evals[n].rewards.mean()))
    choice: dict[str, str] = {}
    for kind in sorted(set(kinds)):
        idx = [j for j, k in enumerate(kinds) if k == kind]
        choice[kind] = max(evals, key=lambda n, idx=idx: float(evals[n].rewards[idx].mean()))  # type: ignore[misc]
    probes = []
    for i in range(len(ids)):
        env.reset(options={"index": i})
        probes.append(probe_score(env))
    fetch, skip = evals["search-once"].rewards, evals["answer-now"].rewards
    best_t, best_total = float("inf"), float(skip.sum())
    for t in sorted(set(probes)):
        total = float(sum(f if p >= t else s for p, f, s in zip(probes, fetch, skip, strict=True)))
        if total > best_total + 1e-12 or (abs(total - best_total) <= 1e-12 and t > best_t):
            best_t, best_total = t, total
    return {
        "policies": {"best-per-kind": PerKindPolicy(choice, default), "similarity-threshold": ThresholdFetch(best_t)},
        "fit": {"best_per_kind": choice, "default": default, "threshold": best_t, "n": len(ids)},
    }


@dataclass
class PolicyEval:
    """Per-question results of one policy on one split.

    Attributes:
        name: Policy name.
        example_ids: Question ids, in evaluation order.
        rewards: Episode returns.
        em: Exact match per question.
        searches: Searches per question.
        action_counts: Macro-action name -> times taken.
        seconds: Wall time of the evaluation.
        sequences: The macro-actions taken on each question, in order.
    """

    name: str
    example_ids: list[str]
    rewards: np.ndarray
    em: np.ndarray
    searches: np.ndarray
    action_counts: dict[str, int]
    seconds: float = 0.0
    sequences: list[tuple[str, ...]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Means with 95% normal-approximation confidence half-widths."""
        return {
            "policy": self.name,
            "n": int(len(self.rewards)),
            "mean_reward": float(self.rewards.mean()),
            "reward_ci95": ci95(self.rewards),
            "accuracy": float(self.em.mean()),
            "accuracy_ci95": ci95(self.em),
            "mean_searches": float(self.searches.mean()),
            "action_counts": dict(self.action_counts),
            "seconds": round(self.seconds, 3),
        }


def ci95(values: np.ndarray) -> float:
    """Half-width of the 95% normal-approximation confidence interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return float("nan")
    return float(1.96 * v.std(ddof=1) / math.sqrt(len(v)))


def paired_difference(a: PolicyEval, b: PolicyEval) -> dict[str, float]:
    """Mean reward of ``a`` minus ``b`` over the same questions, with its 95% CI half-width.

    Raises:
        ValueError: If the two were not evaluated on the same questions in the same order.
    """
    if a.example_ids != b.example_ids:
        raise ValueError(f"policies {a.name!r} and {b.name!r} were evaluated on different questions")
    d = a.rewards - b.rewards
    return {"mean": float(d.mean()), "ci95": ci95(d)}


def evaluate_policy(
    env: MacroActionEnv,
    policy: Callable[[np.ndarray, int], int],
    *,
    name: str = "policy",
    limit: int | None = None,
) -> PolicyEval:
    """Run ``policy`` once on every question of ``env`` (in order, no sampling).

    Args:
        env: The macro-action environment over the evaluation split.
        policy: ``policy(observation, step) -> action``; a policy with ``start(env)`` is told
            each new episode (after the reset) before its first action.
        name: Name for the report.
        limit: Evaluate only the first ``limit`` questions.

    Returns:
        Per-question results.
    """
    n = len(env.base.examples) if limit is None else min(limit, len(env.base.examples))
    rewards, em, searches, ids = [], [], [], []
    sequences: list[tuple[str, ...]] = []
    counts = {a.name.lower(): 0 for a in MacroAction}
    start = time.perf_counter()
    start_episode = getattr(policy, "start", None)
    for i in range(n):
        obs, info = env.reset(options={"index": i})
        if callable(start_episode):
            start_episode(env)
        total, step, done = 0.0, 0, False
        taken: list[str] = []
        while not done:
            action = policy(obs, step)
            obs, r, term, trunc, info = env.step(action)
            taken.append(MacroAction(action).name.lower())
            counts[taken[-1]] += 1
            total += float(r)
            step += 1
            done = term or trunc
        ids.append(str(info["example_id"]))
        rewards.append(total)
        em.append(float(info["em"]))
        searches.append(float(info["summary"]["searches"]))
        sequences.append(tuple(taken))
    return PolicyEval(name, ids, np.array(rewards), np.array(em), np.array(searches), counts,
                      time.perf_counter() - start, sequences)


def compare_with_fixed(
    controller: Controller,
    *,
    split: str | None = None,
    limit: int | None = None,
    env_overrides: Mapping[str, Any] | None = None,
    tuned: bool = True,
    fit_limit: int | None = None,
    keep_evals: bool = False,
) -> dict[str, Any]:
    """Evaluate the controller, every :data:`FIXED_POLICIES` entry and the tuned baselines on held-out questions.

    Args:
        controller: The trained controller.
        split: Evaluation split (default ``config.eval_split``).
        limit: Only the first ``limit`` questions.
        env_overrides: Extra :func:`make_macro_env` arguments.
        tuned: Also fit :func:`fit_baselines` (best fixed policy per question kind, similarity
            threshold) on the training split and evaluate them.
        fit_limit: Fit on only the first ``fit_limit`` training questions.
        keep_evals: Also return the per-question :class:`PolicyEval` of every policy (``"evals"``).

    Returns:
        ``{"search_cost", "split", "policies": [summary...], "vs_fixed": {name: paired diff},
        "beats_all_fixed": bool, "fitted": fit details or None}``; the controller beats a policy
        when the paired difference's 95% CI excludes zero and their own 95% CIs do not overlap.
    """
    overrides = dict(env_overrides or {})
    overrides["retriever"] = shared_retriever(controller.config, overrides)
    env = controller.make_env(split, **overrides)
    learned = evaluate_policy(env, controller, name="ppo", limit=limit)
    fixed = {n: evaluate_policy(env, FixedPolicy(seq), name=n, limit=limit) for n, seq in FIXED_POLICIES.items()}
    fitted = None
    if tuned:
        fitted = fit_baselines(controller.make_env(controller.config.train_split, **overrides), limit=fit_limit)
        for n, policy in fitted["policies"].items():
            fixed[n] = evaluate_policy(env, policy, name=n, limit=limit)
    vs: dict[str, dict[str, Any]] = {}
    for n, ev in fixed.items():
        diff = paired_difference(learned, ev)
        ls, fs = learned.summary(), ev.summary()
        separated = ls["mean_reward"] - ls["reward_ci95"] > fs["mean_reward"] + fs["reward_ci95"]
        diff["beats"] = bool(diff["mean"] - diff["ci95"] > 0 and separated)
        vs[n] = diff
    return {
        "search_cost": controller.config.search_cost,
        "split": split or controller.config.eval_split,
        "policies": [learned.summary()] + [ev.summary() for ev in fixed.values()],
        "vs_fixed": vs,
        "beats_all_fixed": all(d["beats"] for d in vs.values()),
        "fitted": fitted["fit"] if fitted else None,
        **({"evals": {"ppo": learned, **fixed}} if keep_evals else {}),
    }
