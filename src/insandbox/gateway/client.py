"""The gateway from another process: a trainer's or the command line's.

    gw = GatewayClient("http://127.0.0.1:8300")          # admin token from the default store
    records = gw.records("episode-1")                    # RolloutRecords, one per chain
    gw.pause(); ...update the upstream's weights...; gw.resume(policy_version=5)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..core.errors import InsandboxError
from ..rl.rollout.types import RolloutRecord
from .serve import ADMIN_TOKEN, default_store


class GatewayError(InsandboxError, RuntimeError):
    """The gateway refused or could not be reached (said why, in one line)."""


class GatewayClient:
    def __init__(self, url: str, admin_token: Optional[str] = None, store: Optional[Path] = None,
                 timeout: float = 600.0):
        self.url = url.rstrip("/")
        self._token = admin_token
        self.store = Path(store) if store else default_store()
        self.timeout = timeout

    def session_url(self, sid: str) -> str:
        """What a harness is given as its OpenAI base URL."""
        return f"{self.url}/sessions/{sid}/v1"

    def _request(self, method: str, path: str, admin: bool = False, **kwargs: Any) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.admin_token()}"} if admin else {}
        try:
            r = httpx.request(method, self.url + path, headers=headers, timeout=self.timeout, **kwargs)
        except httpx.HTTPError as e:
            raise GatewayError(f"no gateway at {self.url}: {e}") from None
        try:
            data = r.json()
        except ValueError:
            raise GatewayError(f"{self.url}{path} answered {r.status_code}, not JSON: {r.text[:200]}") from None
        if r.status_code != 200:
            message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
            raise GatewayError(f"{self.url}{path}: {message or r.status_code}")
        return data

    def admin_token(self) -> str:
        if self._token is None:
            path = self.store / ADMIN_TOKEN
            try:
                self._token = path.read_text().strip()
            except OSError:
                raise GatewayError(f"no admin token at {path}: pass the gateway's --store (or its token)") from None
        return self._token

    def records(self, sid: str) -> list[RolloutRecord]:
        return [RolloutRecord(**r) for r in self.records_json(sid)["records"]]

    def records_json(self, sid: str) -> dict:
        return self._request("GET", f"/sessions/{sid}/records")

    def sessions(self) -> list[dict]:
        return self._request("GET", "/sessions")["sessions"]

    def status(self) -> dict:
        return self._request("GET", "/status")

    def pause(self) -> dict:
        """New requests wait; returns once those in flight are answered."""
        return self._request("POST", "/admin/pause", admin=True)

    def resume(self, policy_version: Optional[int] = None) -> dict:
        body = {} if policy_version is None else {"policy_version": policy_version}
        return self._request("POST", "/admin/resume", admin=True, json=body)
