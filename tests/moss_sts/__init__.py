"""Tests of the moss_sts service (services/moss_sts): MOSS-Speech streaming logic and GPU engine, its ASR over gRPC."""
