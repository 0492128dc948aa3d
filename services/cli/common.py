"""What every ``voicefleet`` command shares: the config it loads, the router it calls, how a failed call exits."""

from __future__ import annotations

import sys

import grpc

from services.common import security
from services.common.config import ConfigError, load_config
from voice.v1 import routing_pb2

MODES = {"realtime": routing_pb2.ROUTE_MODE_REALTIME, "broadcast": routing_pb2.ROUTE_MODE_BROADCAST}


def load_cli_config(args):
    try:
        config = load_config(args.config)
        security.configure(config.security)  # TLS and the bearer token for every call the CLI makes
        return config
    except ConfigError as e:
        sys.exit(f"voicefleet: bad configuration: {e}")


def router_address(args, config) -> str:
    return args.router or config.router.address


def fail(e: grpc.RpcError) -> None:
    sys.exit(f"error: {e.code().name}: {e.details()}")
