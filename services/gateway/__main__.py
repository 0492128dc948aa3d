"""``python -m services.gateway [--config PATH]``: the gateway process (an HTTP member of the fleet, like the brain).

Life: config validated (a bad field exits 2 naming it), HTTP(S) port bound, /metrics up; SIGTERM/SIGINT: open
WebSockets are closed with 1001 and in-flight HTTP requests get ``grace_seconds`` to finish.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys

from aiohttp import web

from services.common import security
from services.common.config import ConfigError, load_config
from services.common.metrics import start_metrics_server
from services.common.server import die_with_supervisor, setup_logging
from services.gateway.app import AccessLogger, Gateway

log = logging.getLogger("voicefleet.gateway")


def tls_context() -> ssl.SSLContext | None:
    """HTTPS from the same certificate settings as the gRPC ports (security.tls_cert / tls_key)."""
    s = security.settings()
    if not s.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(s.tls_cert, s.tls_key)
    return context


async def serve(config) -> None:
    section = config.gateway
    gateway = Gateway(config)
    runner = web.AppRunner(gateway.app(), access_log_class=AccessLogger, shutdown_timeout=section.grace_seconds)
    await runner.setup()
    site = web.TCPSite(runner, section.host, section.port, ssl_context=tls_context())
    try:
        await site.start()
    except OSError as e:
        raise SystemExit(
            f"gateway: cannot listen on {section.address} ({e}); is the port in use? set gateway.port"
        ) from None
    start_metrics_server(section.metrics_port, section.host)
    scheme = "https" if security.settings().tls_cert else "http"
    log.info(
        "gateway on %s://%s -> router %s (metrics :%s)",
        scheme,
        section.address,
        gateway.router_address,
        section.metrics_port,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("gateway draining: closing WebSockets, %.1fs grace for requests in flight", section.grace_seconds)
    await runner.cleanup()
    log.info("gateway stopped")


def main(argv: list[str] | None = None) -> None:
    die_with_supervisor()
    parser = argparse.ArgumentParser(prog="python -m services.gateway", description="voicefleet gateway")
    parser.add_argument("--config", help="fleet config file (default: VOICEFLEET_CONFIG or the bundled default)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        security.configure(config.security)
        security.check_files()
    except ConfigError as e:
        print(f"gateway: bad configuration: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    setup_logging("gateway", config.gateway.log_level)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
