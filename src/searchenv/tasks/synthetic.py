"""A procedurally generated multi-hop world: the embedded default tasks.

Answers cannot come from a model's memory: every person, city, country, organization,
university and work is invented (syllable-built names), and facts are drawn at random,
consistently across the corpus. Same seed, same bytes.

Public API:

- :func:`stream_passages` — a corpus of exactly *n* passages, streamed in bounded memory.
- :func:`generate_world` / :class:`WorldConfig` — the world with its dials.
- :func:`generate_questions` / :class:`QuestionConfig` — split-disjoint questions with gold
  evidence and decompositions.
- :func:`write_world` — corpus and splits as FlashRAG JSONL in a folder.
- Named tasks ``synthetic-1hop``, ``synthetic-2hop``, ``synthetic-3hop``, ``synthetic-4hop``,
  ``synthetic-comparison`` and ``synthetic-mixed`` (the default), registered by
  :mod:`searchenv.tasks.registry` on first use (:data:`NAMED_TASK_SPECS`) and cached under
  ``cache_dir()/tasks/<name>-<hash>/``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from searchenv.corpus import Document, atomic_write_lines, write_corpus
from searchenv.tasks.example import SPLITS, QAExample, Task, TaskSpec
from searchenv.tasks.qa_files import read_qa_jsonl, write_qa_jsonl
from searchenv.tasks.world.questions import QUESTION_KINDS, QuestionConfig, entity_keys, generate_questions
from searchenv.tasks.world.render import document, iter_documents
from searchenv.tasks.world.world import World, WorldConfig, sizes_for

__all__ = [
    "GENERATOR_VERSION",
    "NAMED_TASKS",
    "NAMED_TASK_SPECS",
    "QUESTION_KINDS",
    "QuestionConfig",
    "SyntheticTaskConfig",
    "World",
    "WorldConfig",
    "build_synthetic_task",
    "document",
    "entity_keys",
    "generate_questions",
    "generate_world",
    "iter_documents",
    "sizes_for",
    "stream_passages",
    "write_world",
]

# Bump when generated text or questions change, so cached tasks are rebuilt.
GENERATOR_VERSION = "3"


def generate_world(config: WorldConfig | None = None) -> World:
    """Build a world (entity arrays only; passages are rendered on demand).

    Args:
        config: The dials (default: 20k passages, seed 0).

    Returns:
        The world.
    """
    return World(config if config is not None else WorldConfig())


def stream_passages(num_passages: int, seed: int = 0, distractor_density: float = 1.0) -> Iterator[Document]:
    """Yield a generated corpus of exactly ``num_passages`` passages, in bounded memory.

    The world behind it takes a few dozen bytes per entity; passages are rendered one at a
    time, so a million-passage corpus can be written to disk as a stream.

    Args:
        num_passages: Corpus size (150 to 1.5 million).
        seed: World seed.
        distractor_density: See :class:`WorldConfig`.

    Yields:
        Documents with unique ids, in corpus order.
    """
    world = World(WorldConfig(num_passages=num_passages, seed=seed, distractor_density=distractor_density))
    yield from iter_documents(world)


@dataclass(frozen=True)
class SyntheticTaskConfig:
    """A named synthetic task: the world and the questions asked about it.

    Attributes:
        world: World dials.
        questions: Question kinds and split sizes.
        description: One line for ``searchenv tasks``.
    """

    world: WorldConfig
    questions: QuestionConfig
    description: str = ""

    def fingerprint(self) -> str:
        """Hash of generator version and config: the cache key."""
        blob = json.dumps(
            {"version": GENERATOR_VERSION, "world": asdict(self.world), "questions": asdict(self.questions)},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def write_world(config: SyntheticTaskConfig, folder: str | os.PathLike[str], id_prefix: str = "") -> dict[str, int]:
    """Write ``corpus.jsonl``, ``train/dev/test.jsonl`` and ``info.json`` into ``folder``.

    Args:
        config: What to generate.
        folder: Destination (created).
        id_prefix: Prepended to example ids.

    Returns:
        Sizes: passages and examples per split.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    world = World(config.world)
    splits = generate_questions(world, config.questions, id_prefix=id_prefix)
    write_corpus(folder / "corpus.jsonl", iter_documents(world))
    for split in SPLITS:
        write_qa_jsonl(folder / f"{split}.jsonl", splits[split])
    sizes = {"passages": world.sizes.passages, **{s: len(splits[s]) for s in SPLITS}}
    info = {
        "generator_version": GENERATOR_VERSION,
        "world": asdict(config.world),
        "questions": asdict(config.questions),
        "sizes": sizes,
    }
    atomic_write_lines(folder / "info.json", [json.dumps(info, indent=2, sort_keys=True)])
    return sizes


def build_synthetic_task(name: str, config: SyntheticTaskConfig, root: str | os.PathLike[str]) -> Task:
    """Load a synthetic task from ``root/tasks/<name>-<hash>/``, generating it on first use.

    The task is generated into a temporary sibling folder that is renamed into place when
    complete, so a killed build never leaves a half-written cache.

    Args:
        name: Task name.
        config: What to generate.
        root: Cache root (usually :func:`searchenv.tasks.registry.cache_dir`).

    Returns:
        The task.
    """
    folder = Path(root) / "tasks" / f"{name}-{config.fingerprint()}"
    if not (folder / "info.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        try:
            write_world(config, tmp)
            try:
                os.replace(tmp, folder)
            except OSError:
                if not (folder / "info.json").is_file():  # not a concurrent build that won
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    splits: dict[str, list[QAExample]] = {s: read_qa_jsonl(folder / f"{s}.jsonl") for s in SPLITS}
    return Task(name=name, corpus_path=folder / "corpus.jsonl", splits=splits, description=config.description)


def _build_named(name: str, config: SyntheticTaskConfig, root: Path) -> Task:
    return build_synthetic_task(name, config, root)


def _named(name: str, mix: tuple[tuple[str, float], ...], description: str, num_passages: int = 20_000) -> None:
    config = SyntheticTaskConfig(
        world=WorldConfig(num_passages=num_passages, seed=0),
        questions=QuestionConfig(mix=mix, train=2000, dev=250, test=250),
        description=description,
    )
    NAMED_TASKS[name] = config
    NAMED_TASK_SPECS.append(
        TaskSpec(
            name=name,
            build=functools.partial(_build_named, name, config),
            description=description,
            info={
                "passages": num_passages,
                "train": config.questions.train,
                "dev": config.questions.dev,
                "test": config.questions.test,
                "mix": dict(mix),
                "source": "generated",
            },
        )
    )


NAMED_TASKS: dict[str, SyntheticTaskConfig] = {}
#: The named tasks as :mod:`searchenv.tasks.registry` registers them on first use.
NAMED_TASK_SPECS: list[TaskSpec] = []
_named("synthetic-1hop", (("single", 1.0),), "generated world; single-hop questions")
_named("synthetic-2hop", (("bridge2", 1.0),), "generated world; 2-hop bridge questions")
_named("synthetic-3hop", (("bridge3", 1.0),), "generated world; 3-hop bridge questions")
_named("synthetic-4hop", (("bridge4", 1.0),), "generated world; 4-hop bridge questions")
_named("synthetic-comparison", (("comparison", 1.0),), "generated world; comparison questions")
_named(
    "synthetic-mixed",
    (("single", 0.2), ("bridge2", 0.35), ("bridge3", 0.15), ("bridge4", 0.05), ("comparison", 0.25)),
    "generated world; all kinds mixed (the default task)",
)
DEFAULT_TASK = "synthetic-mixed"
