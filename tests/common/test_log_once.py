"""common/log_once.OncePer, the one rule for saying a repeated thing less often: a key once per
period (said again at exactly the period, not a moment before), once ever with EVER, keys apart,
`forget`, and the bound on the keys held (all forgotten when exactly `max_keys` are held)."""

from __future__ import annotations

from gpuextender.common.log_once import EVER, MAX_KEYS, OncePer
from tests.common.test_token_bucket import Clock  # (now = 100.0, set by the test)


def test_a_key_is_said_again_at_exactly_the_period_and_not_before() -> None:
    clock = Clock()
    say = OncePer(60.0, clock)
    assert say("peer", "refused") is True
    clock.now = 159.999
    assert say("peer", "refused") is False
    clock.now = 160.0
    assert say("peer", "refused") is True
    clock.now = 219.5  # the period counts from when it was last said
    assert say("peer", "refused") is False


def test_keys_are_apart_and_a_key_is_its_whole_tuple() -> None:
    say = OncePer(60.0, Clock())
    assert [say("a"), say("b"), say("a", "x"), say("a"), say("b")] == [True, True, True, False, False]


def test_ever_says_a_key_once() -> None:
    clock = Clock()
    say = OncePer(EVER, clock)
    assert say("Node", "n1", "7") is True
    clock.now = 1e12
    assert say("Node", "n1", "7") is False and say("Node", "n1", "8") is True


def test_forget_lets_every_key_be_said_at_once() -> None:
    say = OncePer(EVER, Clock())
    assert say("a") and say("b")
    say.forget()
    assert say("a") is True and say("b") is True


def test_the_keys_held_are_bounded_all_forgotten_at_exactly_max_keys() -> None:
    say = OncePer(EVER, Clock(), max_keys=3)
    assert all(say(k) for k in ("a", "b", "c"))  # 3 held: the bound
    assert say("a") is False  # held keys still answer while nothing new comes
    assert say("d") is True  # a 4th: the 3 are forgotten first
    assert say("a") is True and say("d") is False
    assert MAX_KEYS == 10_000
