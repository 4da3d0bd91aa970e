"""The fake device's streams (fake_cupy.py) order work as CUDA does, so that a synchronisation the runtime leaves
out fails a test: work runs only when something waits for it, a non-blocking stream waits for no other, the
legacy default stream and blocking streams wait for each other, an event orders two streams, and fresh memory
holds garbage."""

import numpy as np

from tests.runtime.cuda import fake_cupy

Stream, Event = fake_cupy.cuda.Stream, fake_cupy.cuda.Event


def test_fresh_memory_is_poisoned_and_zeros_are_a_queued_memset():
    fresh = fake_cupy.ndarray((4,), np.float32)
    assert np.isnan(fresh.a).all()  # the host view, read without waiting: what the device holds now
    stream = Stream(non_blocking=True)
    with stream:
        zeroed = fake_cupy.zeros(4, np.int32)
    assert (zeroed.a == -1).all()  # queued, not run
    assert (zeroed.get(stream=stream) == 0).all()  # get waits for its stream


def test_a_non_blocking_stream_does_not_wait_for_the_legacy_stream_unless_told():
    uploaded = fake_cupy.asarray(np.arange(4, dtype=np.float32))  # on the legacy stream, not yet run
    racing, ordered = Stream(non_blocking=True), Stream(non_blocking=True)
    with racing:
        early = uploaded * 2
    assert np.isnan(early.get(stream=racing)).all()  # computed from the poisoned memory: the upload never ran
    done = Event()
    done.record(Stream.null)
    ordered.wait_event(done)
    with ordered:
        late = uploaded * 2
    np.testing.assert_array_equal(late.get(stream=ordered), np.arange(4) * 2)


def test_blocking_streams_and_the_legacy_stream_wait_for_each_other():
    blocking = Stream()
    with blocking:
        values = fake_cupy.asarray(np.ones(3, np.float32))
    doubled = values * 2  # on the legacy stream: waits for the blocking stream's upload
    np.testing.assert_array_equal(doubled.get(), [2, 2, 2])


def test_an_event_synchronises_only_what_it_recorded():
    stream = Stream(non_blocking=True)
    with stream:
        first = fake_cupy.asarray(np.ones(2, np.int64))
        recorded = Event()
        recorded.record()
        second = fake_cupy.asarray(np.full(2, 7, np.int64))
    recorded.synchronize()
    assert (first.a == 1).all() and (second.a == -1).all()


def test_host_data_is_read_when_the_copy_is_issued_device_data_when_it_runs():
    stream = Stream(non_blocking=True)
    host = np.zeros(2, np.float32)
    with stream:
        staged = fake_cupy.asarray(host)
        host[:] = 5  # CuPy staged the old values
        copied = staged.copy()
        staged[...] = np.full(2, 3, np.float32)  # queued after the copy, so the copy sees the staged zeros
    np.testing.assert_array_equal(copied.get(stream=stream), [0, 0])
    np.testing.assert_array_equal(staged.get(stream=stream), [3, 3])


def test_a_temporary_stays_valid_for_the_copy_queued_from_it():
    """`a[...] = cp.asarray(x)`: the temporary is dropped as the statement ends, its copy still queued. CuPy's pool
    gives its memory to a later allocation only behind that queued copy; numpy, under the fake, would reuse it at
    once (an allocation of the same size takes it and poisons it) unless the queued copy holds the temporary."""
    target = fake_cupy.zeros(4, np.float32)
    temporary = fake_cupy.asarray(np.arange(4, dtype=np.float32))
    Stream.null.synchronize()  # the temporary holds its values; only the copy below is pending
    target[...] = temporary
    del temporary
    fake_cupy.empty(4, np.float32)  # the size the temporary had: it takes that memory if it is free
    np.testing.assert_array_equal(target.get(), np.arange(4))
