"""A case too big for the GPU's free memory is not run there, and the gate says so (the judge lane on
an 80 GB H100, six gates side by side: the Hugging Face module's backward past 2^31 elements ran out
of memory, and the law failed it as a refusal inside its contract; a case the law itself found too
big raised a harness error). Not the target's failure, not a refusal, never counted as passed."""

import json

import pytest
import torch

from harness.running import report
from harness.running import session
from harness.judging.cases import Case
from harness.judging.laws.cuda import no_room
from harness.running.spec import TargetSpec
from harness.running.tally import Tally
from harness.judging.target import LawFailure, NoRoom, Rejected
from harness.running.worker import Verdict

BIG = Case(shape=(32768, 65537), dtype="bfloat16", weight_dtype="bfloat16", eps=1e-6, layout="contiguous",
           grad_layout="contiguous", pattern="normal", seed=1)


def test_running_out_of_gpu_memory_past_2_31_elements_is_no_room_and_nothing_else_is():
    got = no_room(Rejected("backward raised OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"),
                  6 << 30, BIG)
    assert isinstance(got, NoRoom), got
    assert "Tried to allocate 8.00 GiB" in str(got) and "6.0 GiB free before the case" in str(got), got
    assert "4.0 GiB each" in str(got), got  # 32768 x 65537 bfloat16
    got = no_room(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB"), 3 << 30, BIG)
    assert isinstance(got, NoRoom) and "3.0 GiB free" in str(got), got
    # A refusal for any other reason stays a refusal (a contract fails it), and a wrong answer is no memory matter.
    assert no_room(Rejected("forward raised RuntimeError: M should be less than maximum CUDA grid size"),
                   6 << 30, BIG) is None
    assert no_room(AssertionError("y[3] differs"), 6 << 30, BIG) is None


class _Runner:
    info = {"device": "cuda", "has_ops": False, "has_backward": True}

    def __init__(self, verdict):
        self.verdict = verdict

    def check(self, law, case, deadline=None):
        return self.verdict


def test_the_law_ends_as_not_run_on_this_gpu_and_the_report_says_so(monkeypatch):
    from harness.judging.contract import Contract

    fresh = session.Session(TargetSpec("project"))
    fresh._declared = Contract()
    monkeypatch.setattr(session, "_CURRENT", fresh)
    monkeypatch.setenv("RMSNORM_MIN_CHECKED", "20")
    why = "backward raised OutOfMemoryError: CUDA out of memory (5.7 GiB free before the case)"
    monkeypatch.setattr(fresh, "runner", lambda: _Runner(Verdict("no_room", why, {}, 1.0)))
    with pytest.raises(pytest.skip.Exception) as skip:
        session.check("beyond_2_31_elements", BIG)
    assert str(skip.value.msg).startswith("beyond_2_31_elements: not run on this GPU: backward raised OutOfMemory")
    t = Tally()
    t.merge(json.loads(json.dumps(fresh.tally.to_json())))  # what the xdist workers hand the controller
    assert t.no_room == {"beyond_2_31_elements": why}
    t.by_law["beyond_2_31_elements"]["pass"] += 1  # a case it checked before the one too big
    t.applies.add("beyond_2_31_elements")
    t.by_law["gradcheck"]["pass"] += 40
    # Not a coverage failure (it was not run here), and not silent: a line of its own in the report.
    assert report.too_few_checked(t) == []
    monkeypatch.setenv("RMSNORM_TARGET", "peer:hf")
    lines = report.summary_lines(t, [])
    line = next((x for x in lines if x.startswith("NOT RUN on this GPU: beyond_2_31_elements")), None)
    assert line is not None and "after 1 case(s) passed" in line and why in line, lines
    # A law that applies and ran nothing for any other reason still fails on coverage.
    t.no_room.clear()
    del t.by_law["beyond_2_31_elements"]
    assert report.too_few_checked(t) == [("beyond_2_31_elements", 0, 0, 20)]


def test_a_case_the_law_finds_too_big_is_not_a_harness_error(monkeypatch):
    """Before, the law's own check raised NotApplicable, which a gate takes for a strategy drawing
    cases its law does not apply to (a harness error)."""
    from harness.judging.laws import cuda

    class _Target:
        device = torch.device("cuda", 0)

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (2 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: None)
    with pytest.raises(NoRoom, match=r"needs about 17\.0 GiB of free GPU memory, 2\.0 GiB free"):
        cuda.beyond_2_31_elements(_Target(), BIG)


def test_a_big_case_leaves_memory_for_the_other_processes_on_its_gpu(monkeypatch):
    """The kernel lane on an 80 GB H100: a case past 2^31 elements in one of mutate's judges took what it
    found free, and compute-sanitizer's synccheck run beside it died of an out-of-memory error in its own
    small tensors. The case now needs room beyond what it leaves the others (LEFT_FOR_OTHERS), and its
    process may not allocate into that while it runs."""
    from harness.judging.laws import cuda

    from torch.cuda._utils import _get_device_index

    class _Target:
        device = torch.device("cuda")  # as the gate loads a target: no index

    class _Props:
        total_memory = 80 << 30

    def set_fraction(fraction, device=None):
        _get_device_index(device)  # torch's own check: a device without an index is refused
        assert isinstance(fraction, float) and 0 <= fraction <= 1, fraction
        caps.append(fraction)

    caps, seen = [0.9], []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev=None: _Props())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 2 << 30)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction",
                        lambda dev=None: _get_device_index(dev) * 0 + caps[-1], raising=False)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", set_fraction)
    monkeypatch.setattr(cuda, "_beyond_2_31_elements", lambda target, case: seen.append(caps[-1]) or {})
    # 20 GiB free: enough for the case's 17 GiB alone, not with 8 GiB left for the others.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (20 << 30, 80 << 30))
    with pytest.raises(NoRoom, match=r"17\.0 GiB of free GPU memory, 20\.0 GiB free, of which 8 GiB is left"):
        cuda.beyond_2_31_elements(_Target(), BIG)
    assert seen == [] and caps == [0.9]
    # 40 GiB free: the case runs with its process held to what it holds (2 GiB) plus 40 - 8 GiB, then let go.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (40 << 30, 80 << 30))
    assert cuda.beyond_2_31_elements(_Target(), BIG) == {}
    assert seen == [pytest.approx(34 / 80)] and caps[-1] == 0.9, (seen, caps)
    # An out-of-memory error under that cap is this law's NoRoom, and the cap is let go all the same.
    def too_big(target, case):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    monkeypatch.setattr(cuda, "_beyond_2_31_elements", too_big)
    with pytest.raises(NoRoom, match=r"Tried to allocate 8\.00 GiB \(40\.0 GiB free before the case, 8 GiB of it left"):
        cuda.beyond_2_31_elements(_Target(), BIG)
    assert caps[-1] == 0.9


