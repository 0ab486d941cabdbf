"""Finding a model's configuration: a bundled preset by name, or a ``config.json`` on disk."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache

from .kv_size import ModelArch, ModelConfigError

__all__ = ["PRESETS_FILE", "load_model", "preset_names"]

#: The bundled presets (package data): each model's KV-relevant config fields and their source.
PRESETS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets.json")


@lru_cache(maxsize=1)
def _presets() -> Mapping[str, Mapping[str, object]]:
    with open(PRESETS_FILE, encoding="utf-8") as fh:
        data = json.load(fh)
    presets = data["presets"]
    assert isinstance(presets, dict)
    return presets


def preset_names() -> tuple[str, ...]:
    """The bundled presets' names, as ``--model`` takes them."""
    return tuple(_presets())


def load_model(name_or_path: str) -> ModelArch:
    """The model ``name_or_path`` names: a bundled preset (its name, case ignored), else a
    ``config.json`` file or a folder holding one.  :class:`ModelConfigError` says what is wrong
    (the file, the field) or lists the presets."""
    for name in _presets():
        if name.lower() == name_or_path.strip().lower():
            return _preset(name)
    path = name_or_path
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        st = os.stat(path)
    except OSError:
        raise ModelConfigError(f"{name_or_path!r} is neither a bundled preset ("
                               + ", ".join(preset_names()) + ") nor a config.json file or folder") from None
    # a configuration is checked each time it is built: the file is read once per version
    return _read(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=None)
def _preset(name: str) -> ModelArch:
    preset = _presets()[name]
    config, source = preset["config"], preset["source"]
    assert isinstance(config, dict) and isinstance(source, str)
    return ModelArch.from_config(config, name=name, source=f"preset {name} ({source})")


@lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, size: int) -> ModelArch:
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise ModelConfigError(f"{path}:{line}: not JSON ({exc})" if line else f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: a model config is a JSON object, not {type(config).__name__}")
    own = config.get("_name_or_path")
    return ModelArch.from_config(config, name=own if isinstance(own, str) and own else path, source=path)
