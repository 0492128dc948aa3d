"""The ``voicefleet`` CLI and the local fleet it starts and supervises."""
