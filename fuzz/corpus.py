#!/usr/bin/env python3
"""The fuzz corpora: one archive per target, `fuzz/corpus/<target>.tar.gz`.

Git keeps each corpus as one gzip-compressed tar of its inputs (thousands of small
files each, which a clone would otherwise fetch and check out one by one);
`cargo test` replays every input straight from the archive (src/fuzzing/mod.rs)
and checks it replayed as many inputs, and as many bytes, as `fuzz/corpus/counts`
says. `cargo fuzz run`, `cargo fuzz cmin` and seeds.py work on the folder
`fuzz/corpus/<target>/`, which git ignores:

    python3 fuzz/corpus.py unpack [TARGET...]   # archive -> folder (adds what the folder lacks)
    python3 fuzz/corpus.py pack [TARGET...]     # folder -> archive, and counts
    python3 fuzz/corpus.py pack --drop-missing TARGET   # after cmin: inputs may go
    python3 fuzz/corpus.py check                # archives against counts, and a round trip

Without a TARGET, `unpack` takes every archive and `pack` every folder. `pack`
refuses a folder that lacks inputs the archive holds (a folder never unpacked, or
one minimised without saying so) unless `--drop-missing` is given. An archive is
the same bytes for the same inputs: entries in the order of their contents (similar
inputs side by side, which gzip's window needs), no owners, no times.
"""
import gzip
import hashlib
import io
import os
import pathlib
import sys
import tarfile
import tempfile

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"
COUNTS = CORPUS / "counts"
SUFFIX = ".tar.gz"


def archive_of(target):
    return CORPUS / f"{target}{SUFFIX}"


def folder_of(target):
    return CORPUS / target


def archived_targets():
    return sorted(p.name[: -len(SUFFIX)] for p in CORPUS.glob(f"*{SUFFIX}"))


def unpacked_targets():
    return sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def plain_name(name):
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name


def read_archive(path, data=None):
    """The inputs of the archive at `path` (or of its bytes `data`), as (name, bytes),
    in its order."""
    inputs = []
    source = {"fileobj": io.BytesIO(data)} if data is not None else {"name": path}
    with tarfile.open(mode="r:gz", **source) as tar:
        for member in tar:
            if not member.isfile() or not plain_name(member.name):
                sys.exit(f"{path}: {member.name!r} is not a plain input file")
            inputs.append((member.name, tar.extractfile(member).read()))
    return inputs


def read_folder(folder):
    inputs = []
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            sys.exit(f"{path}: a corpus folder holds only input files")
        inputs.append((path.name, path.read_bytes()))
    return inputs


def archive_bytes(inputs):
    """The archive of `inputs`: the same bytes for the same inputs."""
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(inputs, key=lambda i: (i[1], i[0])):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(tar_bytes.getvalue())
    return out.getvalue()


def write_atomically(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def counts_text():
    lines = [
        "# target, inputs, bytes: one line per fuzz/corpus/<target>.tar.gz, written by",
        "# `python3 fuzz/corpus.py pack`; `cargo test` replays each archive and checks it",
        "# against its line.",
    ]
    for target in archived_targets():
        inputs = read_archive(archive_of(target))
        lines.append(f"{target} {len(inputs)} {sum(len(d) for _, d in inputs)}")
    return "\n".join(lines) + "\n"


def digest(data):
    return hashlib.sha256(data).digest()


def unpack(targets, into=None):
    for target in targets or archived_targets():
        if not archive_of(target).is_file():
            sys.exit(f"no archive {archive_of(target)}")
        folder = (into or CORPUS) / target
        folder.mkdir(parents=True, exist_ok=True)
        inputs = read_archive(archive_of(target))
        written = 0
        for name, data in inputs:
            path = folder / name
            if not path.exists():
                path.write_bytes(data)
                written += 1
        if into is None:
            print(f"{target}: {len(inputs)} inputs in the archive, {written} written to {folder}")


def pack(targets, drop_missing=False):
    targets = targets or unpacked_targets()
    if not targets:
        sys.exit(f"nothing to pack: no folder in {CORPUS} (unpack first)")
    packed = []
    for target in targets:
        folder = folder_of(target)
        if not folder.is_dir():
            sys.exit(f"no folder {folder} to pack")
        inputs = read_folder(folder)
        if not inputs:
            sys.exit(f"{folder} is empty")
        before = read_archive(archive_of(target)) if archive_of(target).is_file() else []
        kept = {digest(d) for _, d in inputs}
        missing = [n for n, d in before if digest(d) not in kept]
        if missing and not drop_missing:
            sys.exit(
                f"{target}: the folder lacks {len(missing)} of the archive's {len(before)} inputs "
                f"(unpack first; after `cargo fuzz cmin`, pack with --drop-missing)"
            )
        old = {digest(d) for _, d in before}
        added = sum(1 for _, d in inputs if digest(d) not in old)
        packed.append((target, archive_bytes(inputs)))
        print(f"{target}: {len(inputs)} inputs packed ({added} new, {len(missing)} dropped)")
    # Written once every folder passed, so that a refusal leaves every archive as it was.
    for target, data in packed:
        write_atomically(archive_of(target), data)
    write_atomically(COUNTS, counts_text().encode())


def check():
    """Every archive holds plain input files, in the packed order, as many as counts
    says; unpacked into an empty folder and packed again, it holds the same inputs."""
    expected = counts_text()
    if not COUNTS.is_file() or COUNTS.read_text() != expected:
        sys.exit(f"{COUNTS} does not match the archives: run `python3 fuzz/corpus.py pack`")
    with tempfile.TemporaryDirectory() as tmp:
        for target in archived_targets():
            inputs = read_archive(archive_of(target))
            if inputs != sorted(inputs, key=lambda i: (i[1], i[0])):
                sys.exit(f"{archive_of(target)} was not written by `python3 fuzz/corpus.py pack`")
            unpack([target], into=pathlib.Path(tmp))
            packed = archive_bytes(read_folder(pathlib.Path(tmp) / target))
            again = read_archive(archive_of(target), data=packed)
            if again != inputs:
                sys.exit(f"{archive_of(target)}: unpacking and packing again changed its inputs")
    print(f"{len(archived_targets())} corpus archives match {COUNTS.name} and unpack to what they hold")


def main(args):
    drop_missing = "--drop-missing" in args
    args = [a for a in args if a != "--drop-missing"]
    if not args or args[0] not in ("unpack", "pack", "check"):
        sys.exit(__doc__)
    command, targets = args[0], args[1:]
    if drop_missing and command != "pack":
        sys.exit("--drop-missing is for pack")
    if command == "unpack":
        unpack(targets)
    elif command == "pack":
        pack(targets, drop_missing)
    else:
        if targets:
            sys.exit("check takes no target")
        check()


if __name__ == "__main__":
    main(sys.argv[1:])
