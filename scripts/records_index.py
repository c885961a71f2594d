"""Print the index of docs/runs/README.md: one line per record, its command and its result.

    .venv/bin/python scripts/records_index.py

The command is the record's first `bin/pong-mp train` line in that page's bash blocks, less
`bin/pong-mp train` and its `--run-dir` ("at COMMIT" where the block runs an older commit's
code; "+ N" where the run took N more commands: resumes, or the forks it starts from). The
result is read from the record: its updates, env steps and last running reward.
tests/test_records.py checks that the page holds this index as printed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pong_mp.rundir import CONFIG_FILE, metrics_file, read_metrics

RUNS = Path(__file__).resolve().parent.parent / "docs" / "runs"
START = "<!-- index: made by scripts/records_index.py -->"
END = "<!-- end of the index -->"


def commands(page: str) -> dict[str, list[str]]:
    """Each run directory's `bin/pong-mp train` lines in `page`'s bash blocks, in order: its
    options in backquotes, and the commit that runs them where it is an older one."""
    found: dict[str, list[str]] = {}
    for block in re.findall(r"```bash\n(.*?)```", page, re.S):
        older = re.search(r"git checkout ([0-9a-f]{7,40})", block)
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split(" #")[0].split())
            run_dir = re.search(r"--run-dir runs/(\S+)", line)
            if not line.startswith("bin/pong-mp train") or not run_dir:
                continue
            options = line.removeprefix("bin/pong-mp train").replace(run_dir.group(0), "")
            options = f"`{' '.join(options.split())}`" if options.strip() else "the defaults"
            if older:
                options += f" at `{older.group(1)}`"
            found.setdefault(run_dir.group(1), []).append(options)
    return found


def index(root: Path = RUNS) -> str:
    """The index as a Markdown table, between its two marker lines."""
    made = commands((root / "README.md").read_text())
    lines = [
        START,
        "| record | command (`bin/pong-mp train ...`) | updates | env steps (M) | "
        "running reward at the end |",
        "|---|---|---|---|---|",
    ]
    for config in sorted(root.rglob(CONFIG_FILE)):
        record = config.parent
        metrics = read_metrics(metrics_file(record))
        given = made.get(record.name, [])
        command = given[0] if given else "in its section"
        if len(given) > 1:
            command += f" + {len(given) - 1}"
        last = metrics[-1]
        reward = last["running_reward"]
        lines.append(
            f"| `{record.relative_to(root)}` | {command} | {last['batch']} | "
            f"{last['total_steps'] / 1e6:.1f} | "
            + ("" if reward is None else f"{reward:+.1f}")
            + " |"
        )
    return "\n".join([*lines, END])


def main() -> int:
    """Print the index."""
    print(index())
    return 0


if __name__ == "__main__":
    sys.exit(main())
