#!/usr/bin/env bash
# Sets up everything the workbench needs in ./.venv (idempotent): the package in editable
# mode with its test, development and benchmark extras. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is only the benchmark peer; pip takes the CPU wheel that ships with this machine kind.
.venv/bin/python -m pip install --quiet -e '.[dev,bench]'
