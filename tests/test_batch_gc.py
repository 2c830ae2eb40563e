"""The cyclic collector's policy for a batch command (commands/common.py `batch_gc`)."""

from __future__ import annotations

import gc

from gpuplan.commands.common import batch_gc


def test_batch_gc_turns_the_collector_off_and_freezes_what_the_command_made() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        with batch_gc():
            assert not gc.isenabled()
            made = [[i] for i in range(1000)]  # containers the collector tracks
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + len(made)  # never scanned again
        assert not any(gc.is_tracked(x) and x in gc.get_objects(generation=0) for x in made[:3])
    finally:
        gc.unfreeze()


def test_batch_gc_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with batch_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
