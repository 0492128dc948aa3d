"""``python -m services.gateway [--config PATH]``: the gateway process (an HTTP member of the fleet, like the brain).

Life: config validated (a bad field exits 2 naming it), HTTP(S) port bound, /metrics up; SIGTERM/SIGINT: open
WebSockets are closed with 1001 and in-flight HTTP requests get ``grace_seconds`` to finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl

from aiohttp import web

from services.common import security
from services.common.metrics import start_metrics_server
from services.common.server import load_service_config, setup_logging
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
    config = load_service_config("gateway", argv)
    setup_logging("gateway", config.gateway.log_level)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
