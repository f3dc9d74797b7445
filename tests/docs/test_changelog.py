"""The changelog keeps Keep a Changelog's shape: changes not yet released first, then each
release by version and date, the newest being the version the package carries."""

from __future__ import annotations

import json
import re

from tests.docs.markdown import DOCS, REPOSITORY

RELEASE = re.compile(r"\[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}")


def test_unreleased_first_then_releases_newest_first_the_newest_the_package_version() -> None:
    text = (DOCS / "changelog.md").read_text()
    releases = re.findall(r"^## (.+)$", text, re.M)
    assert releases[0] == "[Unreleased]"
    versions = []
    for heading in releases[1:]:
        match = RELEASE.fullmatch(heading)
        assert match, f"a release heading reads [X.Y.Z] - YYYY-MM-DD, not {heading!r}"
        versions.append(tuple(int(part) for part in match.group(1).split(".")))
    assert versions and versions == sorted(versions, reverse=True)
    package = json.loads((REPOSITORY / "extension" / "package.json").read_text())
    assert ".".join(map(str, versions[0])) == package["version"]
