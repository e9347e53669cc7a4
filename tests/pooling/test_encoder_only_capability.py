"""A backend that does not declare encoder-only attention is refused such a model, with a reason that says so."""

from __future__ import annotations

from infercore.attention.encoder_only import encoder_only_reasons
from infercore.attention.reference_backend import ReferenceAttentionBackend


class DecoderOnlyBackend(ReferenceAttentionBackend):
    name = "decoder_only"
    supports_encoder_only = False


def test_refusal_names_the_missing_capability() -> None:
    reasons = encoder_only_reasons(DecoderOnlyBackend, encoder_only=True)
    assert len(reasons) == 1 and "encoder-only" in reasons[0] and "'decoder_only'" in reasons[0]
    assert encoder_only_reasons(DecoderOnlyBackend, encoder_only=False) == []
    assert encoder_only_reasons(ReferenceAttentionBackend, encoder_only=True) == []
