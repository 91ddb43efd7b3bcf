"""A verdict you can trust: every law judges inside the declared contract (gradcheck in the widest
declared dtype, never float64 outside it), and the verdict comes from what the run recorded
(issue: a verdict you can trust)."""

import json
import sys
import types

import pytest
import torch

from harness.judging import laws
from harness.running import loading as tgt
from harness.judging.cases import Case
from harness.judging.target import LawFailure
from harness.running.spec import TargetSpec
from tests._draw import drawn as draw_cases
from tests._run import run

CASE = dict(dtype="float32", weight_dtype="float32", eps=1e-6, layout="contiguous", grad_layout="contiguous",
            pattern="normal", weight_pattern="normal")


def _gradcheck(monkeypatch, contract, module="tests.targets.computes_in_float32", seeds=range(12), shape=(3, 8)):
    if contract is None:
        monkeypatch.delenv("RMSNORM_CONTRACT", raising=False)
    else:
        monkeypatch.setenv("RMSNORM_CONTRACT", json.dumps(contract))
    t = tgt.load(f"module:{module}", "cpu")
    return t, [laws.run_law(t, "gradcheck", Case(shape=shape, seed=s, **CASE))["gradcheck_dtype"] for s in seeds]


@pytest.mark.parametrize("contract, dtype", [
    ({"dtypes": ["float32"]}, "float32"),
    ({"dtypes": ["float32", "float16", "bfloat16"]}, "float32"),
    ({"dtypes": ["bfloat16"]}, "bfloat16"),
    ({"dtypes": ["float16"], "weight_dtypes": ["float32"]}, "float16"),
])
def test_gradcheck_runs_in_the_widest_declared_dtype_and_passes_a_float32_kernel(monkeypatch, contract, dtype):
    _, ran = _gradcheck(monkeypatch, contract)
    assert set(ran) == {dtype}


def test_gradcheck_without_a_contract_still_holds_float64_to_float64(monkeypatch):
    with pytest.raises(LawFailure, match=r"gradcheck \(torch.float64\) failed"):
        _gradcheck(monkeypatch, None, seeds=[0])


def test_gradcheck_in_a_half_dtype_still_catches_a_backward_without_its_correction(monkeypatch):
    from tests.targets import computes_in_float32 as good

    def no_correction(grad_out, x, weight, inv_rms):  # grad_x = dy * w * inv_rms: the x term left out
        gx = (grad_out.float() * weight.float() * inv_rms.float().unsqueeze(-1)).to(x.dtype)
        return gx, good.backward(grad_out, x, weight, inv_rms)[1]

    broken = types.ModuleType("no_correction")
    broken.forward, broken.backward = good.forward, no_correction
    monkeypatch.setitem(sys.modules, "no_correction", broken)
    for contract in ({"dtypes": ["bfloat16"]}, {"dtypes": ["float16"]}, {"dtypes": ["float32"]}):
        with pytest.raises(LawFailure, match="gradcheck"):
            _gradcheck(monkeypatch, contract, module="no_correction", seeds=[3])


def test_gradcheck_keeps_n_a_multiple_of_what_the_contract_asks(monkeypatch):
    seen = []
    from tests.targets import computes_in_float32 as good

    def forward(x, weight, eps):
        seen.append(x.shape[-1])
        if x.shape[-1] % 16:
            raise ValueError(f"expected N a multiple of 16, but got {x.shape[-1]}")
        return good.forward(x, weight, eps)

    aligned = types.ModuleType("aligned16")
    aligned.forward, aligned.backward = forward, good.backward
    monkeypatch.setitem(sys.modules, "aligned16", aligned)
    _gradcheck(monkeypatch, {"dtypes": ["float32"], "n_multiple_of": 16}, module="aligned16", seeds=[0],
               shape=(2, 48))
    assert seen and all(n % 16 == 0 for n in seen), seen


def test_a_kernel_that_computes_in_float32_declared_float32_passes_every_law(tmp_path):
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.computes_in_float32",
                     "--dtypes", "float32", "--corpus", str(tmp_path)], timeout=900)
    assert code == 0, out[-3000:]
    table = [line.split() for line in out.splitlines() if line[:1].islower() and len(line.split()) == 6
             and line.split()[1].isdigit()]
    assert len(table) >= 11 and all(row[4] == "0" for row in table), out[-3000:]


