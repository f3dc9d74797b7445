"""The type checker over ``workbench/``: mypy, configured in pyproject.toml ([tool.mypy]).

Every error mypy reports must be listed in ``mypy_baseline.txt``, and every line listed there
must still be reported: the baseline only shrinks. A line is ``path: code: message``, without
the line number, so that edits elsewhere in a file do not change it; a file with the same
error twice lists it twice.

After fixing listed errors (or, where one truly cannot be fixed, after adding one), rewrite
the baseline with ``.venv/bin/python tests/typecheck/test_types.py --update`` and review the
diff.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("mypy_baseline.txt")

# "workbench/x.py:12: error: Message  [code]" (notes and the summary line are not errors).
ERROR = re.compile(
    r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<message>.*?)\s+\[(?P<code>[\w-]+)\]$"
)


def run_mypy(cache_dir: str) -> list[str]:
    """mypy's errors over workbench/ (files and options from pyproject.toml), normalised."""
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", cache_dir, "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = sorted(normalise(line) for line in completed.stdout.splitlines() if ERROR.match(line))
    # 0: no errors, 1: errors found; anything else (or exit 1 with no error listed: mypy not
    # installed, say) is mypy failing to run at all.
    if completed.returncode not in (0, 1) or (completed.returncode == 1 and not errors):
        raise RuntimeError(
            f"mypy failed (exit {completed.returncode}):\n{completed.stdout}\n{completed.stderr}"
        )
    return errors


def normalise(line: str) -> str:
    """``path: code: message``; a line number quoted in the message becomes ``N``."""
    match = ERROR.match(line)
    assert match is not None
    path = match["path"].replace("\\", "/")
    message = re.sub(r"\bline \d+\b", "line N", match["message"])
    return f"{path}: {match['code']}: {message}"


def read_baseline() -> list[str]:
    return [line for line in BASELINE.read_text().splitlines() if line.strip()]


def test_mypy_reports_exactly_the_baseline(tmp_path: Path) -> None:
    found = collections.Counter(run_mypy(str(tmp_path / "mypy_cache")))
    listed = collections.Counter(read_baseline())
    new = sorted((found - listed).elements())
    gone = sorted((listed - found).elements())
    message = []
    if new:
        message.append(
            f"{len(new)} type error(s) not in {BASELINE.name} (fix them):\n  " + "\n  ".join(new)
        )
    if gone:
        message.append(
            f"{len(gone)} line(s) of {BASELINE.name} no longer reported (delete them, or run "
            "tests/typecheck/test_types.py --update):\n  " + "\n  ".join(gone)
        )
    assert not message, "\n".join(message)


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: test_types.py --update  (rewrites the baseline with mypy's errors now)")
    with tempfile.TemporaryDirectory() as cache:
        errors = run_mypy(cache)
    BASELINE.write_text("".join(f"{line}\n" for line in errors))
    print(f"{BASELINE}: {len(errors)} errors")
