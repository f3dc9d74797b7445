"""Make a Playwright install use Debian's chromium, so no browser is ever downloaded.

``python -m jupyterlab.browser_check`` runs ``npx playwright install chromium`` (a download
from Playwright's CDN) before its test, and its script cannot be pointed at another browser.
Playwright skips the download of a browser whose directory under ``$PLAYWRIGHT_BROWSERS_PATH``
is marked installed; so this links the executables it looks for (the browser and the headless
shell, at the revisions its ``browsers.json`` names) to ``/usr/bin/chromium`` and marks them.
FFmpeg, which Playwright fetches along with chromium for video recording only, is marked
installed and left out (no test records video).

    python use_debian_chromium.py PLAYWRIGHT_CORE_DIR BROWSERS_PATH [CHROMIUM]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Playwright's browser name -> (its directory prefix, the executable inside, on linux-x64).
EXECUTABLES = {
    "chromium": ("chromium", "chrome-linux64/chrome"),
    "chromium-headless-shell": (
        "chromium_headless_shell",
        "chrome-headless-shell-linux64/chrome-headless-shell",
    ),
    "ffmpeg": ("ffmpeg", None),
}
MARKER = "INSTALLATION_COMPLETE"


def link(playwright_core: Path, browsers_path: Path, chromium: Path) -> list[Path]:
    """Link and mark every browser of :data:`EXECUTABLES`; return the directories made."""
    listed = json.loads((playwright_core / "browsers.json").read_text())["browsers"]
    revisions = {browser["name"]: browser["revision"] for browser in listed}
    made = []
    for name, (prefix, executable) in EXECUTABLES.items():
        directory = browsers_path / f"{prefix}-{revisions[name]}"
        if executable is not None:
            target = directory / executable
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            target.symlink_to(chromium)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MARKER).touch()
        made.append(directory)
    return made


if __name__ == "__main__":
    core, browsers = Path(sys.argv[1]), Path(sys.argv[2])
    chromium = Path(sys.argv[3] if len(sys.argv) > 3 else "/usr/bin/chromium")
    for directory in link(core, browsers, chromium):
        print(f"playwright browser ready: {directory}")
