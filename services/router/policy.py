"""Which backends serve a request, in what order: the request's route (docs/router.md#policy).

1. ``routing.engine`` pins a backend (unknown names: INVALID_ARGUMENT). It fails with that backend's status unless
   router.routes.failover_pinned lets it fail over along its mode's chain.
2. A voice: the backends that have it, in the order of the mode's chain, then router.routes.voice_owners (a preset
   voice of qwen_tts routes to qwen_tts). The first serves; the mode chain's other backends that have the same voice
   are its fallbacks. No backend has it: NOT_FOUND naming the closest voice ids and `voicefleet voices`
   (services.common.voices.unknown_voice).
3. A language but no voice (the request's, or detected from the text's script by the servicer): the backends
   with a voice that speaks it, the mode's chain first, then router.routes.voice_owners, then the others; each
   serves with its best voice for the language (services.common.voices.pick_voice). None has one:
   INVALID_ARGUMENT listing the languages there are. A named voice that does not speak the language:
   INVALID_ARGUMENT naming the voices of every backend that do.
4. Otherwise the mode's chain (router.routes.realtime / broadcast / default), each backend with its default voice.

Capability checks: a backend serves a request only if the voice is one of its voices and speaks the requested
language (output sample rates are checked once, 8..48 kHz; backends resample). Health: backends that are routable
(SERVING, not ejected, recovered) come first, in chain order; backends that are ejected or recovering but reachable
follow as a last resort (better than failing when nothing else is left); unreachable ones are not tried. When the
preferred backend is passed over for its health, that is counted as a failover with reason ``unhealthy``.

Voice lists come from each backend's ListVoices (cached router.voices_cache_seconds). While a fallback is left, a
lookup waits at most the first-audio timeout (or half the caller's time), so a hung backend cannot eat the deadline;
one that lets the first-audio timeout run out on a lookup is counted a failure (reason ``no_audio``), as a synthesis
would be: else a hung backend would be passed over for that request yet stay routable for the next.
"""

from __future__ import annotations

import asyncio
import logging

from services.common.config.router import RoutesConfig
from services.common.engines import Routing, TtsEngine, VoiceInfo
from services.common.errors import InvalidArgument, Unavailable, VoiceError
from services.common.voices import LanguageRefused, pick_voice, refusal, unknown_voice
from services.remote.tts import RemoteTtsEngine
from services.router.failover import Candidate, FailoverLog, RoutedTts
from voice.v1 import routing_pb2

log = logging.getLogger("voicefleet.router.policy")

MODE_FIELDS = {routing_pb2.ROUTE_MODE_REALTIME: "realtime", routing_pb2.ROUTE_MODE_BROADCAST: "broadcast"}


