"""harness.tools.bench and harness.tools.nsight off the GPU: the report's tables, ratios and plot from
results, the parsing of a real Nsight Compute CSV (recorded on the H200), and the set-up errors
both commands give on a machine without a GPU."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from harness.tools import bench, nsight as profile
from rmsnorm._buildenv import ROOT

DATA = ROOT / "tests" / "data"


def _results():
    R = bench.Result
    op = bench.OPERATORS
    return [
        R("project", "bfloat16", 4096, 16384, "forward", ms=0.1, gbps=3800.0),
        R("torch", "bfloat16", 4096, 16384, "forward", ms=0.12, gbps=3200.0),
        R("liger", "bfloat16", 4096, 16384, "forward", ms=0.1, gbps=3900.0),
        R("project", "bfloat16", 4096, 16384, "backward", ms=0.3, gbps=3300.0),
        R("torch", "bfloat16", 4096, 16384, "backward", error="grad_x max error 0.5 of the largest value"),
        R("liger", "bfloat16", 4096, 16384, "backward", ms=0.6, gbps=1650.0),
        R("liger", "bfloat16", 262144, 256, "forward", error="raised RuntimeError: n = 262144 exceeds 65536"),
        R("project", "bfloat16", 262144, 256, "forward", ms=0.2, gbps=2000.0),
        R("project", "bfloat16", 4096, 16384, "forward", ms=0.1, gbps=3900.0, path=op),
        R("project", "bfloat16", 4096, 16384, "backward", ms=0.3, gbps=3400.0, path=op),
        R("torch", "bfloat16", 4096, 16384, "backward", ms=0.3, gbps=1800.0, path=op),
        R("project", "bfloat16", 4096, 1, "decode", extra={"us": 2.16}),
        R("liger", "bfloat16", 4096, 1, "decode", extra={"us": 1.95}),
    ]


def test_markdown_has_both_paths_fractions_ratios_decode_and_what_was_not_timed():
    md = bench.markdown(_results(), 4200.0, "## test")
    users, operators = md.split("## Through the raw operators")
    assert "## Through the users' path" in users
    # 3800 / best peer 3900; 3800 / the project's own operator 3900
    assert "| 4096 | 3800 (0.90) | 3200 (0.76) | 3900 (0.93) | 0.97 | 0.97 |" in users
    # a wrong peer is not a best peer; 3300 through autograd / 3400 of the operator
    assert "| 4096 | 3300 (0.79) | wrong | 1650 (0.39) | 2.00 | 0.97 |" in users
    assert "| 262144 | 2000 (0.48) | - | fails | - | - |" in users  # no peer ran: no ratio
    assert "| 4096 | 3400 (0.81) | 1800 (0.43) | 1.89 |" in operators
    assert "| 1 x 4096 | 2.16 | 1.95 | 0.90 |" in operators.split("### decode")[1]
    assert "- torch bfloat16 N=4096 backward: grad_x max error 0.5" in md
    assert "- liger bfloat16 N=262144 forward: raised RuntimeError" in md
    assert "Peers not run" not in md
    quiet = bench.markdown(_results(), 4200.0, "## test", ["quack: quack is not installed (No module named 'quack')"])
    assert "Peers not run: quack: quack is not installed (No module named 'quack')." in quiet


def test_the_check_rejects_an_unwritten_element_however_large_the_tensor():
    ref = torch.randn(256, 4096, dtype=torch.float64)
    got = ref.clone().float()
    assert bench._max_err(got, ref) < 1e-6
    got[-1, -1] = 0.0 if ref[-1, -1].abs() > 0.5 else 7.0  # one element in a million
    assert bench._max_err(got, ref) > 1e-2
    got[0, 0] = float("nan")
    assert bench._max_err(got, ref) == float("inf")


def test_plot_draws_one_panel_per_dtype_and_direction(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in requirements.txt; the CPU lane has it")
    line = bench.plot(_results(), 4200.0, tmp_path / "bench.png")
    assert line == f"plot: {tmp_path / 'bench.png'}"
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_saved_json_reloads_and_replots(tmp_path):
    md_path, _ = bench.save(_results(), 4200.0, {"device": "test", "commit": "abc"}, tmp_path)
    results, ceiling, meta = bench.load_json(tmp_path / "bench.json")
    assert ceiling == 4200.0 and meta["commit"] == "abc" and len(results) == len(_results())
    assert "commit abc" in md_path.read_text()


def test_a_run_stopped_by_an_interrupt_keeps_the_steps_that_finished(monkeypatch, tmp_path):
    # What a deadline's SIGTERM or Ctrl-C does mid-run (the command line turns SIGTERM into the same
    # KeyboardInterrupt): the finished steps come back with a line that says where the run stopped, and the
    # saved report says first that it is not complete.
    finished = _results()[:4]

    def two_steps_then_interrupted(impls, users, dtypes, ns, elements, decode, directions, results, prog):
        for r in finished:
            prog.step(f"{r.dtype} {r.m}x{r.n} {r.impl} ({r.path})")
            results.append(r)
        prog.step("bfloat16 256x262144 project (users)")
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "copy_ceiling_gbps", lambda: 4200.0)
    monkeypatch.setattr(bench, "_run_steps", two_steps_then_interrupted)
    impls = [SimpleNamespace(name=name, path=bench.USERS) for name in ("project", "torch", "liger")]
    results, ceiling, stopped = bench.run(impls, ["bfloat16"], [4096, 262144], 2 ** 26, decode=False)
    assert results == finished and ceiling == 4200.0
    assert stopped == ("stopped by an interrupt in step 5 of 6 (bfloat16 256x262144 project (users)); "
                       "the tables hold the 4 timings that finished before it"), stopped
    md_path, _ = bench.save(results, ceiling, {"commit": "abc", "stopped": stopped}, tmp_path)
    md = md_path.read_text()
    assert md.index("**Not complete:** stopped by an interrupt in step 5") < md.index("## Through the users' path")
    assert "3800 (0.90)" in md
    assert "Not complete" not in bench.markdown(results, ceiling, "## whole run")


def test_profile_summary_of_a_recorded_ncu_run():
    rows = profile.parse((DATA / "ncu-rows-16384x4096-bf16.csv").read_text())
    names = [profile.short_name(r["Kernel Name"]) for r in rows]
    assert names == ["fwd_kernel<bf16,bf16,4,0>", "bwd_kernel<bf16,bf16,2,0>", "dw_reduce_kernel<bf16>"]
    text = profile.summarize(rows, 16384, 4096, 2, "both")
    first = text.splitlines()[1]
    assert first.split()[1] == "62.7"  # microseconds (ncu reports ns)
    assert "long_scoreboard" in first
    assert text.splitlines()[-1].startswith("total 180.4 us over 3 kernel(s); the least the steps must move: 671.1 MB")


def test_profile_summary_says_where_a_cluster_grid_ran():
    # Nsight Compute's figures for the bfloat16 256 x 262144 staged forward (clusters of 16) on the H200, as its
    # --csv --page raw output puts them: a header, the units, one row a kernel.
    cols = {"Kernel Name": ("", "void rmsnorm::rows::fwd_staged_kernel<__nv_bfloat16, __nv_bfloat16, 8, 1, 256>(int)"),
            "gpu__time_duration.sum": ("us", "70.85"), "dram__bytes_read.sum": ("Mbyte", "134.79"),
            "dram__bytes_write.sum": ("Mbyte", "109.31"), "launch__cluster_size": ("", "16"),
            "launch__cluster_max_active": ("cluster", "35"), "launch__grid_size": ("", "4,096"),
            "sm__cycles_active.avg": ("cycle", "115,879.17"), "sm__cycles_elapsed.max": ("cycle", "139,100"),
            "sm__ctas_launched.min": ("block", "0"), "sm__ctas_launched.max": ("block", "40")}
    text = "\n".join(",".join(f'"{v}"' for v in row) for row in
                     (list(cols), [u for u, _ in cols.values()], [v for _, v in cols.values()]))
    rows = profile.parse(text)
    line = profile.summarize(rows, 256, 262144, 2, "forward").splitlines()[1]
    # one field a column ('-' where ncu gave nothing), the stalls last: grid, cluster, at once, SM act%, CTAs/SM
    assert line.split()[0] == "fwd_staged_kernel<bf16,bf16,8,1,256>" and line.split()[1] == "70.8", line
    assert line.split()[8:13] == ["4096", "16", "35", "83.3", "0-40"], line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("cmd", (["bench", "--n", "4096"], ["profile"]))
def test_without_a_gpu_both_commands_say_so_and_exit_2(cmd):
    p = subprocess.run([sys.executable, "-m", "harness", *cmd], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "set-up error" in p.stderr and "sees none here" in p.stderr


def test_bad_arguments_are_named():
    p = subprocess.run([sys.executable, "-m", "harness", "bench", "--dtypes", "float8"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "--dtypes: expected values from bfloat16, float16, float32, but got 'float8'" in p.stderr or \
        "sees none here" in p.stderr  # without a GPU the set-up error comes first
