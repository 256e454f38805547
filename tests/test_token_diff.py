"""First differing token (harness/token_diff.py) and its place in the identity check and verdict."""
from __future__ import annotations

from dflash_qualify.harness import analysis, identity
from dflash_qualify.harness.token_diff import describe, first_token_difference


def test_first_token_difference_names_index_ids_and_texts():
    assert first_token_difference([1, 2, 3], [1, 2, 3]) is None
    d = first_token_difference([1, 2, 3], [1, 9, 3], ["a", "b", "c"], ["a", "X", "c"])
    assert (d["index"], d["reference_token"], d["token"], d["reference_text"], d["text"]) == \
        (1, 2, 9, "b", "X")
    assert describe(d) == ("first differing token at index 1: 9 'X' (reference 2 'b'; "
                           "3 vs reference 3 tokens)")
    short = first_token_difference([1, 2, 3], [1, 2])
    assert (short["index"], short["token"], short["reference_token"]) == (2, None, 3)
    assert "(none: the response ended)" in describe(short)


def sample(seq, arm, sha, tokens, texts=None):
    s = {"seq": seq, "arm": arm, "phase": "measured", "index": seq, "prompt_id": "p",
         "group": None, "response_sha256": sha, "response_tokens": tokens, "ok": True}
    if texts is not None:
        s["response_token_texts"] = texts
    return s


def test_identity_check_names_the_first_differing_token_when_samples_carry_ids():
    data = {"a" * 64: b"hello", "b" * 64: b"help!"}
    samples = [sample(0, "A", "a" * 64, [10, 11, 12], ["he", "l", "lo"]),
               sample(1, "cand", "b" * 64, [10, 11, 13], ["he", "l", "p!"])]
    result = identity.check(samples, {"A"}, data.__getitem__)
    m = result["first_mismatch"]
    assert m["first_differing_byte"] == 3
    assert m["first_differing_token"]["index"] == 2
    text = analysis.describe_mismatch(m)
    assert "first differing token at index 2: 13 'p!' (reference 12 'lo'" in text
    assert "first differing byte at position 3" in text
    old = identity.check(samples, {"A"}, data.__getitem__, tokens=False)   # stats version < 3
    assert "first_differing_token" not in old["first_mismatch"]
    no_ids = [dict(s, response_tokens=None) for s in samples]
    assert identity.check(no_ids, {"A"}, data.__getitem__)["first_mismatch"][
        "first_differing_token"] is None
