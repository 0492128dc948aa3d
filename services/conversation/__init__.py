"""Conversation orchestration: turn-taking (``dialogue``), the ASR -> brain -> TTS cascade (``cascade``) and the brain
client (``brain``), composed from engine interfaces only.

A library, not a service: moss_sts composes it from local engines, the router's Conversation fallback from remote
ones. It imports services.common and nothing of any service (docs/architecture.md, tests/project/test_import_graph.py).
"""
