"""dmocker: a formally specified toolkit for the prefill->decode KV-cache handoff."""

from dmocker._build_record import check as _check_build

#: The one place the version is written: pyproject.toml reads it (setuptools dynamic version).
__version__ = "0.1.0"

# Before any compiled module loads: if their sources changed since the build, stop here and name
# them (Python imports an extension module instead of the .py file beside it).
_check_build(__path__[0])
