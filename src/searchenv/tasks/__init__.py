"""QA examples, named tasks and readers for public QA formats.

Modules: :mod:`~searchenv.tasks.example` (:class:`QAExample`, :class:`Task`: the data types),
:mod:`~searchenv.tasks.qa_files` (FlashRAG JSONL QA files), :mod:`~searchenv.tasks.registry`
(named tasks and the cache folder), :mod:`~searchenv.tasks.formats` (public QA formats),
:mod:`~searchenv.tasks.rows` (tabular rows for engines), :mod:`~searchenv.tasks.synthetic` and
``world/`` (the generated world behind the built-in tasks).
"""

from searchenv.tasks.example import (
    SPLITS,
    QAExample,
    SubQuestion,
    Task,
    TaskSpec,
    blank_answer,
    checked_example,
    example_from_flashrag,
)
from searchenv.tasks.qa_files import looks_like_file, qa_lines, read_qa_jsonl, split_examples, write_qa_jsonl
from searchenv.tasks.registry import cache_dir, load_task, register_task, task_specs

__all__ = [
    "SPLITS",
    "QAExample",
    "SubQuestion",
    "Task",
    "TaskSpec",
    "blank_answer",
    "cache_dir",
    "checked_example",
    "example_from_flashrag",
    "load_task",
    "looks_like_file",
    "qa_lines",
    "read_qa_jsonl",
    "register_task",
    "split_examples",
    "task_specs",
    "write_qa_jsonl",
]