class RouterTtsResolver:
    def __init__(
        self,
        engines: dict[str, RemoteTtsEngine],
        default_backend: str,
        routes: RoutesConfig | None = None,
        failovers: FailoverLog | None = None,
        deadline_margin_s: float = 0.05,
    ):
        self.engines = engines  # TTS-capable backends only, by name
        self.default_backend = default_backend
        self.routes = routes or RoutesConfig()
        self.failovers = failovers or FailoverLog()
        self.margin = deadline_margin_s
        self.first_audio_timeout_s = self.routes.first_audio_timeout_ms / 1000
        self.placement = None  # a PlacementView when the router grants GPU leases (set by the router's build)

    # --- chains -----------------------------------------------------------------------------------------------
    def _mode_field(self, mode: int) -> str:
        return MODE_FIELDS.get(mode, "default")

    def chain(self, mode: int) -> list[str]:
        """The configured backends of the mode's route, in priority order."""
        field = self._mode_field(mode)
        names = getattr(self.routes, field) or [self.default_backend]
        route = [n for n in names if n in self.engines]
        if not route and field == "default":
            # A fleet without the default route's backends (e.g. only qwen_tts) serves unpinned requests from the
            # TTS backends it has, rather than refusing them; explicit mode routes stay as configured.
            route = list(self.engines)
        if not route:
            raise Unavailable(
                f"no TTS backend configured for mode {routing_pb2.RouteMode.Name(mode)}: router.routes.{field} names"
                f" {', '.join(names)}; configured: {', '.join(self.engines) or 'none'}"
            )
        return route

    def _by_name(self, name: str, field: str = "config.routing.engine") -> RemoteTtsEngine:
        engine = self.engines.get(name)
        if engine is None:
            raise InvalidArgument(
                field, f"{name!r} is not a TTS backend of this router; known: {', '.join(self.engines)}"
            )
        return engine

    # --- resolve ----------------------------------------------------------------------------------------------
    async def resolve(
        self,
        voice: str,
        language: str,
        routing: Routing,
        time_remaining: float | None,
        field: str = "config",
        detected: bool = False,
    ) -> tuple[TtsEngine, VoiceInfo]:
        if routing.engine:
            pinned = self._by_name(routing.engine, field=f"{field}.routing.engine")
            order = [pinned.service]
            if self.routes.failover_pinned:
                order += [n for n in self._safe_chain(routing.mode) if n != pinned.service]
            elif not pinned.backend.usable():
                raise Unavailable(f"{pinned.backend.describe()}; retry shortly or pick another engine")
            fallbacks = order[1:]
        elif voice:
            chain = self.chain(routing.mode)
            order = chain + [n for n in (*self.routes.voice_owners, *self.engines) if n in self.engines]
            order = list(dict.fromkeys(order))
            fallbacks = chain
        elif language:
            # Every backend with a voice for the language, the mode's chain first; each one that has such a voice
            # may take over (with its own voice for the language).
            chain = self._safe_chain(routing.mode)
            order = chain + [n for n in (*self.routes.voice_owners, *self.engines) if n in self.engines]
            order = fallbacks = list(dict.fromkeys(order))
        else:
            order = fallbacks = self.chain(routing.mode)
        candidates = await self._candidates(order, voice, language, time_remaining, field, detected)
        candidates = self._warm_first(candidates, fallbacks, routing.latency_budget_ms)
        # The first candidate serves; of the others, only the route's fallbacks take over.
        first = candidates[0]
        chosen = [first] + [c for c in candidates[1:] if c.name in fallbacks]
        preferred, passed_over = self.engines[order[0]], ""
        looked_up = any(c.name == preferred.service for c in candidates)
        if first.name != preferred.service and (not preferred.backend.routable() or not looked_up):
            # Passed over for its health: not routable, or its voice list did not come (counted only when it would
            # have served this voice, as far as we know).
            if not voice or any(v.id == voice for v in preferred.cached_voices):
                passed_over = preferred.service
        routed = RoutedTts(chosen, self.failovers, self.first_audio_timeout_s, self.margin, passed_over)
        return routed, first.voice

    def _warm_first(self, candidates: list[Candidate], fallbacks: list[str], budget_ms: int) -> list[Candidate]:
        """A cold preferred model whose swap-in would miss the latency budget yields to a warm fallback (and is
        prefetched); without a warm fallback the request waits for the swap-in (bounded by the service's queue)."""
        view = self.placement
        if view is None or len(candidates) < 2 or not view.too_cold(candidates[0].name, budget_ms):
            return candidates
        warm = next((c for c in candidates[1:] if c.name in fallbacks and view.warm(c.name)), None)
        if warm is None:
            return candidates
        cold = candidates[0].name
        view.prefetch(cold)
        self.failovers.record(cold, warm.name, "cold")
        return [warm, *(c for c in candidates if c is not warm)]

    def _safe_chain(self, mode: int) -> list[str]:
        try:
            return self.chain(mode)
        except Unavailable:
            return []

    async def _candidates(
        self, order: list[str], voice: str, language: str, time_remaining: float | None, field: str, detected: bool
    ) -> list[Candidate]:
        """The backends of ``order`` that can serve (voice, language): routable ones first (chain order), then
        reachable ones that are ejected or recovering (last resort). Raises when none can."""
        engines = [self.engines[n] for n in order]
        routable = [e for e in engines if e.backend.routable()]
        fallback = [e for e in engines if not e.backend.routable() and e.backend.usable()]
        problems: list[VoiceError] = []
        down: list[str] = [e.backend.describe() for e in engines if not e.backend.usable()]
        seen: list[VoiceInfo] = []
        found: list[Candidate] = []
        for group in (routable, fallback):
            if not group:
                continue
            lookups = await self._voice_lists(group, time_remaining, several=len(order) > 1)
            for engine, voices in zip(group, lookups, strict=True):
                if isinstance(voices, VoiceError):
                    down.append(f"{engine.service}: {voices.message}")
                    continue
                seen.extend(voices)
                if voice and not any(v.id == voice for v in voices):
                    if len(order) == 1:  # a pinned backend: say it is not one of ITS voices
                        pick_voice(voices, voice, language, engine.service, field, detected)
                    continue
                try:
                    voice_info = pick_voice(voices, voice, language, engine.service, field, detected)
                    found.append(Candidate(engine, voice_info))
                except VoiceError as e:  # the voice or default voice does not speak the language
                    problems.append(e)
            if found:
                return found
        refused = next((e for e in problems if isinstance(e, LanguageRefused)), None)
        if refused is not None:  # name the voices of every backend looked up that speak it
            raise refusal(refused.voice, refused.language, seen, field, refused.detected)
        if problems:
            raise problems[0]
        if down:
            what = f"voice {voice!r} was not found on the reachable backends" if voice else "no backend can serve"
            raise Unavailable(f"{what}; unreachable: {'; '.join(down)}; retry shortly or pick another engine")
        raise unknown_voice(voice, (v.id for v in seen), "any backend", field)

    async def _voice_lists(
        self, engines: list[RemoteTtsEngine], time_remaining: float | None, several: bool
    ) -> list[list[VoiceInfo] | VoiceError]:
        """Every engine's voices, at once; a lookup waits less than the caller's whole time when others are left."""
        budget, bounded_by_route = time_remaining, False
        if several:
            # The route's bound, unless half the caller's time is shorter (then a timeout is the caller's hurry).
            bounded_by_route = time_remaining is None or time_remaining / 2 >= self.first_audio_timeout_s
            cap = self.first_audio_timeout_s if bounded_by_route else time_remaining / 2
            budget = cap + self.margin
        results = await asyncio.gather(*(e.voices(budget, bounded_by_route) for e in engines), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, VoiceError):
                raise r
        return results

    # --- other RPCs -------------------------------------------------------------------------------------------
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
        return self.engines[self.chain(routing.mode or routing_pb2.ROUTE_MODE_BROADCAST)[0]]
