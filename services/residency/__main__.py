"""One GPU card's lease authority: voice.v1.GpuLeases served next to the card, not inside a router.

With one card the router grants its leases itself. Beyond one card (docs/scale.md) every card gets one of these (a
DaemonSet container on each GPU node): the model services of that node hold their leases here
(``residency.lease_authority``), so the card is never over-granted however many routers run, and routers only read
the tables (``router.leases.authorities``) for residency-aware routing. A node that dies takes its authority, its
leases and its model services with it; nothing else holds a grant for that card.

Run: ``python -m services.residency --config voicefleet.yaml`` (section ``lease_authority`` for the
port; the card policy is ``router.leases``).
"""

from __future__ import annotations

import logging
import socket

from services.common.config import Config
from services.common.server import ServiceParts, Servicer, run_service
from services.residency.lease_servicer import card_leases
from voice.v1 import gpu_pb2_grpc

SERVICE = "lease_authority"
log = logging.getLogger("voicefleet.lease_authority")


def build(config: Config) -> ServiceParts:
    leases = card_leases(config)
    card = config.lease_authority.card or socket.gethostname()

    async def start() -> None:
        await leases.start()
        log.info("lease authority of card %s: %.1f GiB grantable", card, leases.manager.policy.capacity_bytes / 2**30)

    return ServiceParts(
        servicers=[Servicer(gpu_pb2_grpc.add_GpuLeasesServicer_to_server, leases, "voice.v1.GpuLeases")],
        start=start,
        stop=leases.stop,
    )


if __name__ == "__main__":
    run_service(SERVICE, build)
