"""ModelCache: model weights staged once per cluster on a shared volume."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fleet.api.common import Int, MatchLabels, Resource, Rule, Str, Strict, secret_reference_rules


class AuthSecret(Strict):
    name: Annotated[str, Str(1)]
    key: str = "HF_TOKEN"


class HuggingFaceSource(Strict):
    repo: Annotated[str, Str(1)]
    revision: str | None = None
    authSecret: AuthSecret | None = None
    sizeGiB: Annotated[int, Int(1, 100_000)]


class ModelCacheSpec(Strict):
    source: Literal["HuggingFace"]
    huggingFace: HuggingFaceSource | None = None
    clusterSelector: MatchLabels | None = None


class ModelCache(Resource):
    kind: Literal["ModelCache"]
    spec: ModelCacheSpec
    status: dict[str, Any] | None = None


def model_cache_rules(mc: ModelCache) -> Rule:
    if mc.spec.source == "HuggingFace" and mc.spec.huggingFace is None:
        yield ("spec", "huggingFace"), "source HuggingFace needs the huggingFace block"
    auth = mc.spec.huggingFace.authSecret if mc.spec.huggingFace else None
    if auth is not None:
        yield from secret_reference_rules(auth.name, auth.key, ("spec", "huggingFace", "authSecret"))
