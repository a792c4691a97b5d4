"""Samplers for rollouts, each a GenerateFn: (context ids, SamplingParams) -> Sampled.

    transformers.py  any transformers causal LM (the policy in TRL training; any local model)
    llama_cpp.py     a GGUF model through llama.cpp (the embedded model), with a prefix cache per rollout
    scripted.py      scripted turns with a fixed latency (tests, and measuring the environment's overhead)

verl brings its own sampler (vLLM or SGLang behind its server manager); see trainers/verl_agent_loop.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


def load_gguf_tokenizer(gguf: Path, cache: Optional[Path] = None) -> Any:
    """The tokenizer (and chat template) a GGUF file carries, as a transformers tokenizer: the same
    vocabulary ids llama.cpp uses. Converting it from the GGUF takes seconds, so the result is kept
    in ~/.cache/insandbox/tokenizers (by file name, size and modification time) and reused."""
    import os
    import shutil

    from transformers import AutoTokenizer

    gguf = Path(gguf).resolve()
    st = gguf.stat()
    cache = cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "insandbox" / "tokenizers"
    folder = cache / f"{gguf.stem}-{st.st_size}-{int(st.st_mtime)}"
    if (folder / "tokenizer_config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(folder))
        except Exception:  # a damaged cache: convert again
            pass
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        tokenizer.save_pretrained(str(tmp))
        os.replace(tmp, folder)
    except OSError:
        pass  # no cache (or another process cached it first): fine, only slower next time
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def load_policy(model: Optional[str] = None, gguf: Optional[Path] = None, seed: int = 0) -> tuple[Any, Any]:
    """(tokenizer, generate): a transformers model when `model` is given, else a GGUF model through
    llama.cpp (by default the embedded SmolLM2-135M-Instruct)."""
    if model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .transformers import TransformersGenerator

        tokenizer = AutoTokenizer.from_pretrained(model)
        policy = AutoModelForCausalLM.from_pretrained(model)
        policy.eval()
        return tokenizer, TransformersGenerator(policy, tokenizer.pad_token_id)
    from ....models.local_server import default_gguf
    from .llama_cpp import LlamaCppGenerator

    gguf = Path(gguf) if gguf else default_gguf()
    return load_gguf_tokenizer(gguf), LlamaCppGenerator(gguf, seed=seed)
