"""Generated malformed data and checkpoint files (seeded, so every run makes the same ones),
each taken the way a user's file is, up to the point before anything starts: ``dtrain run``'s
flags parsed and the run prepared. Each either prepares a run (a change that left the file
valid) or is refused with a user error naming the file, within seconds; nothing else.
A few go through the real command line too: exit status 2 and one ``dtrain run: error:`` line.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from IPython.core.error import UsageError

from tests.security.hostile_files import (
    DATA_FLAGS,
    RUN_FLAGS,
    archive_entries,
    array_npy,
    billion_laughs,
    cifar_pickle,
    cifar_record_bytes,
    good_arrays,
    good_cifar_batch,
    good_idx_files,
    gzip_of_zeros,
    idx_header,
    npy_bytes,
    npz_bytes,
    prepare,
    reseal,
    resumable_checkpoint,
    write_cifar_binary_dir,
    write_cifar_python_dir,
    write_idx_dir,
    zip_bytes,
)
from workbench.cli.main import main
from workbench.launch.errors import USER_ERRORS
from workbench.launch.runner import PreparedRun

pytestmark = pytest.mark.timeout(30)  # a hang fails its case instead of the suite
SEED = 20261125
CASE_SECONDS = 10.0

# A case writes its files under a folder and returns the flags of the run to prepare and the
# path every refusal must name.
Build = Callable[[Path], tuple[list[str], Path]]


@dataclass(frozen=True)
class Case:
    name: str
    build: Build

    @property
    def must_refuse(self) -> bool:
        """Every case but a flipped byte breaks its file (a flip may land in pixel data or an
        array's values: still a valid file)."""
        return "-flip-" not in self.name


def truncations(data: bytes, count: int, rng: np.random.Generator) -> list[int]:
    """``count`` distinct cut points: the ends and the inside, drawn from ``rng``."""
    inside = rng.choice(np.arange(1, len(data) - 1), size=count - 2, replace=False)
    return sorted({0, len(data) - 1, *(int(i) for i in inside)})


def flipped(data: bytes, offset: int, mask: int) -> bytes:
    changed = bytearray(data)
    changed[offset] ^= mask
    return bytes(changed)


def fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


# --- npz ---------------------------------------------------------------------------------------


def npz_case(name: str, data: bytes | Callable[[Path], None]) -> Case:
    def build(root: Path) -> tuple[list[str], Path]:
        path = root / "data.npz"
        if callable(data):
            data(path)
        else:
            path.write_bytes(data)
        return ["--dataset", f"npz:{path}", *DATA_FLAGS], path

    return Case(f"npz-{name}", build)


def npz_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for compressed in (False, True):
        kind = "deflated" if compressed else "stored"
        good = npz_bytes(good_arrays(), compressed)
        for cut in truncations(good, 9, rng):
            cases.append(npz_case(f"{kind}-cut-{cut}", good[:cut]))
        for offset in rng.choice(len(good), size=9, replace=False):
            mask = int(rng.integers(1, 256))
            cases.append(npz_case(f"{kind}-flip-{offset}", flipped(good, int(offset), mask)))
    good = npz_bytes(good_arrays())
    for magic in (b"PK\x05\x06", b"\x93NUM", b"\x1f\x8b\x08\x00"):
        cases.append(npz_case(f"magic-{magic.hex()}", magic + good[4:]))

    def with_x(descr: str, shape: tuple, payload: bytes) -> bytes:
        entries = {f"{k}.npy": array_npy(v) for k, v in good_arrays().items()}
        entries["x_train.npy"] = npy_bytes(descr, shape, payload)
        return zip_bytes(entries)

    for descr, shape, payload in [
        ("<U4", (8, 4), bytes(512)),
        ("|O", (8, 4), pickle.dumps([0] * 32)),
        ("|V8", (8, 4), bytes(256)),
        ("<M8[s]", (8, 4), bytes(256)),
        ("<c16", (8, 4), bytes(512)),
        ("<f8", (10**12,), bytes(64)),
        ("<f8", (2**40, 2**30), bytes(64)),
        ("<f8", (-8, 4), bytes(256)),
        ("<f8", (8, 5), bytes(8 * 32)),
        ("<f8", (32,), bytes(256)),
        ("<f8", (8, 4, 1), bytes(256)),
    ]:
        cases.append(npz_case(f"x-{descr}-{shape}", with_x(descr, shape, payload)))
    labels = good_arrays()
    labels["y_train"] = np.array([0, 1, 2**40, 1, 0, 1, 0, 1])
    cases.append(npz_case("label-2^40", npz_bytes(labels)))
    labels["y_train"] = np.full(8, 1e300)
    cases.append(npz_case("label-1e300", npz_bytes(labels)))
    cases.append(npz_case("empty", b""))
    cases.append(npz_case("npy-named-npz", array_npy(np.zeros((8, 4)))))
    cases.append(npz_case("fifo", fifo))
    cases.append(npz_case("directory", lambda path: path.mkdir()))
    cases.append(npz_case("dev-zero", lambda path: path.symlink_to("/dev/zero")))
    return cases


# --- IDX ---------------------------------------------------------------------------------------


def idx_case(name: str, role: str, change: Callable[[bytes], bytes], gz: bool = False) -> Case:
    def build(root: Path) -> tuple[list[str], Path]:
        files = good_idx_files()
        files[role] = change(gzip.compress(files[role], mtime=0) if gz else files[role])
        directory = write_idx_dir(root / "mnist", files, frozenset({role} if gz else ()))
        target = next(p for p in directory.iterdir() if p.name.startswith(_stem(role)))
        return ["--dataset", f"mnist:{directory}", *DATA_FLAGS], target

    return Case(f"idx-{name}", build)


def _stem(role: str) -> str:
    return {"train_images": "train-images", "train_labels": "train-labels"}.get(
        role, "t10k-images" if role == "test_images" else "t10k-labels"
    )


def idx_special(name: str, make: Callable[[Path], None]) -> Case:
    def build(root: Path) -> tuple[list[str], Path]:
        directory = write_idx_dir(root / "mnist", good_idx_files())
        target = directory / "train-images-idx3-ubyte"
        target.unlink()
        make(target)
        return ["--dataset", f"mnist:{directory}", *DATA_FLAGS], target

    return Case(f"idx-{name}", build)


def idx_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    images = good_idx_files()["train_images"]
    for cut in truncations(images, 8, rng):
        cases.append(idx_case(f"images-cut-{cut}", "train_images", lambda d, c=cut: d[:c]))
    for offset in [*range(2, 16, 2), *rng.choice(len(images), size=4, replace=False)]:
        mask = int(rng.integers(1, 256))
        cases.append(
            idx_case(
                f"images-flip-{offset}",
                "train_images",
                lambda d, o=int(offset), m=mask: flipped(d, o, m),
            )
        )
    packed = gzip.compress(images, mtime=0)
    for cut in truncations(packed, 5, rng):
        cases.append(idx_case(f"gz-cut-{cut}", "train_images", lambda d, c=cut: d[:c], gz=True))
    for offset in rng.choice(len(packed), size=5, replace=False):
        cases.append(
            idx_case(
                f"gz-flip-{offset}",
                "train_images",
                lambda d, o=int(offset): flipped(d, o, 0x5A),
                gz=True,
            )
        )
    huge = idx_header(8, 10**6, 10**3, 10**3) + bytes(64)
    cases.append(idx_case("declares-10^12", "train_images", lambda d: huge))
    cases.append(idx_case("gz-declares-10^12", "train_images", lambda d: gzip.compress(huge)))
    bomb = gzip_of_zeros(idx_header(8, 4, 28, 28), 16 << 20)
    cases.append(idx_case("gz-bomb-16MiB", "train_images", lambda d: bomb))
    most = idx_header(8, 2**32 - 1) + bytes(4)
    cases.append(idx_case("labels-declare-2^32", "train_labels", lambda d: most))
    for code in (0x0B, 0x0D, 0xFF):
        recoded = lambda d, c=code: d[:2] + bytes([c]) + d[3:]  # noqa: E731
        cases.append(idx_case(f"code-{code:02x}", "train_images", recoded))
    cases.append(idx_case("labels-empty", "train_labels", lambda d: b""))
    cases.append(idx_case("gz-empty", "test_labels", lambda d: b"", gz=True))
    cases.append(idx_case("ndim-255", "test_labels", lambda d: bytes([0, 0, 8, 255]) + d[8:]))
    cases.append(idx_special("fifo", fifo))
    cases.append(idx_special("directory", lambda path: path.mkdir()))
    cases.append(idx_special("dev-zero", lambda path: path.symlink_to("/dev/zero")))
    return cases


# --- CIFAR-10 ----------------------------------------------------------------------------------


def cifar_case(name: str, train: bytes | None, python: bool, make=None) -> Case:
    def build(root: Path) -> tuple[list[str], Path]:
        write = write_cifar_python_dir if python else write_cifar_binary_dir
        directory = write(root / "cifar", train if train is not None else b"")
        target = directory / ("data_batch_1" if python else "data_batch_1.bin")
        if make is not None:
            target.unlink()
            make(target)
        return ["--dataset", f"cifar10:{directory}", *DATA_FLAGS], target

    return Case(f"cifar-{name}", build)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo a pickle ran code",))


def hostile_dtype_pickle() -> bytes:
    """A batch whose data array's dtype state claims it holds object pointers."""
    data = cifar_pickle(good_cifar_batch())
    plain = b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00"  # elsize -1, alignment -1, flags 0
    assert plain in data
    return data.replace(plain, b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x3f", 1)


def cifar_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    binary = cifar_record_bytes(2)
    for cut in truncations(binary, 5, rng):
        cases.append(cifar_case(f"bin-cut-{cut}", binary[:cut], python=False))
    for offset in (0, 3073, *rng.choice(len(binary), size=3, replace=False)):
        cases.append(
            cifar_case(f"bin-flip-{offset}", flipped(binary, int(offset), 0xF0), python=False)
        )
    good = cifar_pickle(good_cifar_batch())
    for cut in truncations(good, 8, rng):
        cases.append(cifar_case(f"pickle-cut-{cut}", good[:cut], python=True))
    for offset in rng.choice(len(good), size=8, replace=False):
        mask = int(rng.integers(1, 256))
        cases.append(
            cifar_case(f"pickle-flip-{offset}", flipped(good, int(offset), mask), python=True)
        )
    cases.append(cifar_case("laughs-deep", billion_laughs(60, 2), python=True))
    cases.append(cifar_case("laughs-wide", billion_laughs(18, 9), python=True))
    cases.append(cifar_case("code", cifar_pickle({b"data": _RunsCode()}), python=True))
    cases.append(cifar_case("object-dtype-state", hostile_dtype_pickle(), python=True))
    objects = {b"data": np.array([[None] * 3072], dtype=object), b"labels": [1]}
    cases.append(cifar_case("object-array", cifar_pickle(objects), python=True))
    huge_labels = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [10**30]}
    cases.append(cifar_case("label-10^30", cifar_pickle(huge_labels), python=True))
    cases.append(cifar_case("bin-empty", b"", python=False))
    cases.append(cifar_case("pickle-empty", b"", python=True))
    cases.append(cifar_case("bin-fifo", None, python=False, make=fifo))
    cases.append(cifar_case("pickle-fifo", None, python=True, make=fifo))
    cases.append(cifar_case("bin-directory", None, python=False, make=lambda p: p.mkdir()))
    return cases


# --- checkpoints -------------------------------------------------------------------------------


def checkpoint_case(name: str, change: Callable[[Path], Path]) -> Case:
    """``change`` alters a valid checkpoint and returns the path a refusal must name."""

    def build(root: Path) -> tuple[list[str], Path]:
        checkpoint = resumable_checkpoint(root / "ckpt")
        return [*RUN_FLAGS, "--resume", str(checkpoint)], change(checkpoint)

    return Case(f"checkpoint-{name}", build)


def replace_entry(name: str, data: bytes, shape: list[int] | None = None) -> Callable:
    archive = "params.npz" if "/" in name and name.count("/") == 1 else "optimizer.npz"
    key = "params" if archive == "params.npz" else "optimizer_state"

    def change(checkpoint: Path) -> Path:
        path = checkpoint / archive
        entries = archive_entries(path)
        entries[f"{name}.npy"] = data
        path.write_bytes(zip_bytes(entries))
        if shape is not None:
            reseal(checkpoint, lambda m: m[key][name].update(shape=shape))
        else:
            reseal(checkpoint)
        return checkpoint

    return change


def checkpoint_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    with tempfile.TemporaryDirectory() as folder:
        sample = resumable_checkpoint(Path(folder) / "ckpt")
        names = ("params.npz", "optimizer.npz", "manifest.json")
        sizes = {name: (sample / name).stat().st_size for name in names}
    for name, size in sizes.items():
        for cut in sorted(rng.choice(size, size=3, replace=False)):
            cases.append(
                checkpoint_case(
                    f"{name}-cut-{cut}",
                    lambda c, n=name, k=int(cut): _cut(c / n, k),
                )
            )
    for name in ("params.npz", "optimizer.npz"):
        for cut in sorted(rng.choice(sizes[name], size=4, replace=False)):
            cases.append(
                checkpoint_case(
                    f"{name}-cut-{cut}-resealed",
                    lambda c, n=name, k=int(cut): _cut(c / n, k, resealed=True),
                )
            )
        for offset in rng.choice(sizes[name], size=5, replace=False):
            mask = int(rng.integers(1, 256))
            cases.append(
                checkpoint_case(
                    f"{name}-flip-{offset}-resealed",
                    lambda c, n=name, o=int(offset), m=mask: _flip(c / n, o, m),
                )
            )
    for offset in rng.choice(sizes["manifest.json"], size=4, replace=False):
        cases.append(
            checkpoint_case(
                f"manifest-flip-{offset}",
                lambda c, o=int(offset): _flip(c / "manifest.json", o, 0x20, resealed=False),
            )
        )
    huge = npy_bytes("<f4", (10**6, 10**6), bytes(64))
    cases += [
        checkpoint_case("kernel-declares-10^12", replace_entry("dense_0/kernel", huge)),
        checkpoint_case(
            "kernel-declares-10^12-listed",
            replace_entry("dense_0/kernel", huge, [10**6, 10**6]),
        ),
        checkpoint_case(
            "momentum-declares-10^12",
            replace_entry("dense_0/kernel/momentum", huge, [10**6, 10**6]),
        ),
        checkpoint_case(
            "kernel-wrong-shape",
            replace_entry("dense_0/kernel", array_npy(np.zeros((8, 16), np.float32)), [8, 16]),
        ),
        checkpoint_case(
            "kernel-wrong-dtype",
            replace_entry("dense_0/kernel", array_npy(np.zeros((16, 8), np.float16))),
        ),
        checkpoint_case(
            "momentum-wrong-shape",
            replace_entry("dense_0/bias/momentum", array_npy(np.zeros(3, np.float32)), [3]),
        ),
        checkpoint_case(
            "object-array",
            replace_entry("dense_0/bias", npy_bytes("|O", (8,), pickle.dumps([0] * 8))),
        ),
        checkpoint_case("optimizer-emptied", _empty_optimizer),
        checkpoint_case("manifest-200000-deep", _deep_manifest),
        checkpoint_case("manifest-17MiB", _large_manifest),
        checkpoint_case("manifest-empty", lambda c: _write(c / "manifest.json", b"")),
        checkpoint_case("params-empty", lambda c: _write(c / "params.npz", b"")),
        checkpoint_case("params-npy", lambda c: _write(c / "params.npz", array_npy(np.ones(3)))),
    ]
    for name in ("params.npz", "optimizer.npz"):
        cases.append(checkpoint_case(f"{name}-fifo", lambda c, n=name: _make(c / n, fifo)))
    # The --resume check refuses a directory without a regular manifest, naming the directory.
    cases.append(
        checkpoint_case("manifest.json-fifo", lambda c: _make(c / "manifest.json", fifo).parent)
    )
    cases.append(checkpoint_case("params-directory", lambda c: _make(c / "params.npz", Path.mkdir)))
    cases.append(
        checkpoint_case(
            "params-dev-zero",
            lambda c: _make(c / "params.npz", lambda p: p.symlink_to("/dev/zero")),
        )
    )
    return cases


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _make(path: Path, make: Callable[[Path], object]) -> Path:
    path.unlink()
    make(path)
    return path


def _cut(path: Path, size: int, resealed: bool = False) -> Path:
    path.write_bytes(path.read_bytes()[:size])
    if resealed:
        reseal(path.parent)
    return path


def _flip(path: Path, offset: int, mask: int, resealed: bool = True) -> Path:
    path.write_bytes(flipped(path.read_bytes(), offset, mask))
    if resealed:
        reseal(path.parent)
    return path


def _empty_optimizer(checkpoint: Path) -> Path:
    (checkpoint / "optimizer.npz").write_bytes(zip_bytes({}))
    reseal(checkpoint, lambda m: m.update(optimizer_state={}))
    return checkpoint / "optimizer.npz"


def _deep_manifest(checkpoint: Path) -> Path:
    path = checkpoint / "manifest.json"
    path.write_text('{"config": ' + "[" * 200_000 + "]" * 200_000 + "}")
    return path


def _large_manifest(checkpoint: Path) -> Path:
    path = checkpoint / "manifest.json"
    path.write_bytes(b'{"config": "' + b"x" * (17 << 20) + b'"}')
    return path


# --- the cases, and the run each takes ---------------------------------------------------------


def generate_cases() -> list[Case]:
    rng = np.random.default_rng(SEED)
    return [*npz_cases(rng), *idx_cases(rng), *cifar_cases(rng), *checkpoint_cases(rng)]


CASES = generate_cases()


def test_at_least_120_cases_are_generated_the_same_every_time():
    assert len(CASES) >= 120
    assert [case.name for case in generate_cases()] == [case.name for case in CASES]
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_malformed_file_prepares_a_run_or_is_refused_naming_it(tmp_path, capfd, case):
    flags, named = case.build(tmp_path)
    start = time.monotonic()
    try:
        prepared = prepare(flags)
    except USER_ERRORS as error:
        message = str(error)
        assert str(named) in message, message
    else:
        assert not case.must_refuse, "a broken file was accepted"
        assert isinstance(prepared, PreparedRun)
    assert time.monotonic() - start < CASE_SECONDS
    assert "a pickle ran code" not in capfd.readouterr().out


CLI_CASES = [
    "npz-empty",
    "npz-npy-named-npz",
    "npz-label-2^40",
    "idx-gz-bomb-16MiB",
    "cifar-laughs-deep",
    "checkpoint-params.npz-fifo",
    "checkpoint-kernel-wrong-shape",
    "checkpoint-manifest-200000-deep",
]


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_command_line_exits_2_with_one_error_line_naming_the_file(tmp_path, capsys, name):
    (case,) = [case for case in CASES if case.name == name]
    flags, named = case.build(tmp_path)
    start = time.monotonic()
    code = main(["run", *flags, "--json"])
    assert time.monotonic() - start < CASE_SECONDS
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    (line,) = [line for line in captured.err.splitlines() if line.strip()]
    assert line.startswith("dtrain run: error:") and str(named) in line


@pytest.mark.parametrize("name", ["npz-empty", "cifar-laughs-deep", "checkpoint-params.npz-fifo"])
def test_the_magic_raises_a_usage_error_naming_the_file(tmp_path, shell, store_root, name):
    (case,) = [case for case in CASES if case.name == name]
    flags, named = case.build(tmp_path)
    start = time.monotonic()
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("dtrain", shlex.join(flags))
    assert time.monotonic() - start < CASE_SECONDS
    assert str(named) in str(raised.value)
    assert not store_root.exists() or not any(store_root.iterdir())