def test_a_row_limit_in_bytes_is_declared_drawn_inside_and_reported(monkeypatch, tmp_path):
    from harness.running import session
    from harness.judging.contract import Contract

    c = Contract.from_dict({"dtypes": ["float32", "bfloat16"], "max_row_bytes": 65535}, "test")
    one = dict(CASE, dtype="bfloat16", weight_dtype="bfloat16")
    assert c.allows(Case(shape=(2, 32767), seed=0, **one)) and not c.allows(Case(shape=(2, 32768), seed=0, **one))
    assert c.allows(Case(shape=(2, 16383), seed=0, **CASE)) and not c.allows(Case(shape=(2, 16384), seed=0, **CASE))
    with pytest.raises(ValueError, match="max_row_bytes"):
        Contract.from_dict({"dtypes": ["float32"], "max_row_bytes": 3}, "test")

    drawn = draw_cases(monkeypatch, {"dtypes": ["float32", "bfloat16"], "max_row_bytes": 1000}, n=150,
                       spec="module:tests.targets.row_bytes_limited")
    small = session.current().contract()
    assert all(small.allows(k) for k in drawn)
    assert max(k.n for k in drawn if k.dtype == "float32") <= 250
    assert max(k.n for k in drawn if k.dtype == "bfloat16") > 250  # bfloat16 keeps its longer rows

    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.row_bytes_limited",
                     "--corpus", str(tmp_path), "--", "-k", "test_forward_matches_reference or test_rows_independent"],
                    timeout=900)
    assert code == 0, out[-3000:]
    assert "rows <= 65535 bytes (N <= 16383 in float32, N <= 32767 in bfloat16)" in out, out[-3000:]


@pytest.mark.parametrize("workers", ["2", "0"])
def test_a_failure_under_x_is_failed_with_or_without_workers(tmp_path, workers):
    """With -x under xdist a failing target once ended INTERRUPTED, exit 130 (every mutant on the H200)."""
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "-n", workers, "--target",
                     "module:tests.targets.wrong_tail", "--corpus", str(tmp_path), "--", "-x",
                     "-k", "test_forward_matches_reference or test_rows_independent"], timeout=900)
    assert code == 1 and "rmsnorm gate FAILED" in out and "INTERRUPTED" not in out, out[-3000:]


