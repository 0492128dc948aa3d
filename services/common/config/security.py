"""The ``security`` config section: transport security and access control (docs/security.md)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from services.common.config.base import Names, Section, check


class SecurityConfig(Section):
    """Transport security and access control (docs/security.md). Everything off by default (loopback fleet)."""

    # PEM files. tls_cert + tls_key: every fleet port listens with TLS. tls_ca: the fleet CA clients verify with.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # Model services require client certificates signed by tls_ca (mutual TLS between router and services).
    mtls: bool = False
    # Accepted on the router's public RPCs as "authorization: Bearer <token>"; empty = no token needed.
    bearer_tokens: Names = Field(default_factory=list)
    # Shared secret of fleet services: GpuLeases, ModelControl and model services' ports need it when set.
    fleet_token: str = ""

    @field_validator("bearer_tokens")
    @classmethod
    def _tokens(cls, tokens: list[str]) -> list[str]:
        if not all(t.strip() for t in tokens):
            raise ValueError("tokens must not be empty")
        return tokens

    @model_validator(mode="after")
    def _tls(self):
        check("tls_key", bool(self.tls_cert) == bool(self.tls_key), "tls_cert and tls_key go together")
        check("tls_ca", not self.mtls or bool(self.tls_ca and self.tls_cert), "mtls needs tls_ca, tls_cert and tls_key")
        return self
