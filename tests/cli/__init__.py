"""Tests of the voicefleet CLI (services/cli): TTS commands, the supervisor, memory per member."""