def test_sigterm_ends_a_run_with_its_report_and_verdict(tmp_path):
    """SIGTERM to the gate alone (as `timeout` and CI runners send it), workers and all: it once died
    with nothing printed."""
    import os
    import signal
    import subprocess
    import time

    from tests._run import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMSNORM_", "PYTEST_XDIST"))}
    env["RMSNORM_CORPUS"] = str(tmp_path / "corpus")
    log = tmp_path / "gate.log"
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "harness", "gate", "--device", "cpu", "-n", "2"], cwd=ROOT,
                             env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Among the laws, with cases checked: wait for the first test to pass (its worker then holds
        # a tally). A fixed wait did not hold: 6 s after the extension was ready, once, and 15 s after
        # the workers came up on the CI machine shared with other tests, no case had been checked yet
        # (the report then rightly had no law to show).
        deadline = time.monotonic() + 600

        def first_pass() -> bool:  # pytest's "." for a passed test, after the workers' start lines
            text = log.read_text()
            return "bringing up nodes..." in text and "." in text.rsplit("bringing up nodes...", 1)[1]

        while not first_pass() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert p.poll() is None, log.read_text()[-3000:]
        os.kill(p.pid, signal.SIGTERM)
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    out = log.read_text()
    assert code == 143, out[-3000:]
    assert "rmsnorm gate INTERRUPTED (SIGTERM)" in out and "law " in out, out[-3000:]
    assert not list((tmp_path / "corpus").rglob("*.json")), out[-3000:]
    time.sleep(1)
    stray = subprocess.run(["pgrep", "-f", f"RMSNORM_CORPUS={tmp_path}"], capture_output=True, text=True).stdout
    assert not stray.strip(), stray


def test_a_diagnosis_is_printed_only_where_the_numbers_bear_it_out():
    """One bug (eps added after the sqrt) was "computed at float16 precision" on [1], "bfloat16" on
    [65, 1] and "eps misapplied" on [1024, 9]; a grad_weight that left out rows 64 and up was, under
    a bound of 553, "the next column's values" and "a factor per row". None of those held."""
    from harness.judging import judge
    from harness.judging.cases import materialize

    for shape in ((1,), (65, 1)):
        t = materialize(Case(shape=shape, seed=0, **CASE), "cpu")
        x64 = t.x.double()
        y = (x64 / (x64.pow(2).mean(-1, keepdim=True).sqrt() + 0.05) * t.weight.double()).float()  # eps after the sqrt
        text = "\n".join(str(m) for m in judge.judge_forward(y, None, t.x, t.weight, 0.05) if m)
        assert "wrong" in text and "precision" not in text, text
    # Seeded: ref = 3g + noise is within the bound of one factor (1/3) for some draws (24 of seeds
    # 0-199), where the diagnosis holds; unseeded, the draw followed whichever tests ran before in the
    # process, and under pytest-xdist it once was such a draw.
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(8, dtype=torch.float64, generator=gen)
    ref = g * 3 + torch.randn(8, dtype=torch.float64, generator=gen)  # rows left out: no factor, no neighbour
    bound = torch.full((8,), 0.5, dtype=torch.float64)
    wide = torch.full((8,), 553.0, dtype=torch.float64)
    for b in (bound, wide):
        bad = (g - ref).abs() > b
        if bool(bad.any()):
            out = judge.diagnose(g, ref, b, bad, torch.ones(8, dtype=torch.bool))
            assert not out, out
    # What still holds is still said: a factor per row where it explains the error.
    t = materialize(Case(shape=(4, 64), seed=1, **CASE), "cpu")
    ref64 = t.x.double() * torch.rsqrt(t.x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    out = judge.diagnose(ref64 * 1.01, ref64, torch.full_like(ref64, 1e-6), torch.ones(4, 64, dtype=torch.bool),
                         torch.ones(4, 64, dtype=torch.bool))
    assert any("times one factor" in d for d in out) and not any("precision" in d for d in out), out


def _terminate_once_a_failure_is_saved(cmd: list[str], tmp_path) -> tuple[int, str]:
    """Run cmd (a gate or a fuzz session of tests.targets.slow_wrong), SIGTERM it once its first
    failing case is saved (before shrinking ends: each call takes 0.4 s), return (exit, output)."""
    import os
    import signal
    import subprocess
    import time

    from tests._run import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMSNORM_", "PYTEST_XDIST"))}
    corpus = tmp_path / "corpus"
    env["RMSNORM_CORPUS"] = str(corpus)
    log = tmp_path / "run.log"
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "harness", *cmd],
                             cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not list(corpus.rglob("*.json")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert p.poll() is None, log.read_text()[-3000:]
        time.sleep(1)  # into the shrinking (a call takes 0.4 s)
        os.kill(p.pid, signal.SIGTERM)
        code = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return code, log.read_text()


@pytest.mark.parametrize("command", ["gate", "fuzz"])
def test_a_run_stopped_while_a_failure_shrinks_has_failed(tmp_path, command):
    """A 4-process fuzz session on the H200 ended past its time (a law's failure still shrinking when
    SIGTERM came): its table counted 2 failed cases, yet no law was named and the verdict was
    INTERRUPTED (SIGTERM). The first failing case is saved before shrinking; the run has failed."""
    target = ["--target", "module:tests.targets.slow_wrong"]
    cmd = (["gate", "--device", "cpu", "-n", "0", *target, "--", "-k", "test_forward_matches_reference and not large and not tall"]
           if command == "gate" else
           ["fuzz", "--device", "cpu", "--workers", "1", "--minutes", "10", *target, "--laws", "forward_matches_reference"])
    code, out = _terminate_once_a_failure_is_saved(cmd, tmp_path)
    assert code == 1, out[-3000:]
    assert f"rmsnorm {command} FAILED" in out and "INTERRUPTED" not in out.split(f"rmsnorm {command} ")[-1], out[-3000:]
    # Named with its case: stopped while shrinking (its first failing case), or, where the signal
    # ended the shrinking in between, the smallest case found.
    assert "FAILED forward_matches_reference [fail]" in out, out[-3000:]
    saved = list((tmp_path / "corpus").rglob("*.json"))
    assert len(saved) == 1 and str(saved[0]) in out, (saved, out[-3000:])


def test_a_gate_whose_laws_failed_names_them_before_coverage():
    """peer:liger-float64 on the H200: laws failed and a floor was not met, and the verdict read
    'FAILED on coverage', as if every test had passed."""
    from harness.commands.gate import describe_failed

    assert describe_failed(3, 0, ["1 law(s) checked too few cases"]) == \
        "3 test(s) failed; coverage too: 1 law(s) checked too few cases"
    assert describe_failed(0, 1, []) == "1 law(s) failed, stopped while shrinking"
    assert describe_failed(2, 1, []) == "2 test(s) failed; 1 law(s) failed, stopped while shrinking"


def test_the_reporting_process_takes_the_contract_its_workers_learned(monkeypatch, tmp_path):
    """Under -n, the controller reports what the workers tallied; it must not load the target again
    to learn the contract (a judge lane's gate once waited on such a load after its last test)."""
    from harness.judging.contract import Contract
    from harness.running import report, session
    from harness.running.tally import Tally

    declared = Contract.from_dict({"dtypes": ["float32"], "max_n": 4096}, "declared by a worker's target")
    t = Tally()
    t.contract = declared.to_json()
    (tmp_path / "tally-1-1.json").write_text(json.dumps(t.to_json()))
    monkeypatch.setenv("RMSNORM_TALLY_DIR", str(tmp_path))
    monkeypatch.delenv("RMSNORM_CONTRACT", raising=False)
    fresh = session.Session(TargetSpec("project"))
    monkeypatch.setattr(session, "_CURRENT", fresh)

    def no_worker():
        raise AssertionError("the reporting process started a worker to learn the contract")

    monkeypatch.setattr(fresh, "runner", no_worker)
    report.collect_tally()
    got = session.current().contract()
    assert got == declared and got.declared, got


def test_a_run_that_pytest_ends_with_an_internal_error_still_reports_what_it_checked(tmp_path):
    """pytest writes no summary after an INTERNALERROR: under SIGTERM, xdist's controller once raised one, and
    the gate ended with no report."""
    from tests._run import run

    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.torch_native",
                     "--corpus", str(tmp_path / "corpus"), "-n", "0", "--", "-p", "tests.internal_error_plugin"])
    assert code == 2, out[-3000:]
    assert "INTERNALERROR" in out and "internal_error_plugin: an error of pytest's own" in out, out[-3000:]
    report = out.split("the report from what the workers recorded:", 1)[1]
    assert "lane: CPU" in report and "law " in report and "rmsnorm gate SET-UP ERROR" in report, out[-3000:]


