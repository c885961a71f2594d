"""The tools around training, apart from the algorithm: watching (play, recording, gif),
plotting (plot) and measuring (bench)."""

from collections.abc import Iterable, Sequence


def markdown_table(
    head: str | Sequence[str], rows: Iterable[str], above: Sequence[str] = ()
) -> str:
    """The lines `above`, then a Markdown table: `head` (its cells, or one string of them
    joined by " | "), the rule under it, and `rows` (each its cells joined by " | ")."""
    cells = head.split(" | ") if isinstance(head, str) else head
    rule = "|---" * len(cells) + "|"
    return "\n".join([*above, f"| {' | '.join(cells)} |", rule, *(f"| {row} |" for row in rows)])
