"""What every ``voicefleet`` command shares: the config it loads, the router it calls, how a failed call exits."""

from __future__ import annotations

import itertools
import sys
import time

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


class Patience:
    """--wait SECONDS: a call made while the fleet warms up waits for it instead of failing at once. First the
    router's health for the service must say SERVING (connecting included: gRPC wait-for-ready); then a call that
    still answers UNAVAILABLE before any reply (its route's backend is not up yet, another one is) is tried again,
    until the SECONDS are spent. After that the call's own status says what is missing."""

    RETRY_PAUSE_S = 0.25

    def __init__(self, args):
        self.wait_s = max(0.0, args.wait)
        self.deadline = time.monotonic() + self.wait_s

    def channel(self, address: str, service: str) -> grpc.Channel:
        from services.common.health_probe import wait_ready

        channel = security.client_channel(address)
        if self.wait_s > 0:
            status = wait_ready(channel, service, self.deadline - time.monotonic())
            if status != "SERVING":
                print(
                    f"voicefleet: {service} at {address} is still {status} after waiting {self.wait_s:g}s;"
                    " calling anyway",
                    file=sys.stderr,
                )
        return channel

    def call(self, attempt):
        """``attempt()`` (a unary call, or ``first_reply_now`` of a stream: nothing was answered when it raises),
        tried again on UNAVAILABLE while time is left."""
        while True:
            try:
                return attempt()
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() + self.RETRY_PAUSE_S >= self.deadline:
                    raise
                time.sleep(self.RETRY_PAUSE_S)


def first_reply_now(stream):
    """The replies of a response stream, the first one awaited now: a call refused before it answers raises here,
    where Patience.call can try it again."""
    first = next(stream, None)
    return iter(()) if first is None else itertools.chain([first], stream)