def test_a_survivor_whose_suite_stopped_at_a_case_too_big_says_so(tmp_path):
    """mutate: a mutant that only beyond_2_31_elements kills (fast_int32_row_offsets) survives where the
    GPU is too full for the law's cases; the score names the law it could not run beside the survivor."""
    t = Tally()
    t.no_room["beyond_2_31_elements"] = "backward raised OutOfMemoryError: CUDA out of memory"
    (tmp_path / "tally-1-2.json").write_text(json.dumps(t.to_json()))
    (tmp_path / "tally-3-4.json").write_text(json.dumps(Tally().to_json()))
    assert sorted(Tally.read(tmp_path).no_room) == ["beyond_2_31_elements"]  # as mutate reads a judge's tallies
    assert Tally.read(tmp_path / "none").no_room == {}


def test_short_of_memory_is_the_machine_state_unless_the_card_could_never_hold_it():
    from harness.judging.target import Crashed, short_of_memory

    card = 80 << 30
    assert short_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), card)
    assert short_of_memory(RuntimeError("CUDA error: out of memory"), card)
    assert short_of_memory(Crashed("a CUDA error surfaced after the target ran: CUDA error: out of memory"), card)
    assert short_of_memory(RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable"), card)
    assert short_of_memory(Rejected("forward raised OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                    "512.00 MiB"), card)
    # Asking for more than the whole card is the target's own fault (a size computed wrong).
    assert not short_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB"), card)
    assert not short_of_memory(LawFailure("y[3] differs"), card)
    assert not short_of_memory(KeyboardInterrupt(), card)
    # A law that judged the room itself has said so: not waited for again.
    assert not short_of_memory(NoRoom("CUDA out of memory. Tried to allocate 8.00 GiB (6.0 GiB free before the "
                                      "case, 8 GiB of it left for the other processes on this GPU)"), card)


def test_a_case_short_of_gpu_memory_runs_again_then_is_not_run_never_failed(monkeypatch):
    from harness.judging import laws, target as tgt
    from harness.running import worker

    class _T:
        is_cuda = True
        device = torch.device("cuda", 0)

    class _Props:
        total_memory = 80 << 30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev=None: _Props())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    outcomes = [RuntimeError("CUDA error: out of memory"), tgt.Crashed("CUDA error: out of memory"), {"ok": 1}]

    def run_law(t, law, case, **kw):
        o = outcomes.pop(0)
        if isinstance(o, BaseException):
            raise o
        return o

    monkeypatch.setattr(laws, "run_law", run_law)
    slept = []
    assert worker._run_law(_T(), "forward_matches_reference", BIG, {}, sleep=slept.append) == {"ok": 1}
    assert slept == [worker.MEMORY_STEP_S] * 2
    # Short of memory all along: not run on this GPU, after the wait.
    monkeypatch.setattr(laws, "run_law", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("CUDA error: out of memory")))
    slept.clear()
    with pytest.raises(NoRoom, match=r"still after waiting \d+ s for other processes"):
        worker._run_law(_T(), "forward_matches_reference", BIG, {}, sleep=slept.append)
    assert sum(slept) <= worker.MEMORY_WAIT_S and slept
    # Anything else is the law's own outcome, at once.
    monkeypatch.setattr(laws, "run_law", lambda *a, **k: (_ for _ in ()).throw(LawFailure("y[3] differs")))
    slept.clear()
    with pytest.raises(LawFailure):
        worker._run_law(_T(), "forward_matches_reference", BIG, {}, sleep=slept.append)
    assert slept == []
