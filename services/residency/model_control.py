"""voice.v1.ModelControl: a model service's Load / Offload / GetModelStatus over its ModelResidency."""

from __future__ import annotations

import asyncio

from services.common.rpc import request_id
from services.common.server import Servicer
from services.residency.model_residency import ModelResidency
from voice.v1 import gpu_pb2, gpu_pb2_grpc


class ModelControlServicer(gpu_pb2_grpc.ModelControlServicer):
    def __init__(self, residency: ModelResidency):
        self.residency = residency

    async def Load(self, request, context):
        rid = request_id()
        queue: asyncio.Queue = asyncio.Queue()
        if request.priority:
            self.residency.priority = request.priority
        task = asyncio.create_task(self.residency.load(lambda stage, fraction: queue.put_nowait((stage, fraction))))
        task.add_done_callback(lambda _t: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                stage, fraction = item
                yield gpu_pb2.LoadResponse(
                    request_id=rid, stage=stage, progress=fraction, status=self.residency.status()
                )
            task.result()
        finally:
            if not task.done():
                task.cancel()

    async def Offload(self, request, context):
        await self.residency.offload(request.reason or "ModelControl.Offload")
        return gpu_pb2.OffloadResponse(request_id=request_id(), status=self.residency.status())

    async def GetModelStatus(self, request, context):
        return gpu_pb2.GetModelStatusResponse(request_id=request_id(), status=self.residency.status())


def model_control(residency: ModelResidency):
    """The service's voice.v1.ModelControl servicer for ``residency``."""
    return Servicer(
        gpu_pb2_grpc.add_ModelControlServicer_to_server, ModelControlServicer(residency), "voice.v1.ModelControl"
    )
