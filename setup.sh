#!/usr/bin/env bash
# Sets up everything the workbench needs in ./.venv (idempotent): the package in editable
# mode with its test, development, benchmark and documentation extras. Run from the repository
# root.
set -euo pipefail
cd "$(dirname "$0")"
# Debian's chromium, for the UI tests and JupyterLab's browser check (no browser is downloaded);
# iproute2 (ip, tc), for the emulated hosts of the multi-host tests and `python -m benchmarks hosts`.
packages=""
command -v chromium >/dev/null || packages="$packages chromium"
{ command -v ip >/dev/null && command -v tc >/dev/null; } || packages="$packages iproute2"
# Without root or a password-less sudo they are left out, said so, and setup goes on: the
# tests that need them skip, naming what is missing.
if [ -n "$packages" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    as_root=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=sudo
  else
    as_root=none
  fi
  if [ "$as_root" = none ]; then
    echo "setup.sh: no root or sudo here, so not installing:$packages" >&2
    echo "  chromium: the UI tests and JupyterLab's browser check skip without it" >&2
    echo "  iproute2: the emulated-host tests and 'python -m benchmarks hosts' skip (they need root too)" >&2
  else
    $as_root apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is only the benchmark peer; pip takes the CPU wheel that ships with this machine kind.
.venv/bin/python -m pip install --quiet -e '.[dev,bench,docs]'
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
# JupyterLab's browser check installs Playwright in its application directory and asks it for
# chromium: install the UI tests' Playwright version there first, and point it at Debian's.
browser_test="$(jupyter lab path | sed -n 's/^Application directory: *//p')/browser_test"
playwright_version=$(node -p "require('./extension/ui-tests/node_modules/playwright-core/package.json').version")
mkdir -p "$browser_test"
[ -f "$browser_test/package.json" ] || (cd "$browser_test" && npm init -y >/dev/null)
(cd "$browser_test" && npm install --silent --no-audit --no-fund "playwright@$playwright_version")
if command -v chromium >/dev/null; then
  python extension/ui-tests/use_debian_chromium.py "$browser_test/node_modules/playwright-core" \
    .venv/share/playwright-browsers >/dev/null
fi
