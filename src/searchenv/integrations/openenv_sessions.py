"""The sessions of ``serve-openenv``: OpenEnv's server, whose sessions no abandoned client can exhaust."""

from __future__ import annotations

import contextvars
import time
from typing import Any

from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment

#: Seconds without a request after which a session made over HTTP (``openenv/session/create``) counts as
#: abandoned (or the idle timeout, if shorter): a full server closes the longest-idle abandoned one for a newcomer.
ABANDONED_AFTER_S = 30.0
#: How the request being served arrived (``"http"`` or ``"websocket"``), set by the app's guard.
TRANSPORT: contextvars.ContextVar[str] = contextvars.ContextVar("searchqa_transport", default="http")


class SessionServer(HTTPEnvServer):
    """OpenEnv's server, whose sessions no abandoned client can exhaust.

    A session made over HTTP (``openenv/session/create`` on ``/mcp``) and not driven by a WebSocket
    has no connection to close when its client goes away: OpenEnv's reaper ends it some time after
    ``idle_timeout`` (it looks every quarter of the timeout). When a new session finds the server
    full, every such session idle for longer than ``idle_timeout`` is ended at once, then the
    longest-idle one idle for at least ``min(idle_timeout, ABANDONED_AFTER_S)`` is closed to make
    room; a WebSocket's session is never taken (its connection's idle timeout ends it). If no
    session can be taken, the refusal (OpenEnv's ``CAPACITY_REACHED``) says when one can.
    """

    def __init__(self, *args: Any, idle_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_timeout = idle_timeout
        self._over_http: set[str] = set()

    async def _create_session(self) -> tuple[str, Environment]:
        try:
            session_id, env = await super()._create_session()
        except SessionCapacityError:
            wait = await self._make_room()
            if wait is not None:
                raise SessionCapacityError(
                    self.active_sessions, self.max_concurrent_envs,
                    message=(f"Server at capacity: {self.active_sessions}/{self.max_concurrent_envs} sessions "
                             f"active; the longest-idle session made over HTTP may be closed in {wait:.0f} s "
                             "(retry then), and a WebSocket frees its session when it closes")) from None
            session_id, env = await super()._create_session()
        if TRANSPORT.get() == "http":
            self._over_http.add(session_id)
        return session_id, env

    async def _make_room(self) -> float | None:
        """End expired HTTP sessions, else the longest-idle abandoned one.

        Returns:
            None if a session was ended, else the seconds until one may be.
        """
        abandoned_after = min(self._idle_timeout, ABANDONED_AFTER_S)
        now = time.time()
        async with self._session_lock:
            self._over_http &= set(self._sessions)
            idle = sorted(((now - info.last_activity_at, sid) for sid, info in self._session_info.items()
                           if sid in self._over_http and sid not in self._session_websocket_attachments),
                          reverse=True)
        expired = [sid for seconds, sid in idle if seconds > self._idle_timeout]
        if not expired and idle and idle[0][0] >= abandoned_after:
            expired = [idle[0][1]]
        for sid in expired:
            await self._destroy_session(sid)
            self._over_http.discard(sid)
        if expired:
            return None
        return max(0.0, abandoned_after - idle[0][0]) if idle else self._idle_timeout
