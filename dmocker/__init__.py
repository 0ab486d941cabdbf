"""dmocker: a formally specified toolkit for the prefill->decode KV-cache handoff."""

#: The one place the version is written: pyproject.toml reads it (setuptools dynamic version).
__version__ = "0.1.0"
