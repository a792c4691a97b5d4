"""The model server behind the gateway, asked in token ids and answering in token ids.

The gateway never sends a conversation: it sends the ids it holds and gets back the ids the server
sampled, with their log-probabilities. Two dialects:

    completions   POST {url}/completions  {prompt: [ids], return_token_ids, logprobs: 0, stop_token_ids}
                  vLLM (>= 0.10.2) and `insandbox serve-model`: choices[0].token_ids, .logprobs.token_logprobs
    sglang        POST {root}/generate    {input_ids, sampling_params, return_logprob}
                  SGLang's native API: meta_info.output_token_logprobs [(logprob, id, text), ...]

`probe()` finds which one the server speaks by asking for one token; a server that answers neither
with token ids and a log-probability per id is refused (`UpstreamRefused`, one line), since records
made from re-rendered text would not be the ids the policy sampled.

An Upstream is also a rollout sampler (rl/rollout/types.py: GenerateFn): `Rollouts` can sample from
a vLLM or SGLang server through it.
"""
from __future__ import annotations

from typing import Any, Optional

from ..core.errors import ConfigError, ModelError
from ..rl.rollout.types import Sampled, SamplingParams

DIALECTS = ("completions", "sglang")


class UpstreamRefused(ConfigError):
    """The upstream cannot give token ids and their log-probabilities (said why, in one line)."""


class UpstreamFailed(ModelError):
    """A request to the upstream failed (its status and message), after the gateway started."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class Upstream:
    def __init__(self, url: str, model: Optional[str] = None, api_key: Optional[str] = None,
                 dialect: Optional[str] = None, timeout: float = 600.0):
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.dialect = dialect
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout, connect=10.0))

    @property
    def root(self) -> str:
        """The server's root (SGLang's native routes are beside /v1, not under it)."""
        return self.url[:-3] if self.url.endswith("/v1") else self.url

    async def close(self) -> None:
        await self.http.aclose()

    # ------------------------------------------------------------------ what it serves
    async def served_model(self) -> Optional[str]:
        """The first model id of GET /models (None: the server does not say)."""
        try:
            r = await self.http.get(f"{self.url}/models")
            data = r.json().get("data") or []
            return str(data[0]["id"]) if data else None
        except Exception:
            return None

    async def probe(self, prompt_ids: list[int]) -> str:
        """The dialect the server speaks with token ids; UpstreamRefused when it speaks none."""
        import httpx

        tried = []
        for dialect in ([self.dialect] if self.dialect else DIALECTS):
            self.dialect = dialect
            try:
                sampled = await self.generate(prompt_ids, SamplingParams(max_tokens=1, temperature=0.0))
            except (UpstreamFailed, httpx.HTTPError, ValueError, KeyError, TypeError) as e:
                tried.append(f"{dialect}: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}")
                continue
            if sampled.token_ids and sampled.logprobs is not None and len(sampled.logprobs) == len(sampled.token_ids):
                return dialect
            tried.append(f"{dialect}: answered without token ids and a log-probability for each")
        self.dialect = None
        raise UpstreamRefused(f"the upstream {self.url} cannot return token ids ({'; '.join(tried)}); the gateway "
                              "needs vLLM >= 0.10.2, SGLang or `insandbox serve-model`")

    # ------------------------------------------------------------------ sampling
    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        return await self.generate(context, params)

    async def generate(self, prompt_ids: list[int], params: SamplingParams,
                       unset: frozenset[str] = frozenset()) -> Sampled:
        """The upstream's sample after `prompt_ids`. `unset`: sampling settings the caller did not choose
        ("temperature", "top_p"), left to the upstream's defaults."""
        if self.dialect == "sglang":
            return await self._sglang(prompt_ids, params, unset)
        return await self._completions(prompt_ids, params, unset)

    async def _post(self, url: str, body: dict) -> dict:
        r = await self.http.post(url, json=body)
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code != 200 or not isinstance(data, dict):
            error = data.get("error") if isinstance(data, dict) else None
            message = (error.get("message") if isinstance(error, dict) else error) or r.text[:300]
            raise UpstreamFailed(f"{url} answered {r.status_code}: {message}", status=r.status_code
                                 if 400 <= r.status_code < 500 else 502)
        return data

    async def _completions(self, prompt_ids: list[int], params: SamplingParams, unset: frozenset[str]) -> Sampled:
        body: dict[str, Any] = {"prompt": prompt_ids, "max_tokens": params.max_tokens,
                                "temperature": params.temperature, "top_p": params.top_p, "logprobs": 0,
                                "return_token_ids": True, "stop_token_ids": params.stop_token_ids,
                                "skip_special_tokens": False, "include_stop_str_in_output": True}
        for key in unset:
            body.pop(key, None)
        if self.model:
            body["model"] = self.model
        if params.seed is not None:
            body["seed"] = params.seed
        choice = (await self._post(f"{self.url}/completions", body))["choices"][0]
        ids = choice.get("token_ids")
        if not isinstance(ids, list):
            raise UpstreamFailed("the completion has no token_ids")
        lps = (choice.get("logprobs") or {}).get("token_logprobs")
        logprobs = [float(x) for x in lps] if isinstance(lps, list) and len(lps) == len(ids) else None
        return Sampled([int(t) for t in ids], logprobs, _finish(choice.get("finish_reason"), ids, params))

    async def _sglang(self, prompt_ids: list[int], params: SamplingParams, unset: frozenset[str]) -> Sampled:
        sampling: dict[str, Any] = {"max_new_tokens": params.max_tokens, "temperature": params.temperature,
                                    "top_p": params.top_p, "stop_token_ids": params.stop_token_ids,
                                    "skip_special_tokens": False, "no_stop_trim": True}
        for key in unset:
            sampling.pop(key, None)
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        data = await self._post(f"{self.root}/generate", {"input_ids": prompt_ids, "sampling_params": sampling,
                                                          "return_logprob": True})
        meta = data.get("meta_info") or {}
        pairs = meta.get("output_token_logprobs")
        if not isinstance(pairs, list):
            raise UpstreamFailed("the answer has no meta_info.output_token_logprobs")
        ids = [int(p[1]) for p in pairs]
        logprobs = [float(p[0]) for p in pairs]
        finish = meta.get("finish_reason") or {}
        return Sampled(ids, logprobs, _finish(finish.get("type") if isinstance(finish, dict) else finish, ids, params))


def _finish(reason: Any, ids: list, params: SamplingParams) -> str:
    """"stop" only when the turn really ended on one of its stop tokens (which the ids then hold)."""
    if ids and ids[-1] in params.stop_token_ids:
        return "stop"
    return "length" if reason == "length" or len(ids) >= params.max_tokens else "stop"
