"""Tests of turn-taking shared by moss_sts and the router's fallback (services/conversation): barge-in words, echo cancellation."""
