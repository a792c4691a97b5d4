"""A token-recording model gateway: any harness's episodes become trainable records.

    insandbox gateway --upstream http://127.0.0.1:8000/v1 --port 8300
    (a harness talks OpenAI chat completions to http://127.0.0.1:8300/sessions/SID/v1)
    insandbox gateway records SID --gateway-url http://127.0.0.1:8300

The gateway holds the policy's tokenizer. Each turn it sends the upstream the ids of the
conversation so far (the ids sampled before, never re-rendered, and the environment's new
messages tokenized once) and gets back the ids it sampled and their log-probabilities:
token in, token out (upstream.py). Each session's turns are kept on disk as they are answered
(sessions.py) and read back as rollout records: prompt_ids, response_ids, response_mask,
logprobs, policy_version. Pause and drain around a weight update (app.py: Gate).
"""
from .app import Gate, Gateway, make_app
from .client import GatewayClient, GatewayError
from .serve import default_store, prepare, serve
from .sessions import Session, Sessions
from .upstream import Upstream, UpstreamFailed, UpstreamRefused

__all__ = ["Gate", "Gateway", "GatewayClient", "GatewayError", "Session", "Sessions", "Upstream", "UpstreamFailed",
           "UpstreamRefused", "default_store", "make_app", "prepare", "serve"]
