"""The search-then-answer text of the stand-in generation servers (check_launch.py, cpu_standin.py)."""

from __future__ import annotations


def scripted_turn(context: str, answers: dict[str, str], answered: int) -> tuple[str, int]:
    """The next turn for an episode whose tokens so far decode to ``context``.

    A search with the question until a result was shown, then an answer: right on every other
    answer the server gives (so each GRPO group has a spread of rewards).

    Args:
        context: The decoded prompt and turns so far.
        answers: Each question's gold answer.
        answered: How many answers the server gave before this turn.

    Returns:
        The turn's text and the new count of answers.

    Raises:
        ValueError: If the context asks none of the questions.
    """
    question = next((q for q in answers if q in context), None)
    if question is None:
        raise ValueError(f"the prompt asks none of the stand-in's questions: {context[-200:]!r}")
    if "<information>" not in context.split(question)[-1]:
        return f"<search> {question} </search>", answered
    answered += 1
    return f"<answer> {answers[question] if answered % 2 else 'nobody knows'} </answer>", answered
