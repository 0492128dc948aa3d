"""Conversions between the voice.v1 messages and the engine types (services/common/engines.py), one module per
contract; used alike by the servicers (messages in, engine types out) and the remote engines (the other way)."""
