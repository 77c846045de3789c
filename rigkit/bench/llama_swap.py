"""The small HTTP client the host commands share (keeper, watchdog, activation): one real chat
completion, llama-swap's ``/running`` and its unload. Source for llama-swap's endpoints: its v250
``proxymanager`` routes (``GET /running`` → ``{"running": [{"model", "state", "proxy", ...}]}``,
``POST /api/models/unload/<id>``, ``GET /logs/stream/<model id>``: that member's own output, its
history first, then live; ``internal/server/log.go`` ``handleLogStream``)."""

from __future__ import annotations

from typing import Any


def headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}`` when there is a key, else ``{}`` (never logged):
    the one place the header is built (tests/unit/test_one_piece.py)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def complete(base: str, model: str, api_key: str | None = None, timeout_s: float = 600.0):
    """One tiny real chat completion (``max_tokens`` 1, not streamed) to ``model`` at ``base``
    (``http://127.0.0.1:<port>``). Returns the ``requests.Response``; raises
    ``requests.RequestException`` when nothing answers within ``timeout_s`` s.
    A ``502`` with an empty body (llama-swap's proxy found the member's kept connection closed and never
    had an answer: :func:`rigkit.bench.client.proxy_lost_the_request`) is sent once more.
    """
    import requests

    for attempt in (0, 1):
        resp = requests.post(f"{base.rstrip('/')}/v1/chat/completions", headers=headers(api_key), timeout=timeout_s,
                             json={"model": model, "max_tokens": 1, "stream": False,
                                   "messages": [{"role": "user", "content": "ping"}]})
        if attempt or not (resp.status_code == 502 and not resp.content.strip()):
            return resp
    return resp


def running(base: str, timeout_s: float = 30.0, api_key: str | None = None) -> list[dict[str, Any]]:
    """llama-swap's ``GET /running`` list: ``[{model, state, proxy, ...}]`` (the one reader of it:
    tests/unit/test_one_piece.py); ``api_key`` is sent as :func:`headers`. Raises
    ``requests.RequestException`` (HTTP errors included) and ``ValueError`` when the body is not
    JSON."""
    import requests

    resp = requests.get(f"{base.rstrip('/')}/running", headers=headers(api_key), timeout=timeout_s)
    resp.raise_for_status()
    return resp.json().get("running", []) or []


def unload(base: str, member: str, timeout_s: float = 30.0) -> tuple[bool, str]:
    """``POST /api/models/unload/<member>`` through llama-swap: ``(ok, "HTTP 200")`` or ``(False, why)``."""
    import requests

    try:
        resp = requests.post(f"{base.rstrip('/')}/api/models/unload/{member}", timeout=timeout_s)
    except requests.RequestException as exc:
        return False, type(exc).__name__
    return resp.status_code < 400, f"HTTP {resp.status_code}"


def member_log(base: str, member: str, lines: int = 6, wait_s: float = 1.0) -> list[str]:
    """The last ``lines`` non-empty lines ``member``'s own process wrote, as llama-swap kept them
    (``GET /logs/stream/<member>`` sends its history, then follows; this reads until the stream is
    quiet for ``wait_s`` s). What a member's server said when it refused to start (llama.cpp's
    ``error: invalid argument: --no-such-flag``) is only there: llama-swap answers the request with
    ``upstream command exited prematurely``. Returns ``[]`` when llama-swap has no log for it or
    does not answer."""
    import requests

    got = b""
    try:
        with requests.get(f"{base.rstrip('/')}/logs/stream/{member}", stream=True, timeout=(5, wait_s)) as r:
            if r.status_code != 200:
                return []
            try:
                for chunk in r.iter_content(chunk_size=None):
                    got += chunk
                    if len(got) > 1 << 20:
                        got = got[-(1 << 19):]
            except requests.RequestException:  # quiet for wait_s: the history is all there
                pass
    except requests.RequestException:
        return []
    text = got.decode("utf-8", "replace").replace("\r", "\n")
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def error_text(resp, secret: str | None = None, limit: int = 200) -> str:
    """A short one-line description of an error answer (the ``error.message`` of an OpenAI-style
    body, else the text), with ``secret`` masked."""
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        msg = None
    text = " ".join(str(msg or resp.text).split())[:limit]
    return text.replace(secret, "<VLLM_API_KEY>") if secret else text
