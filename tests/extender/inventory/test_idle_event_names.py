"""AllocatedGPUsIdle Event names: the object's name and a time stamp, never past 253 characters."""

from __future__ import annotations

from gpuextender.extender.inventory.idle_events import MAX_NAME_CHARS, event_name

STAMP = 0x18F0A1B2C3D4E  # microseconds; 13 hex digits, as today's wall clock gives
SUFFIX = f".{STAMP:x}"


def test_the_object_name_and_the_stamp() -> None:
    assert event_name("gpu-node-1", STAMP) == "gpu-node-1" + SUFFIX


def test_at_the_bound_the_name_is_kept_and_past_it_a_digest_stands_for_it() -> None:
    fits = "n" * (MAX_NAME_CHARS - len(SUFFIX))
    assert event_name(fits, STAMP) == fits + SUFFIX and len(event_name(fits, STAMP)) == MAX_NAME_CHARS
    longer = fits + "n"
    named = event_name(longer, STAMP)
    assert len(named) <= MAX_NAME_CHARS and named.endswith(SUFFIX) and named != longer + SUFFIX
    assert event_name(longer, STAMP) == named and event_name(longer + "x", STAMP) != named  # stable, distinct
