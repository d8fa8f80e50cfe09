"""Print the worked reward example of docs/reference/rewards.md by running real SearchQAEnv episodes.

The world is the tiny hand-written one of ``tests/conftest.py`` (8 documents, 4 questions), so
the numbers never change with the synthetic generator. ``tests/test_rewards.py`` checks that the
Markdown printed here is exactly the block in docs/rewards.md.

Usage (from the repository root): python docs/reference/reward_example.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The agent's turns, verbatim.
TURNS = [
    "<think>First find who directed The Glass Orchard.</think>\n<search>Glass Orchard director</search>",
    "<think>Velora Quenn directed it. Where was she born?</think>\n<search>Velora Quenn born</search>",
    "She was born in Drathmoor, I think.",
    "<think>Drathmoor. Which country is it in?</think>\n<search>glass orchard director</search>",
    "<think>That repeated a query. Ask about Drathmoor.</think>\n<search>Drathmoor country</search>",
    "<think>Drathmoor is in Essaly.</think>\n<answer>Essaly</answer>",
]

#: A custom reward that uses every term, so each appears in the per-step table.
ALL_TERMS: dict[str, Any] = {
    "outcome": {"weight": 1.0, "metric": "em"},
    "format": {"weight": 0.1},
    "cost": {"weight": 0.05, "per_search": 1.0, "repeat": 1.0},
    "relevance": {"weight": 0.3, "verifier": "gold-evidence"},
    "shaping": {"weight": 1.0, "gamma": 1.0},
}

PRESET_ORDER = [
    "default",
    "search-r1",
    "search-r1-format",
    "research",
    "r3-rag",
    "r3-rag-normalized",
    "frugal",
    "process",
    "shaped",
]


def _play(corpus: Path, reward: Any) -> list[dict[str, Any]]:
    from tests.conftest import EXAMPLES

    from searchenv.env import SearchQAEnv

    env = SearchQAEnv(EXAMPLES, corpus=corpus, reward=reward, max_turns=len(TURNS))
    env.reset(options={"example_id": "q0"})
    infos = []
    for turn in TURNS:
        _, r, term, trunc, info = env.step(turn)
        infos.append({**info, "reward": float(r)})
        if term or trunc:
            break
    return infos


def _f(x: float) -> str:
    s = f"{x:+.3f}" if abs(x) > 5e-10 else "0"
    return s


def worked_example() -> str:
    """Run the episodes and return the Markdown of the worked example."""
    from tests.conftest import DOCS

    from searchenv.corpus import write_corpus

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, DOCS)
        detailed = _play(corpus, ALL_TERMS)
        by_preset = {name: _play(corpus, name) for name in PRESET_ORDER}
        r3 = by_preset["r3-rag"]

    out: list[str] = []
    out.append(
        "Question q0: *In which country was the director of The Glass Orchard born?* "
        "(gold: Essaly; evidence d5, d0, d1).\n"
    )
    out.append("| turn | agent turn | action | new docs |")
    out.append("|---|---|---|---|")
    seen: set[str] = set()
    for i, (turn, info) in enumerate(zip(TURNS, detailed, strict=True), 1):
        new = [d for d in info["doc_ids"] if d not in seen]
        seen |= set(info["doc_ids"])
        action = info["action_type"] + (f" ({info['invalid_reason']})" if info["invalid_reason"] else "")
        shown = turn.replace("\n", " ").replace("|", "\\|")
        out.append(f"| {i} | `{shown}` | {action} | {', '.join(new) or '-'} |")
    out.append("")
    out.append(
        'Per-step `info["reward_terms"]` under a custom reward that uses every term, '
        "`reward=" + json.dumps(ALL_TERMS) + "`:\n"
    )
    names = list(ALL_TERMS)
    out.append("| turn | " + " | ".join(names) + " | reward |")
    out.append("|---|" + "---|" * (len(names) + 1))
    for i, info in enumerate(detailed, 1):
        terms = info["reward_terms"]
        out.append(f"| {i} | " + " | ".join(_f(terms[n]) for n in names) + f" | {_f(info['reward'])} |")
    ep = detailed[-1]["summary"]
    totals = ep["reward_totals"]
    out.append("| total | " + " | ".join(_f(totals[n]) for n in names) + f" | {_f(ep['return'])} |")
    out.append("")
    out.append('Final `info["summary"]` without `reward_totals` (the total row above):\n')
    summary = {k: v for k, v in ep.items() if k != "reward_totals"}
    summary["return"] = round(summary["return"], 6)
    out.append("```json\n" + json.dumps(summary, sort_keys=True) + "\n```\n")
    out.append("The same turns under every preset (reward per step, then the return):\n")
    out.append("| preset | " + " | ".join(f"t{i}" for i in range(1, len(TURNS) + 1)) + " | return |")
    out.append("|---|" + "---|" * (len(TURNS) + 1))
    for name in PRESET_ORDER:
        infos = by_preset[name]
        out.append(
            f"| `{name}` | " + " | ".join(_f(x["reward"]) for x in infos) + f" | {_f(infos[-1]['summary']['return'])} |"
        )
    out.append("")
    out.append(
        "`r3-rag` pays relevance and outcome at the end; each step's raw relevance "
        '(answer-in-doc) is in `info["reward_signals"]` when it happens:\n'
    )
    out.append("| turn | signal `relevance` | term `relevance` | term `outcome` | term `format` | reward |")
    out.append("|---|---|---|---|---|---|")
    for i, info in enumerate(r3, 1):
        t, s = info["reward_terms"], info["reward_signals"]
        out.append(
            f"| {i} | {_f(s['relevance'])} | {_f(t['relevance'])} | {_f(t['outcome'])} | "
            f"{_f(t['format'])} | {_f(info['reward'])} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(worked_example())
