"""``replay``: one saved case run again on its target, with its diagnosis."""

from __future__ import annotations

from harness.judging.refusals import Inference
from harness.running import corpus
from harness.running.loading import default_device
from harness.running.session import ALONE, REFUSED
from harness.running.spec import TargetSpec
from harness.running.worker import Runner, lane_of


def subcommand(args) -> int:
    path = corpus.resolve(args.case)
    entry = corpus.load_entry(path)
    try:
        spec = TargetSpec.parse(args.target or (entry.target or {}).get("spec"))
    except ValueError as e:
        print(f"rmsnorm: the saved target is gone ({e}); replaying on this project's extension instead")
        spec = TargetSpec("project")
    device = args.device or default_device()
    print(f"case {path.name}: law {entry.law}")
    print(f"  {entry.case.short()}")
    if entry.error:
        first = entry.error.splitlines()[0]
        print(f"  saved error: {first}")
    print(f"replaying on target {spec}, lane {lane_of(device)} ...")
    r = Runner(spec, device, strict=False if args.lenient else None)
    r.start()
    try:
        v = r.check(entry.law, entry.case)
        if v.status == "rejected" and REFUSED in (entry.error or ""):
            # The saved failure is a refusal that no class of inputs explained: judged again, by asking
            # the target about the cases around it (harness.judging.refusals).
            def ask(law, case):
                verdict = r.check(law, case)
                return verdict.status, verdict.message

            finding = Inference(has_backward=bool(r.info.get("has_backward"))).judge(entry.law, entry.case,
                                                                                     v.message, ask)
            if not finding.explained_by:
                v = type(v)("crash", f"{REFUSED}: {v.message.splitlines()[0]}\n  {finding.message}", v.facts)
    finally:
        r.stop()
    if v.status == "no_room":
        print(f"NOT RUN: the case needs more GPU memory than this GPU has free ({v.message.splitlines()[0]}); "
              "replay it on a GPU with more free memory")
        return 2
    if v.status in ("pass", "rejected", "not_applicable"):
        what = {"pass": "passes now", "rejected": "is rejected by the target (allowed)",
                "not_applicable": f"does not apply here ({v.message})"}[v.status]
        print(f"NOT REPRODUCED: the case {what}.")
        alone = next((line.strip() for line in (entry.error or "").splitlines() if line.strip().startswith(ALONE)),
                     None)
        if alone:  # the run that saved it ran it alone too, and said what that means
            print(f"  as the run that saved it found: {alone}")
        return 0
    print(f"REPRODUCED [{v.status}]:\n{v.message}")
    return 1
