"""vocab_map.py: byte strings of byte-level tokens, the intersection, the restricted law, and
the pairs refused."""
from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers

from specdec.errors import ConfigError
from specdec.models.tokenizer import Tokenizer
from specdec.proposers.vocab_map import VocabMap, byte_alphabet, restrict, whole_chars
from tests.proposers.xvocab import DRAFT_PIECES, TARGET_PIECES, bundled, cut_bundled, tiny_tokenizer


def test_the_byte_alphabet_covers_every_byte_once():
    table = byte_alphabet()
    assert sorted(table.values()) == list(range(256))
    assert table["a"] == ord("a") and table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n")


@pytest.mark.parametrize("text", ["abc", "café", "x𝔘", "→"])
def test_whole_chars_stops_before_a_cut_character(text):
    data = text.encode()
    assert whole_chars(data) == len(data)
    last = len(text[-1].encode())
    for cut in range(1, last):
        assert whole_chars(data[:len(data) - last + cut]) == len(data) - last


def test_pieces_spell_the_text_and_encode_returns_byte_ends():
    vmap = VocabMap.build(bundled(), cut_bundled(1000), 8192, 8192)
    text = "def f(x):\n    return 'café 𝔘' <s>\n".encode()
    for side in (vmap.target, vmap.draft):
        ids, ends = side.encode(text)
        assert side.text(ids) == text and ends[-1] == len(text)
        assert ends == sorted(ends)
    ids, ends = vmap.draft.encode(text[:-4])          # 𝔘's bytes cut after the first: kept back
    assert ends[-1] == whole_chars(text[:-4]) and vmap.draft.text(ids) == text[:ends[-1]]


def test_the_intersection_pairs_equal_byte_strings_and_leaves_out_special_tokens():
    vmap = VocabMap.build(bundled(), cut_bundled(1000), 8192, 8192)
    assert vmap.target.pieces[0] is None and vmap.target.pieces[1] is None        # <s>, </s>
    for d, t in zip(vmap.shared_draft.tolist(), vmap.shared_target.tolist()):
        assert vmap.draft.pieces[d] == vmap.target.pieces[t] is not None
    assert 0 not in vmap.shared_target.tolist() and 1 not in vmap.shared_target.tolist()
    tiny = VocabMap.build(tiny_tokenizer(TARGET_PIECES), tiny_tokenizer(DRAFT_PIECES), 5, 6)
    assert tiny.shared_draft.tolist() == [0, 1, 2] and tiny.draft_to_target.tolist() == [0, 1, 2, -1, -1, -1]


def test_restrict_is_the_renormalised_law_on_the_intersection():
    tiny = VocabMap.build(tiny_tokenizer(TARGET_PIECES), tiny_tokenizer(DRAFT_PIECES), 5, 6)
    q_draft = torch.tensor([[0.1, 0.2, 0.1, 0.3, 0.2, 0.1], [0.0, 0.0, 0.0, 0.5, 0.5, 0.0]])   # (2, 6)
    q = restrict(q_draft, tiny)                                                                 # (2, 5)
    assert torch.allclose(q[0], torch.tensor([0.25, 0.5, 0.25, 0.0, 0.0]))
    assert torch.allclose(q[1], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0]))                # no shared mass
    assert torch.allclose(q.sum(-1), torch.ones(2))


def test_a_pair_sharing_too_little_is_refused_naming_the_overlap():
    with pytest.raises(ConfigError, match=r"shares 998 tokens \(12\.2%\) of the target's 8192-token"):
        VocabMap.build(bundled(), cut_bundled(1000), 8192, 8192, min_shared=0.2)


def test_a_tokenizer_that_is_not_byte_level_is_refused():
    word = HFTokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    word.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ConfigError, match="byte-level BPE"):
        VocabMap.build(bundled(), Tokenizer(word, None, None), 8192, 3)


def test_bytes_that_are_not_utf8_get_single_byte_tokens():
    """A byte-level model may emit a stray lead byte ("ß" in the byte alphabet is 0xDF): the text
    is then not UTF-8 and is spelt byte by byte there, canonically around it."""
    vmap = VocabMap.build(bundled(), cut_bundled(1000), 8192, 8192)
    data = b"def n\xdfn(x):\n    return x\n"
    for side in (vmap.target, vmap.draft):
        ids, ends = side.encode(data)
        assert side.text(ids) == data and ends[-1] == len(data)
        assert side.byte_ids[0xDF] in ids


def test_a_tokenizer_larger_than_its_models_vocabulary_is_refused():
    with pytest.raises(ConfigError, match=r"draft's tokenizer has 8192 tokens, more than its model's vocabulary \(4096"):
        VocabMap.build(bundled(), bundled(), 8192, 4096)
