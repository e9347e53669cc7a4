"""A length-bounded JSON string admits exactly the well-formed UTF-8 characters, byte by byte."""

from __future__ import annotations

from pathlib import Path

from tokenizers.pre_tokenizers import ByteLevel
from transformers import AutoTokenizer

from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import GrammarMatcher, TokenizerInfo

#: Every code point but the surrogates, the control characters below U+0020, '"' and '\'.
PLAIN_CHARACTERS = 0x110000 - 0x800 - 0x20 - 2


def byte_token_ids(tokenizer) -> dict[int, int]:
    """The id of the single-byte token of every byte (byte-level BPE spells byte b as one character)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelling = {b: chr(b) for b in printable}
    spelling.update({b: chr(256 + i) for i, b in enumerate(b for b in range(256) if b not in printable)})
    assert set(spelling.values()) <= set(ByteLevel.alphabet())
    return {b: tokenizer.convert_tokens_to_ids(c) for b, c in spelling.items()}


def one_character_sequences(matcher: GrammarMatcher, byte_ids: dict[int, int], prefix: list[int]) -> list[bytes]:
    """Every byte sequence of one character the matcher accepts after ``prefix`` (bytes of one character)."""
    found = []
    for byte, token in byte_ids.items():
        if not matcher.accept_tokens([token]):
            continue
        sequence = [*prefix, byte]
        try:
            bytes(sequence).decode("utf-8")
            found.append(bytes(sequence))
        except UnicodeDecodeError as exc:
            if "unexpected end" in exc.reason and len(sequence) < 4:
                found.extend(one_character_sequences(matcher, byte_ids, sequence))
            else:
                found.append(bytes(sequence))
        matcher.rollback(1)
    return found


def test_bounded_string_characters_are_utf8(model_dir: Path) -> None:
    from infercore_structured_output.xgrammar_backend import XGrammarBackend

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    backend = XGrammarBackend(TokenizerInfo.from_tokenizer(tokenizer))
    schema = {"type": "string", "minLength": 1, "maxLength": 1}
    matcher = backend.compile(StructuredOutputsParams(json=schema)).matcher()
    assert matcher.accept_tokens([tokenizer.convert_tokens_to_ids('"')])
    sequences = one_character_sequences(matcher, byte_token_ids(tokenizer), [])
    malformed = []
    for sequence in sequences:
        try:
            sequence.decode("utf-8")
        except UnicodeDecodeError:
            malformed.append(sequence)
    assert not malformed, f"{len(malformed)} malformed, e.g. {malformed[:4]}"
    assert len(sequences) == PLAIN_CHARACTERS
