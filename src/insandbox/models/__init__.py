"""Model clients. `ModelClient` is the seam; `OpenAIChatClient` speaks to any
OpenAI-compatible server."""
from .base import ContextLengthError, ModelClient, ModelError, ModelReply, Usage
from .openai_compat import OpenAIChatClient

__all__ = ["ContextLengthError", "ModelClient", "ModelError", "ModelReply", "OpenAIChatClient", "Usage"]