def test_a_forward_only_target_is_judged_through_autograd_of_its_forward(tmp_path):
    """A module without the card's backward whose y carries an autograd graph is trained through: its gradients
    are judged as autograd gives them. A wrong custom backward fails (it once passed, every backward law skipped
    as "target has no backward"); torch's own ops pass; a forward whose y carries no graph is still not judged."""
    bad = tgt.load(TargetSpec.parse("module:tests.targets.autograd_wrong_backward"), "cpu")
    good = tgt.load(TargetSpec.parse("module:tests.targets.torch_native"), "cpu")
    assert bad.has_backward and good.has_backward and not bad.own_backward
    assert "judged through autograd of its forward" in bad.note
    case = Case(shape=(4, 64), dtype="float32", weight_dtype="float32", seed=3)
    laws.run_law(good, "backward_matches_reference", case)
    laws.run_law(good, "gradcheck", Case(shape=(3, 16), dtype="float64", weight_dtype="float64", seed=3))
    with pytest.raises(LawFailure, match="grad_x"):
        laws.run_law(bad, "backward_matches_reference", case)
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.autograd_wrong_backward",
                     "--corpus", str(tmp_path), "--", "-k", "test_backward_matches_reference and not large and not tall"])
    assert code == 1 and "its gradients are judged through torch.autograd.grad of its forward" in out, out[-3000:]
    detached = types.ModuleType("detached")
    detached.forward = lambda x, w, eps: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).detach()
    assert not tgt.differentiable_forward(detached, torch.device("cpu"))
