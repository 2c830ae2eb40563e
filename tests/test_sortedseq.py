"""core/sortedseq.py: the scheduler's sorted containers against a plain sorted list, through chunk splits
and removals that empty chunks (random operations, several thousand items); KeyedSeq also against
SortedSeq of the same (key, handle, value) tuples."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from gpuplan.core.sortedseq import KeyedSeq, SortedSeq, bisect_left_f, bisect_right_f


def _check(seq: SortedSeq[tuple[float, int]], ref: list[tuple[float, int]], rng: random.Random) -> None:
    assert len(seq) == len(ref) and bool(seq) == bool(ref)
    assert list(seq) == ref
    if ref:
        assert seq.first() == ref[0]
    for _ in range(5):
        probe = (rng.uniform(-1, 101), rng.randrange(-1, 10_000))
        assert list(seq.after(probe)) == ref[bisect.bisect_right(ref, probe) :]
        assert seq.bisect_left((probe[0],)) == bisect.bisect_left(ref, (probe[0],))
        a = rng.randrange(0, len(ref) + 2)
        b = rng.randrange(a, len(ref) + 3)
        assert list(seq.islice(a, b)) == ref[a:b]


@pytest.mark.parametrize("seed", range(4))
def test_random_adds_and_removes_keep_the_order_of_a_sorted_list(seed: int) -> None:
    rng = random.Random(seed)
    start = [(float(rng.randrange(100)), i) for i in range(rng.randrange(0, 3000))]
    seq: SortedSeq[tuple[float, int]] = SortedSeq(start)
    ref = sorted(start)
    uid = len(start)
    for step in range(6000):
        if ref and rng.random() < 0.45:
            item = ref.pop(rng.randrange(len(ref)) if rng.random() < 0.7 else 0)  # often the head
            seq.remove(item)
        else:
            item = (float(rng.randrange(100)) if rng.random() < 0.8 else 1000.0, uid)  # often the end
            uid += 1
            seq.add(item)
            bisect.insort(ref, item)
        if step % 500 == 0:
            _check(seq, ref, rng)
    _check(seq, ref, rng)
    twin = seq.copy()
    if ref:
        seq.remove(ref[0])
        assert len(twin) == len(ref) and list(twin) == ref  # the copy is independent


def test_removing_what_is_absent_or_reading_an_empty_one_raises() -> None:
    seq: SortedSeq[tuple[int, int]] = SortedSeq([(1, 1), (3, 3)])
    with pytest.raises(ValueError):
        seq.remove((2, 2))
    with pytest.raises(ValueError):
        seq.remove((9, 9))
    seq.remove((1, 1))
    seq.remove((3, 3))
    assert not seq and list(seq.after((0, 0))) == []
    with pytest.raises(IndexError):
        seq.first()


@pytest.mark.parametrize("seed", range(4))
def test_keyed_seq_keeps_the_order_of_sorted_tuples_of_key_handle_and_value(seed: int) -> None:
    """Ties on the key (running jobs that end at one instant) are broken by the handle, as the
    tuples' order breaks them; infinite keys (jobs without an estimate) sort last."""
    rng = random.Random(seed)
    keyed: KeyedSeq[str] = KeyedSeq()
    plain: SortedSeq[tuple[float, int, str]] = SortedSeq()
    live: list[tuple[float, int, str]] = []
    for handle in range(8000):
        if live and rng.random() < 0.45:
            key, h, value = live.pop(rng.randrange(len(live)) if rng.random() < 0.6 else 0)
            assert keyed.remove(key, h) == value
            plain.remove((key, h, value))
        else:
            key = rng.choice([float(rng.randrange(60)), rng.uniform(0, 60), math.inf, -0.0])
            entry = (
                key,
                rng.randrange(100_000) * 100_000 + handle,
                f"v{handle}",
            )  # unique, unordered handles
            keyed.add(*entry)
            plain.add(entry)
            live.append(entry)
            live.sort()
        if handle % 700 == 0 or handle == 7999:
            assert len(keyed) == len(plain) and bool(keyed) == bool(plain)
            assert list(keyed.items()) == list(plain)
            assert list(keyed.values()) == [v for _, _, v in plain]
    twin = keyed.copy_with(str.upper)
    assert list(twin.items()) == [(k, h, v.upper()) for k, h, v in plain]
    if live:
        keyed.remove(live[0][0], live[0][1])
        assert len(twin) == len(live)  # the copy is independent
    with pytest.raises(ValueError):
        keyed.remove(1e9, -1)
    with pytest.raises(ValueError):
        KeyedSeq().remove(0.0, 0)


@pytest.mark.parametrize("seed", range(10))
def test_the_float_bisections_are_the_bisect_modules(seed: int) -> None:
    """`bisect_left_f` and `bisect_right_f` (the compiled searches of the profile and gittins' tables)
    answer what `bisect` answers, ties and both ends included."""
    rng = random.Random(seed)
    xs = sorted(float(rng.randint(0, 30)) for _ in range(rng.randint(0, 40)))
    for x in [*xs, -1.0, 31.0, *(rng.uniform(-1, 31) for _ in range(20))]:
        assert bisect_right_f(xs, x) == bisect.bisect_right(xs, x)
        assert bisect_left_f(xs, x) == bisect.bisect_left(xs, x)
        lo = rng.randint(0, len(xs))
        assert bisect_left_f(xs, x, lo) == bisect.bisect_left(xs, x, lo)
