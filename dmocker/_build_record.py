"""The compiled build's record of its sources, checked each time dmocker is imported.

``setup.py`` compiles the replay's core with mypyc.  In an editable install the extension
modules sit beside their ``.py`` files, and Python imports an extension before a source of the
same name: a compiled module edited without rebuilding would silently run its old code.  So the
build writes a record of every source it compiled (checksum, size, modification time) beside
the extensions, in the tree of an editable install and in a wheel, and importing dmocker checks:

- a source with the recorded size and modification time is unchanged (one ``stat`` each);
- otherwise its checksum decides (a file touched, or edited and restored, is unchanged);
- a source that changed, or is gone, while its extension is still there stops the import with
  :class:`StaleBuildError`, naming the modules and the fix.

A source changed with no extension beside it runs as edited: nothing to check.  A pure install
(``DMOCKER_PURE=1``) writes no record and leaves no extension in the tree.

This module is loaded by ``setup.py`` as a plain file (the package itself is not imported
while it is being built), so it uses the standard library only.
"""

import os

#: The record's file name, in the package folder.
RECORD_NAME = "_compiled_sources.txt"
_HEADER = "# the sources of dmocker's compiled modules, as built (setup.py): crc32 size mtime_ns path\n"
# extension modules' file endings (Linux and macOS, Windows)
_EXTENSION_ENDINGS = (".so", ".pyd")


class StaleBuildError(ImportError):
    """Compiled extension modules were built from other sources than the ones in place."""


def record_line(package_dir: str, source: str) -> str:
    """The record's line for ``source``, a ``/``-separated path under ``package_dir``."""
    with open(os.path.join(package_dir, source), "rb") as f:
        # stat before reading: an edit in between is then seen at import, never hidden
        st = os.fstat(f.fileno())
        data = f.read()
    return f"{_checksum(data)} {st.st_size} {st.st_mtime_ns} {source}\n"


def write_record(path: str, lines: list[str]) -> None:
    """Write a record to ``path`` whole or not at all (a temp file renamed over it)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_HEADER)
        f.writelines(lines)
    os.replace(tmp, path)


def stale_modules(package_dir: str) -> list[str]:
    """The compiled modules that would be imported although their sources changed, one line each
    (``dmocker.engines.vllm: engines/vllm.py changed since the build``); empty when none."""
    try:
        with open(os.path.join(package_dir, RECORD_NAME), encoding="utf-8") as f:
            record = f.read()
    except FileNotFoundError:
        return _extensions_without_record(package_dir)
    stale: list[str] = []
    for line in record.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            crc, size_text, mtime_text, source = line.split(" ", 3)
            size, mtime_ns = int(size_text), int(mtime_text)
        except ValueError:
            return [f"{RECORD_NAME}: unreadable line {line!r} (rebuild to rewrite it)"]
        path = f"{package_dir}/{source}"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if _extension_beside(path):
                stale.append(f"{_module(package_dir, source)}: {source} was removed after the build")
            continue
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        if not _extension_beside(path):
            continue
        if st.st_size != size or _file_checksum(path) != crc:
            stale.append(f"{_module(package_dir, source)}: {source} changed since the build")
    return stale


def check(package_dir: str) -> None:
    """Raise :class:`StaleBuildError` if a compiled module in ``package_dir`` is older than its
    source; return at once otherwise."""
    stale = stale_modules(package_dir)
    if stale:
        raise StaleBuildError(_message(package_dir, stale))


def _checksum(data: bytes) -> str:
    # a checksum, not a cryptographic hash: it catches a forgotten rebuild, not tampering, and
    # zlib loads at once where hashlib loads OpenSSL (a wheel's sources are checksummed at every
    # import: installing them gives them new modification times)
    import zlib  # only once a source's modification time changed

    return f"{zlib.crc32(data):08x}"


def _file_checksum(path: str) -> str:
    with open(path, "rb") as f:
        return _checksum(f.read())


def _extension_beside(source_path: str) -> bool:
    """Whether this interpreter would import an extension module instead of ``source_path``."""
    from importlib.machinery import EXTENSION_SUFFIXES  # only once a source's modification time changed

    stem = source_path.removesuffix(".py")
    return any(os.path.exists(stem + suffix) for suffix in EXTENSION_SUFFIXES)


def _extensions_without_record(package_dir: str) -> list[str]:
    """A build from before the record existed: its extensions can be checked against nothing."""
    try:
        names = sorted(n for n in os.listdir(package_dir) if n.endswith(_EXTENSION_ENDINGS))
    except FileNotFoundError:
        return []
    return [f"{name}: built without a record of its sources ({RECORD_NAME})" for name in names]


def _module(package_dir: str, source: str) -> str:
    dotted = source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return f"{os.path.basename(os.path.abspath(package_dir))}.{dotted}"


def _message(package_dir: str, stale: list[str]) -> str:
    project = os.path.dirname(os.path.abspath(package_dir))
    if os.path.exists(os.path.join(project, "setup.py")):  # an editable install or a checkout
        fix = (f"Rebuild: pip install -e {project}\n"
               f"or work on the pure sources, without compiling: DMOCKER_PURE=1 pip install -e {project}")
    else:
        fix = "Reinstall dmocker: pip install --force-reinstall dmocker (or from its source tree)"
    lines = "".join(f"\n  {s}" for s in stale)
    return (f"dmocker's compiled modules ({package_dir}) are older than their sources; Python would "
            f"import the compiled ones and run the old code:{lines}\n{fix}")
