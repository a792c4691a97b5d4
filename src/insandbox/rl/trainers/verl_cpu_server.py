"""A verl rollout server on a CPU: llama.cpp over a GGUF model (by default the embedded SmolLM2),
behind verl's own load balancer and LLMServerClient, so verl's agent-loop machinery runs without a GPU.

verl's rollout servers (vLLM, SGLang) are Ray actors with `generate(prompt_ids, sampling_params,
request_id, ...) -> TokenOutput`; this is one more, on a real sampler. It follows vLLM's rules:
max_tokens from the request (else what the prompt and response lengths leave), the EOS token
stops unless ignore_eos, a stop token is kept in the output, logprobs only when asked.

    client = start_cpu_llm_client(config, gguf)          # verl's LLMServerClient over our Ray actor
    worker = AgentLoopWorker(config, client)              # verl's agent-loop worker, as in training

verl's model config needs a Hugging Face folder (tokenizer and config.json, no weights: nothing on
the rollout side loads them): `export_gguf_as_hf` writes one from the GGUF's own metadata.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..rollout.types import SamplingParams


class LlamaCppRolloutServer:
    """verl's rollout-server interface over llama.cpp (run as a Ray actor)."""

    def __init__(self, gguf: str, n_ctx: int = 8192, seed: int = 0, prompt_length: int = 1024,
                 response_length: int = 1024, n_threads: Optional[int] = None):
        from ..rollout.backends.llama_cpp import LlamaCppGenerator

        self.generator = LlamaCppGenerator(Path(gguf), n_ctx=n_ctx, seed=seed, n_threads=n_threads)
        self.eos = self.generator.llm.token_eos()
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.global_steps = 0
        self.requests = 0
        self._sync: Optional[tuple[int, int, int]] = None  # (requests before it, tokens, the new version)

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, priority: int = 0, **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if image_data or video_data or audio_data:
            raise ValueError("the llama.cpp rollout server is text only")
        params = dict(sampling_params)
        max_tokens = params.get("max_tokens", params.get("max_new_tokens"))
        if max_tokens is None:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        stops = list(params.get("stop_token_ids") or [])
        if not params.get("ignore_eos", False) and self.eos not in stops:
            stops.append(self.eos)
        top_p = params.get("top_p", 1.0)
        sync = self._sync if self._sync is not None and self._sync[0] == self.requests else None
        if sync is not None:  # this request is the one a weight sync cuts short
            max_tokens = min(int(max_tokens), sync[1])
        sampled = await self.generator(list(prompt_ids), SamplingParams(
            max_tokens=max(int(max_tokens), 1), temperature=float(params.get("temperature", 1.0)),
            top_p=float(top_p) if top_p and top_p > 0 else 1.0, stop_token_ids=stops, seed=params.get("seed")))
        self.requests += 1
        version = self.global_steps
        if sync is not None:
            self._sync, self.global_steps = None, sync[2]
        stop_reason = "aborted" if sync is not None and not (sampled.token_ids and sampled.token_ids[-1] in stops) \
            else "completed"
        return TokenOutput(token_ids=sampled.token_ids, log_probs=sampled.logprobs if params.get("logprobs") else None,
                           stop_reason=stop_reason, num_preempted=0, extra_fields={"global_steps": version})

    def set_global_steps(self, steps: int) -> None:
        self.global_steps = steps

    def sync_during(self, request: int, tokens: int, version: int) -> None:
        """A weight sync in the middle of this server's `request`-th request from now (0: the next), as
        verl's fully async trainer makes one: the request stops after `tokens` tokens with stop_reason
        "aborted" (what vLLM answers to verl's abort) and the weights become `version`; verl's
        FullyAsyncLLMServerClient then resumes it (partial_rollout) on the new version."""
        self._sync = (self.requests + request, tokens, version)

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "evaluated_prompt_tokens": self.generator.evaluated}


def start_cpu_llm_client(config: Any, gguf: Path, replicas: int = 1, n_ctx: int = 8192, seed: int = 0,
                         num_cpus: float = 1, client_cls: Any = None) -> tuple[Any, list[Any]]:
    """(verl's LLMServerClient, the server actors): `replicas` llama.cpp servers as Ray actors behind
    verl's load balancer, as verl's LLMServerManager sets up vLLM replicas. Ray must be initialised.
    client_cls: another of verl's clients (FullyAsyncLLMServerClient, as the fully async rollouter uses)."""
    import ray
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    rollout = config.actor_rollout_ref.rollout
    server_cls = ray.remote(LlamaCppRolloutServer)
    servers = {f"llama-cpp-{i}": server_cls.options(num_cpus=num_cpus).remote(
        str(gguf), n_ctx=n_ctx, seed=seed + i, prompt_length=rollout.prompt_length,
        response_length=rollout.response_length) for i in range(replicas)}
    router = get_router_handle(servers, full_determinism=bool(rollout.get("full_determinism", False)))
    return (client_cls or LLMServerClient)(config, load_balancer_handle=router), list(servers.values())


def export_gguf_as_hf(gguf: Path, out: Path) -> Path:
    """A Hugging Face folder (tokenizer, chat template, config.json) from a GGUF file's metadata."""
    from transformers import AutoConfig

    from ..rollout.backends import load_gguf_tokenizer

    gguf, out = Path(gguf), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    load_gguf_tokenizer(gguf).save_pretrained(out)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    if not saved.get("architectures"):  # verl's model config asks for exactly one
        saved["architectures"] = [_architecture(saved.get("model_type", ""))]
        (out / "config.json").write_text(json.dumps(saved, indent=1), encoding="utf-8")
    return out


def _architecture(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if not name:
        raise ValueError(f"no causal-LM architecture known for model type {model_type!r}")
    return name
