"""AnalyzerSettings: which layer-3 backend runs, and how it reaches its model.

Built from the policy file's `analyzer:` section and SQUAWK_ANALYZER_*
environment variables by `squawk.daemon.config`; the defaults are the offline
analyzer and bounded timeouts everywhere.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta

from ..settings import ANALYZER_API_KEY

__all__ = ["DEFAULT_API_KEY_ENV", "AnalyzerSettings", "Backend"]

# The variable the key is read from unless the file names another (api_key_env).
DEFAULT_API_KEY_ENV = ANALYZER_API_KEY.variable


class Backend(enum.Enum):
    # The deterministic analyzer; needs no network.
    OFFLINE = "offline"
    # An OpenAI-compatible chat-completions server, with offline fallback.
    OPENAI = "openai"


@dataclass(frozen=True, slots=True)
class AnalyzerSettings:
    backend: Backend = Backend.OFFLINE
    # e.g. "https://api.openai.com/v1"; requests go to {base_url}/chat/completions.
    base_url: str = ""
    model: str = ""
    # Sent as "Authorization: Bearer <key>" when not empty. Never logged:
    # repr=False keeps it out of every repr and log line of these settings.
    api_key: str = field(default="", repr=False)
    # The environment variable the key was read from (for messages only).
    api_key_env: str = DEFAULT_API_KEY_ENV
    # One model HTTP request, connect to last byte.
    timeout: timedelta = timedelta(seconds=10)
    # The whole model analysis, retries and their backoff included; a retry
    # whose delay would outlast it is not made (the core's deadline rule).
    deadline: timedelta = timedelta(seconds=30)
    # How long an identical analysis reuses the model's answer; 0 = no cache.
    cache_ttl: timedelta = timedelta(seconds=60)
    cache_size: int = 1024
    max_tokens: int = 512
    # Ask for response_format {"type": "json_object"}; turn off for servers
    # that reject the field (the prompt asks for strict JSON either way).
    json_mode: bool = True

    @property
    def uses_model(self) -> bool:
        return self.backend is Backend.OPENAI and bool(self.base_url and self.model)
