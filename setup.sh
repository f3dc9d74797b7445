#!/usr/bin/env bash
# Sets up everything the workbench needs in ./.venv (idempotent): the package in editable
# mode with its test, development and benchmark extras. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is only the benchmark peer; pip takes the CPU wheel that ships with this machine kind.
.venv/bin/python -m pip install --quiet -e '.[dev,bench]'
# The JupyterLab extension (extension/): Node packages (no browser download: the UI tests use
# Debian's chromium), a development build into workbench/labextension, linked where JupyterLab
# looks for prebuilt extensions, and the server extension enabled.
export PATH="$PWD/.venv/bin:$PATH" PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
(cd extension && jlpm install && jlpm build)
(cd extension/ui-tests && jlpm install)
link=.venv/share/jupyter/labextensions/dtrain-workbench
[ -L "$link" ] || rm -rf "$link"  # a copy left by a non-editable install
mkdir -p .venv/share/jupyter/labextensions
ln -sfn "$PWD/workbench/labextension" "$link"
jupyter server extension enable --sys-prefix workbench.server
