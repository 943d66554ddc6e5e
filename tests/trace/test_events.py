"""The event stream's arithmetic, on hand-made events (no torch)."""

from vramlens.trace.events import Event, round_storage, summarize, timeline_text


def ev(seq, action, sid, n, tag, phase="forward", step=1, module="m"):
    return Event(seq, action, sid, n, tag, module, phase, step, "op")


def test_round_storage_like_the_cuda_allocator():
    assert round_storage(0, 512) == 0  # no block for an empty storage
    assert round_storage(1, 512) == 512
    assert round_storage(512, 512) == 512
    assert round_storage(513, 512) == 1024
    assert round_storage(513, 1) == 513


def test_peaks_by_tag_phase_and_live_set():
    events = [
        ev(0, "alloc", 0, 1000, "parameter", phase="setup", step=0),
        ev(1, "alloc", 1, 300, "activation"),
        ev(2, "alloc", 2, 200, "temporary"),
        ev(3, "free", 2, 200, "temporary"),
        ev(4, "alloc", 3, 1000, "gradient", phase="backward"),
        ev(5, "free", 1, 300, "activation", phase="backward"),
        ev(6, "alloc", 4, 50, "host", phase="optimizer"),  # not on the GPU: never counted
    ]
    s = summarize(events)
    assert s.peak_allocated == 1000 + 300 + 1000  # parameter + activation + gradient, at seq 4
    assert s.peak_seq == 4 and s.peak_phase == "backward" and s.peak_step == 1
    assert s.by_tag["activation"] == 300 and s.by_tag["temporary"] == 200 and s.by_tag["gradient"] == 1000
    assert s.by_component["weights"] == 1000 and s.by_component["temporaries"] == 200
    assert dict(((st, p), b) for st, p, b in s.phase_peaks)[(1, "forward")] == 1000 + 300 + 200
    assert s.step_peaks == ((1, 2300),)
    assert {(g.tag, g.nbytes) for g in s.live_at_peak} == {("parameter", 1000), ("activation", 300), ("gradient", 1000)}
    assert s.final_live == 2000


def test_timeline_formats():
    events = [ev(0, "alloc", 0, 512, "activation"), ev(1, "free", 0, 512, "activation")]
    csv = timeline_text(events, "csv").splitlines()
    assert csv[0] == "seq,action,storage,nbytes,tag,module,phase,step,op"
    assert csv[1] == "0,alloc,0,512,activation,m,forward,1,op"
    jl = timeline_text(events, "jsonl").splitlines()
    assert jl[1] == ('{"seq":1,"action":"free","storage":0,"nbytes":512,"tag":"activation","module":"m",'
                     '"phase":"forward","step":1,"op":"op"}')
