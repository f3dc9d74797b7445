"""Build an offline wheelhouse of dtrain-workbench and its dependencies for one target.

Air-gapped machines and GPU clusters often have no package index and no Node. This script runs
on a machine that has both and writes a folder of wheels that installs there with
`pip install --no-index --find-links DIR`:

1. It builds the project's own wheel from a clean copy of this checkout (`pip wheel --no-deps`),
   which runs the Node build of the JupyterLab extension, so the wheel carries the prebuilt
   extension and the target needs no Node.
2. It resolves `dtrain-workbench[EXTRAS]` against that wheel for the target's CPython version
   and platform, binary wheels only (`pip install --dry-run --report`). A dependency that ships
   only an sdist is built into a wheel here, which must come out pure Python (`*-none-any`).
3. It leaves out the packages named by `--exclude` (ones the target already has, e.g. CuPy or
   PyTorch), with the dependencies that only they need, and downloads the rest
   (`pip download --no-deps`).
4. It writes INSTALL.txt with the offline install command into the wheelhouse.

Example, CPython 3.12 with the CUDA 13 extra:

    python tools/wheelhouse.py --python 3.12 --cuda 13 --platform manylinux_2_28_x86_64 \\
        --out wheelhouse/

pip evaluates environment markers (python_version, platform_machine, sys_platform) for the
Python it runs under, not for the target, so pip runs under `pythonX.Y` from PATH when this
Python is another version (a warning says so when there is none), and the wheelhouse should be
built on the target's OS and architecture. Needs pip >= 22.2, git and Node; only the standard
library.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from fnmatch import fnmatch
from pathlib import Path

PROJECT = "dtrain-workbench"
ROOT = Path(__file__).resolve().parents[1]
NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
EXTRA = re.compile(r"extra\s*==\s*[\"']([^\"']+)[\"']")
LEGACY = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
python = sys.executable  # the Python whose pip resolves and downloads: see pip_python()


def norm(name: str) -> str:
    """The PEP 503 form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_tags(platform: str) -> list[str]:
    """A manylinux tag and every older one its wheels may carry (pip does not expand them)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    legacy = re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_(\w+)", platform)
    if m:
        glibc, arch = int(m.group(1)), m.group(2)
    elif legacy:
        glibc, arch = LEGACY[legacy.group(1)], legacy.group(2)
    else:
        return [platform]
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)]
    return tags + [f"{name}_{arch}" for name, minor in LEGACY.items() if glibc >= minor]


def pip_python(version: str) -> str:
    """A Python of the target's version with a working pip, so that markers match the target."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-m", "pip", "--version"], capture_output=True).returncode:
        found = None  # e.g. a pyenv shim of a version that is not enabled
    if found is None:
        print(
            f"warning: no python{version} with pip on PATH; pip evaluates markers for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}, so a dependency that only "
            f"Python {version} needs may be missing",
            flush=True,
        )
    return found or sys.executable


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """pip of `python`; a failure ends the script unless the output is captured."""
    cmd = [python, "-m", "pip", *args]
    print("+ " + " ".join(cmd), flush=True)
    result = subprocess.run(cmd, text=True, capture_output=capture)
    if not capture and result.returncode != 0:
        sys.exit(f"wheelhouse: pip exited with {result.returncode}")
    return result


def build_project_wheel(out: Path) -> Path:
    """The project's wheel, built from the checkout's files without its build outputs."""
    if shutil.which("node") is None:
        sys.exit("wheelhouse: building the JupyterLab extension needs Node (node on PATH)")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    with tempfile.TemporaryDirectory(prefix="dtrain-build-") as tmp:
        src, dist = Path(tmp, "src"), Path(tmp, "dist")
        for rel in filter(None, listed):
            if (ROOT / rel).is_file():  # skips files deleted but not yet committed
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
        pip("wheel", "--no-deps", "--wheel-dir", str(dist), str(src))
        (built,) = dist.glob("*.whl")
        names = zipfile.ZipFile(built).namelist()
        if not any(n.endswith(f"labextensions/{PROJECT}/static/style.js") for n in names):
            sys.exit(f"wheelhouse: {built.name} carries no prebuilt JupyterLab extension")
        return Path(shutil.copy2(built, out))


def build_sdist_wheel(requirement: str, out: Path) -> None:
    """A wheel built here from an sdist; only a pure-Python one installs on another machine."""
    name = REQ.match(requirement)
    if name is None:
        sys.exit(f"wheelhouse: cannot read the requirement {requirement!r}")
    with tempfile.TemporaryDirectory(prefix="dtrain-sdist-") as tmp:
        pip("wheel", "--no-deps", "--no-binary", name.group(1), "--wheel-dir", tmp, requirement)
        for wheel in Path(tmp).glob("*.whl"):
            if not wheel.name.endswith("-none-any.whl"):
                sys.exit(
                    f"wheelhouse: {requirement} has no wheel for the target, and the one "
                    f"built here ({wheel.name}) is not pure Python"
                )
            shutil.copy2(wheel, out)
            print(f"built {wheel.name} from its sdist", flush=True)


def resolve(target: list[str], requirement: str, out: Path) -> list[dict]:
    """The report of pip's resolution for the target, building sdist-only dependencies."""
    report = out / "resolution.json"
    for _ in range(50):
        result = pip(
            "install",
            "--dry-run",
            "--ignore-installed",
            "--target",  # never written (--dry-run); pip < 24 needs it beside --platform
            str(out / "never-written"),
            "--quiet",
            "--report",
            str(report),
            *target,
            "--find-links",
            str(out),
            requirement,
            capture=True,
        )
        if result.returncode == 0:
            items = json.loads(report.read_text())["install"]
            report.unlink()
            return items
        missing = NO_MATCH.search(result.stderr)
        if missing is None:
            sys.exit(f"wheelhouse: resolution failed:\n{result.stdout}{result.stderr}")
        build_sdist_wheel(missing.group(1), out)
    sys.exit("wheelhouse: still resolving after building 50 sdists")


