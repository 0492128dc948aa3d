"""Tests of the residency layer (services/residency): the lease table, GpuLeases over gRPC, the GPU host checks."""
