"""A trained checkpoint as a GGUF file, for llama.cpp: the embedded server, `insandbox bench --gguf`.

    path = export_gguf(Path("runs/train/final"), Path("model.gguf"), outtype="f16")
    agree = compare_greedy(Path("runs/train/final"), path)      # greedy tokens, transformers vs llama.cpp

The conversion is llama.cpp's own convert_hf_to_gguf.py (every architecture llama.cpp knows,
tensor layouts and tokenizer metadata as llama.cpp expects them), taken from the source
distribution of the installed llama-cpp-python version, so converter and runtime agree. It is
fetched once with pip into ~/.cache/insandbox/llama-convert/VERSION (INSANDBOX_CONVERTER_CACHE
moves it; exports running at once share it safely); `converter=` points at a convert_hf_to_gguf.py
of your own instead.

Two things are smoothed over on a staged copy of the checkpoint (the checkpoint is never changed):
  - a tokenizer that transformers converted from a GGUF is a byte-level BPE flagged byte_fallback,
    with a decoder for both; llama.cpp's converter reads that flag as a sentencepiece-style vocabulary.
    Byte-level BPE never falls back (every byte is in its vocabulary), so the flag is dropped and the
    decoder made the byte-level one: the same tokens either way.
  - the converter imports sentencepiece before it looks for a tokenizer.model; without sentencepiece
    installed, a placeholder lets checkpoints that have none convert (one that has one is refused).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...core.errors import InsandboxError

DEFAULT_LLAMA_VERSION = "0.3.36"
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
CHECK_PROMPT = "What is the capital of France? Answer in one word."

SENTENCEPIECE_PLACEHOLDER = '''"""Stands in for sentencepiece (a checkpoint without a tokenizer.model)."""


class SentencePieceProcessor:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this checkpoint has a sentencepiece tokenizer (tokenizer.model): "
                           "pip install sentencepiece, then export again")
'''


class ExportError(InsandboxError, RuntimeError):
    """The conversion failed (told why)."""


def cache_root() -> Path:
    return Path(os.environ.get("INSANDBOX_CONVERTER_CACHE", "~/.cache/insandbox/llama-convert")).expanduser()


def llama_cpp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return DEFAULT_LLAMA_VERSION


def converter_script(version: Optional[str] = None) -> Path:
    """convert_hf_to_gguf.py of llama-cpp-python VERSION's vendored llama.cpp (fetched once, then cached)."""
    version = version or llama_cpp_version()
    target = cache_root() / version
    script = target / "convert_hf_to_gguf.py"
    if script.is_file():
        return script
    with tempfile.TemporaryDirectory(prefix="insandbox-sdist-") as tmp:
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                                  ":all:", f"llama-cpp-python=={version}", "-d", tmp],
                                 capture_output=True, text=True)
        archives = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if fetched.returncode != 0 or not archives:
            last = (fetched.stderr or fetched.stdout).strip().splitlines()[-1:] or ["no archive"]
            raise ExportError(f"could not fetch llama.cpp's converter (llama-cpp-python {version} sources): "
                              f"{last[0]}")
        staging = Path(tempfile.mkdtemp(prefix=f"{version}.", dir=_mkdir(target.parent)))
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                rel = member.name.split("/vendor/llama.cpp/", 1)[-1] if "/vendor/llama.cpp/" in member.name else ""
                if rel and (member.isfile() or member.isdir()) and rel.startswith(CONVERTER_PARTS):
                    member.name = rel
                    tar.extract(member, staging, filter="data")
        if not (staging / "convert_hf_to_gguf.py").is_file():
            shutil.rmtree(staging, ignore_errors=True)
            raise ExportError(f"llama-cpp-python {version}'s sources hold no convert_hf_to_gguf.py")
        _install(staging, target)
    return script