def kept_packages(items: list[dict], excluded: set[str], extras: str) -> dict[str, str]:
    """Name to version of the resolved packages to carry, given that the target has `excluded`
    (names, or shell patterns such as `nvidia-*`).

    Walks the Requires-Dist of the resolved packages from the project, with the extras each is
    asked for. An excluded package's own dependencies are taken as installed with it, but not
    those of the extras asked of it (the target may have installed it without them). Markers
    other than `extra` are not evaluated: pip already left out what they exclude.
    """
    versions = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    excluded = {name for name in versions if any(fnmatch(name, p) for p in excluded)}
    requires = {norm(i["metadata"]["name"]): i["metadata"].get("requires_dist", []) for i in items}
    asked: dict[str, set[str]] = {}
    todo = [(norm(PROJECT), {norm(e) for e in extras.split(",") if e})]
    while todo:
        name, wanted = todo.pop()
        new = wanted - asked.get(name, set())
        if name in asked and not new:
            continue
        asked.setdefault(name, set()).update(wanted)
        for req in requires[name]:
            m = REQ.match(req)
            dep = norm(m.group(1)) if m else ""
            on = {norm(e) for e in EXTRA.findall(req.partition(";")[2])}
            if dep not in versions or dep == name or (on and not on & asked[name]):
                continue
            if name not in excluded or on & new:
                todo.append((dep, {norm(e) for e in (m.group(2) or "").split(",") if e.strip()}))
    return {name: versions[name] for name in sorted(asked) if name not in excluded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="target CPython version, e.g. 3.12")
    parser.add_argument(
        "--cuda",
        choices=["12", "13"],
        help="CUDA major of the target's driver (nvidia-smi: CUDA Version); default 12",
    )
    parser.add_argument(
        "--platform",
        action="append",
        help="target platform tag (repeatable), default manylinux_2_28_x86_64",
    )
    parser.add_argument(
        "--extras", help="comma-separated extras, or none for CPU only (default gpu-cuCUDA)"
    )
    parser.add_argument(
        "--exclude",
        default="",
        help="comma-separated packages the target already has, left out (shell patterns such "
        "as nvidia-* match several)",
    )
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"))
    args = parser.parse_args()
    global python
    python = pip_python(args.python)

    extras = args.extras if args.extras is not None else f"gpu-cu{args.cuda or 12}"
    extras = "" if extras == "none" else extras
    other = {"12": "cu13", "13": "cu12"}.get(args.cuda or "")
    if other and other in extras:
        sys.exit(f"wheelhouse: --extras {extras} is not for CUDA {args.cuda} (--cuda)")
    excluded = {norm(n) for n in args.exclude.split(",") if n.strip()}
    platforms = [t for p in args.platform or ["manylinux_2_28_x86_64"] for t in platform_tags(p)]
    target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", args.python]
    target += [arg for tag in platforms for arg in ("--platform", tag)]

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.whl"), out / "INSTALL.txt"]:
        old.unlink(missing_ok=True)
    wheel = build_project_wheel(out)
    spec = f"{PROJECT}[{extras}]" if extras else PROJECT
    items = resolve(target, f"{spec} @ {wheel.as_uri()}", out)
    kept = kept_packages(items, excluded, extras)
    dropped = sorted({norm(i["metadata"]["name"]) for i in items} - set(kept))
    have = {norm(w.name.split("-")[0]) for w in out.glob("*.whl")}
    wanted = [f"{name}=={v}" for name, v in kept.items() if name not in have]
    if wanted:
        pip(
            "download",
            "--no-deps",
            "--quiet",
            *target,
            "--find-links",
            str(out),
            "--dest",
            str(out),
            *wanted,
        )
    resolved = {norm(i["metadata"]["name"]) for i in items}
    for pattern in excluded:
        if not any(fnmatch(name, pattern) for name in resolved):
            print(f"note: {pattern} (--exclude) matches none of the resolved packages", flush=True)

    write_install(out, wheel.name, spec, dropped, f"CPython {args.python}, {platforms[0]}")


def write_install(
    out: Path, project_wheel: str, spec: str, dropped: list[str], target: str
) -> None:
    """INSTALL.txt in the wheelhouse: what it holds and the offline install command."""
    wheels = sorted(out.glob("*.whl"), key=lambda w: w.stat().st_size, reverse=True)
    total = sum(w.stat().st_size for w in wheels) / 2**20
    flag = " --system-site-packages" if dropped else ""
    pip_install = f"pip install --no-index --find-links {out.name}/ '{spec}'"
    command = f"python3 -m venv{flag} .venv && .venv/bin/{pip_install}"
    text = (
        f"{project_wheel} and its dependencies, {target}: {len(wheels)} wheels, {total:.1f} MiB.\n"
    )
    if dropped:
        text += (
            f"Left out, the target must have them: {', '.join(dropped)}.\n"
            "Where they live in a virtual environment, install into that one instead (a new\n"
            f"venv sees only the base Python's packages): python3 -m {pip_install}\n"
        )
    text += f"\nOn the target, with no network and no Node, next to {out.name}/:\n\n    {command}\n"
    (out / "INSTALL.txt").write_text(text)
    print(f"\n{out}: {len(wheels)} wheels, {total:.1f} MiB; largest:")
    for w in wheels[:8]:
        print(f"  {w.stat().st_size / 2**20:8.1f} MiB  {w.name}")
    print(text)


if __name__ == "__main__":
    main()
