"""Which backend serves a request: explicit engine, then the voice's owner, then the mode's route.

Routes by mode (first usable backend wins):
  REALTIME     -> moss_sts, cosyvoice_tts
  BROADCAST    -> cosyvoice_tts
  UNSPECIFIED  -> router.default_tts_backend
Only configured backends that serve Synthesizer take part. Failover mid-stream is the failover issue's work.
"""

from __future__ import annotations

import asyncio
import logging

from services.common.engines import Routing, TtsEngine, VoiceInfo
from services.common.errors import InvalidArgument, NotFound, Unavailable, VoiceError
from services.common.tts_servicer import pick_voice
from services.router.remote import RemoteTtsEngine
from voice.v1 import routing_pb2

log = logging.getLogger("voicefleet.router.policy")

MODE_ROUTES = {
    routing_pb2.ROUTE_MODE_REALTIME: ("moss_sts", "cosyvoice_tts"),
    routing_pb2.ROUTE_MODE_BROADCAST: ("cosyvoice_tts",),
}


class RouterTtsResolver:
    def __init__(self, engines: dict[str, RemoteTtsEngine], default_backend: str):
        self.engines = engines  # TTS-capable backends only, by name
        self.default_backend = default_backend

    def _route(self, mode: int) -> list[RemoteTtsEngine]:
        names = MODE_ROUTES.get(mode, (self.default_backend,))
        route = [self.engines[n] for n in names if n in self.engines]
        if not route:
            raise Unavailable(
                f"no TTS backend configured for mode {routing_pb2.RouteMode.Name(mode)};"
                f" configured: {', '.join(self.engines) or 'none'}"
            )
        return route

    def _by_name(self, name: str, field: str = "config.routing.engine") -> RemoteTtsEngine:
        engine = self.engines.get(name)
        if engine is None:
            raise InvalidArgument(
                field, f"{name!r} is not a TTS backend of this router; known: {', '.join(self.engines)}"
            )
        return engine

    async def resolve(
        self, voice: str, language: str, routing: Routing, time_remaining: float | None, field: str = "config"
    ) -> tuple[TtsEngine, VoiceInfo]:
        if routing.engine:
            engine = self._by_name(routing.engine, field=f"{field}.routing.engine")
            self._check_usable(engine)
            voices = await engine.voices(time_remaining)
            return engine, pick_voice(voices, voice, language, where=engine.service, field=field)
        if voice:
            return await self._owner_of(voice, language, routing.mode, time_remaining, field)
        route = self._route(routing.mode)
        engine = next((e for e in route if e.backend.usable()), route[0])
        self._check_usable(engine)
        voices = await engine.voices(time_remaining)
        return engine, pick_voice(voices, "", language, where=engine.service, field=field)

    async def _owner_of(
        self, voice: str, language: str, mode: int, time_remaining: float | None, field: str = "config"
    ) -> tuple[TtsEngine, VoiceInfo]:
        """The backend that has ``voice`` (mode's route first, then any)."""
        order = [e.service for e in self._route(mode)] if mode in MODE_ROUTES else []
        order += [n for n in self.engines if n not in order]
        lists = await asyncio.gather(*(self.engines[n].voices(time_remaining) for n in order), return_exceptions=True)
        down = []
        for name, voices in zip(order, lists, strict=True):
            if isinstance(voices, VoiceError):
                down.append(f"{name}: {voices.message}")
                continue
            if any(v.id == voice for v in voices):
                return self.engines[name], pick_voice(voices, voice, language, where=name, field=field)
        if down:
            raise Unavailable(
                f"voice {voice!r} was not found on the reachable backends; unreachable: {'; '.join(down)}"
            )
        known = sorted({v.id for vs in lists if isinstance(vs, list) for v in vs})
        raise NotFound(f"{field}.voice: {voice!r} is not a voice of any backend; ListVoices shows: {', '.join(known)}")

    @staticmethod
    def _check_usable(engine: RemoteTtsEngine) -> None:
        if not engine.backend.usable():
            raise Unavailable(f"{engine.backend.describe()}; retry shortly or pick another engine")

    async def voices(self, service: str) -> list[VoiceInfo]:
        names = [service] if service else list(self.engines)
        if service:
            self._by_name(service, field="service")
        lists = await asyncio.gather(*(self.engines[n].voices() for n in names), return_exceptions=True)
        errors = [e for e in lists if isinstance(e, BaseException)]
        if errors and len(errors) == len(lists):
            raise Unavailable(f"no TTS backend answered: {'; '.join(getattr(e, 'message', str(e)) for e in errors)}")
        for name, e in zip(names, lists, strict=True):
            if isinstance(e, BaseException):
                log.warning("ListVoices: %s did not answer: %s", name, e)
        return [v for vs in lists if isinstance(vs, list) for v in vs]

    def engine_for_registration(self, routing: Routing) -> TtsEngine:
        # Cloning lives in cosyvoice_tts (BROADCAST route) unless an engine is named.
        if routing.engine:
            return self._by_name(routing.engine)
        return self._route(routing.mode or routing_pb2.ROUTE_MODE_BROADCAST)[0]