def _install(staging: Path, target: Path) -> None:
    """Move a complete converter into the cache, whole or not at all: a cache half written is never used.
    Exports running at once may each fetch one; the first rename wins, and the others (the rename fails:
    the folder is there, not empty) discard their copy and use the winner's, which is the same."""
    try:
        staging.rename(target)
        return
    except OSError:
        if not (target / "convert_hf_to_gguf.py").is_file():
            shutil.rmtree(staging, ignore_errors=True)
            raise ExportError(f"cannot put llama.cpp's converter in its cache: {target} is in the way (remove it "
                              "and export again)") from None
    shutil.rmtree(staging, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _stage(checkpoint: Path, into: Path) -> None:
    """The checkpoint's files as links, tokenizer.json rewritten when it is a GGUF-converted byte-level BPE."""
    for item in checkpoint.iterdir():
        if item.name != "tokenizer.json":
            (into / item.name).symlink_to(item.resolve())
    tokenizer = checkpoint / "tokenizer.json"
    if not tokenizer.is_file():
        return
    spec = json.loads(tokenizer.read_text(encoding="utf-8"))
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") == "BPE" and model.get("byte_fallback") and pre.get("type") == "ByteLevel":
        model["byte_fallback"] = False
        spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    (into / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")


def export_gguf(checkpoint: Path, out: Path, outtype: str = "f16", converter: Optional[Path] = None) -> Path:
    """Write `checkpoint` (a transformers folder) as the GGUF file `out`."""
    import importlib.util

    if outtype not in OUTTYPES:
        raise ExportError(f"outtype {outtype!r}: one of {', '.join(OUTTYPES)}")
    if not (checkpoint / "config.json").is_file():
        raise ExportError(f"{checkpoint}: not a transformers checkpoint (no config.json)")
    script = Path(converter) if converter else converter_script()
    if not script.is_file():
        raise ExportError(f"converter {script}: no such file")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="insandbox-export-") as tmp:
        staged, shim = Path(tmp) / "checkpoint", Path(tmp) / "shim"
        staged.mkdir()
        _stage(checkpoint, staged)
        env = dict(os.environ)
        if importlib.util.find_spec("sentencepiece") is None:
            (shim / "sentencepiece").mkdir(parents=True)
            (shim / "sentencepiece" / "__init__.py").write_text(SENTENCEPIECE_PLACEHOLDER, encoding="utf-8")
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
        partial = out.with_name(out.name + ".part")
        done = subprocess.run([sys.executable, str(script), str(staged), "--outfile", str(partial), "--outtype",
                               outtype], capture_output=True, text=True, env=env)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise ExportError(f"llama.cpp's converter failed: {lines[-1] if lines else 'no output'}")
        partial.replace(out)
    return out


@dataclass
class GreedyComparison:
    prompt_ids: list[int]
    transformers_ids: list[int]
    llama_cpp_ids: list[int]

    @property
    def agreeing(self) -> int:
        """Leading tokens the two agree on."""
        n = 0
        for a, b in zip(self.transformers_ids, self.llama_cpp_ids):
            if a != b:
                break
            n += 1
        return n

    @property
    def same(self) -> bool:
        return self.transformers_ids == self.llama_cpp_ids


def compare_greedy(checkpoint: Path, gguf: Path, prompt: str = CHECK_PROMPT, max_tokens: int = 16) -> GreedyComparison:
    """Greedy tokens of the checkpoint in transformers and of the GGUF in llama.cpp, from the same prompt ids."""
    import torch
    from llama_cpp import Llama
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the command prints one line per result
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    ids = list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False))
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.eval()
    stops = model.generation_config.eos_token_id
    stops = set(stops if isinstance(stops, list) else [stops] if stops is not None else [])
    with torch.no_grad():
        tensor = torch.tensor([ids])
        sequence = model.generate(tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=max_tokens,
                                  do_sample=False, pad_token_id=tokenizer.pad_token_id)
    from_transformers = sequence[0, len(ids):].tolist()
    del model
    llm = Llama(model_path=str(gguf), n_ctx=max(512, len(ids) + max_tokens + 8), verbose=False, seed=0)
    try:
        from_llama: list[int] = []
        for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            from_llama.append(token)
            if token in stops or len(from_llama) >= max_tokens:
                break
    finally:
        llm.close()
    return GreedyComparison(ids, from_transformers, from_llama)
