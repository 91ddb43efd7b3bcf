"""The C++ toolchain probe: does an extension built here raise a TORCH_CHECK whose message holds a
number, or does it crash?

On some machines an extension built by ``cpp_extension.load`` with the system compiler dies
(SIGSEGV) as soon as it formats an integer or a double into a C++ stream, while messages
without numbers raise as they should; a torch wheel built with another libstdc++ than the
system compiler's is the suspect (a crash in std::ostream's number formatting, as in
pytorch/pytorch#109923). A target that checks its inputs properly then "crashes" on every bad
input, through no fault of its own. So before judging anything it builds, the gate builds a
probe of a few lines with the same compiler and flags, calls it in a child process, and:
  - says in the lane header and the summary whether the toolchain is sound;
  - when it is not, tries the link and compile variants below and applies the first that makes
    the probe raise to every build it makes (recorded, so builds are keyed by it);
  - when none does, labels every crash inside a bad-input call as this machine's toolchain
    fault as well as a failure.
The verdict is cached per compiler, torch and Python in the build folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
import torch
from rmsnorm._buildenv import build_root
from rmsnorm._buildenv import clear_stale_torch_lock
from rmsnorm._buildenv import file_lock, prepare_cuda_home
import signal

PROBE_SOURCE = textwrap.dedent("""\
    // The toolchain probe: a TORCH_CHECK whose message holds an integer and a double must raise.
    #include <c10/util/Exception.h>
    #include <pybind11/pybind11.h>

    void check_number(int64_t n, double v) {
      TORCH_CHECK(n < 0, "probe: expected a negative number, but got ", n, " and ", v);
    }

    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("check_number", &check_number); }
    """)

# (what it is, extra C++ compiler flags, extra linker flags), tried in this order when the
# toolchain as torch configures it crashes. The second and third give the extension its own
# copy of libstdc++, bound inside it, so its streams cannot mix with another copy's.
VARIANTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("as torch configures it", (), ()),
    ("libstdc++ linked statically, its symbols kept local", (), ("-static-libstdc++", "-Wl,--exclude-libs,ALL")),
    ("libstdc++ linked statically", (), ("-static-libstdc++",)),
    ("symbols bound inside the extension", (), ("-Wl,-Bsymbolic",)),
)


@dataclass
class Verdict:
    sound: bool  # the probe raised as it should with the variant applied
    variant: str  # which variant (the first that raised), or the default's when none did
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    compiler: str
    default_failure: str  # how the default variant failed ("" when it raised)
    tried: tuple[str, ...]  # "variant: outcome" for each variant tried

    def line(self) -> str:
        if self.sound and not self.default_failure:
            return f"toolchain: sound ({self.compiler}: a TORCH_CHECK with a number raises)"
        if self.sound:
            return (f"toolchain: FAULT worked around ({self.compiler}: an extension built as torch configures "
                    f"it {self.default_failure} formatting a number in a TORCH_CHECK message; every build here "
                    f"uses {' '.join(self.cflags + self.ldflags)} ({self.variant}), with which it raises)")
        return (f"toolchain: FAULT ({self.compiler}: an extension built here {self.default_failure} formatting a "
                f"number in a TORCH_CHECK message, with every variant tried); a crash inside a bad-input call is "
                f"this machine's toolchain fault as well as a failure")


def _compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out else cxx
    except (OSError, subprocess.TimeoutExpired):
        return cxx


@functools.lru_cache(maxsize=None)
def _cache_path() -> Path:
    key = hashlib.sha256(repr((_compiler(), shutil.which(os.environ.get("CXX", "c++")), torch.__version__,
                               sys.version, PROBE_SOURCE, VARIANTS)).encode()).hexdigest()[:16]
    return build_root() / f"toolchain-{key}.json"


def cached() -> Verdict | None:
    """The verdict recorded for this compiler, torch and Python, or None when not probed yet."""
    p = _cache_path()
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    for k in ("cflags", "ldflags", "tried"):
        d[k] = tuple(d[k])
    return Verdict(**d)


def fix_flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(extra C++ flags, extra linker flags) every build applies: those of the recorded verdict."""
    v = cached()
    return (v.cflags, v.ldflags) if v is not None else ((), ())


def faulty() -> bool:
    v = cached()
    return v is not None and not v.sound


_CHILD = textwrap.dedent("""\
    import sys
    from torch.utils import cpp_extension
    name, src, build_dir, cflags, ldflags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    mod = cpp_extension.load(name=name, sources=[src], build_directory=build_dir, verbose=False,
                             extra_cflags=["-O3"] + cflags.split(), extra_ldflags=ldflags.split())
    print("BUILT", flush=True)
    try:
        mod.check_number(7, 0.5)
    except RuntimeError as e:
        ok = "got 7 and 0.5" in str(e)
        print("RAISED" if ok else "WRONG MESSAGE: " + str(e).splitlines()[0], flush=True)
    else:
        print("DID NOT RAISE", flush=True)
    """)


def _try(variant: int, root: Path) -> tuple[bool, str]:
    desc, cflags, ldflags = VARIANTS[variant]
    d = root / f"v{variant}"
    d.mkdir(parents=True, exist_ok=True)
    clear_stale_torch_lock(d, lambda s: None)  # a probe ended inside its load (toolchain.lock is held)
    src = d / "toolchain_probe.cpp"
    src.write_text(PROBE_SOURCE)
    name = f"rmsnorm_toolchain_probe_v{variant}"
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, name, str(src), str(d), " ".join(cflags), " ".join(ldflags)],
                           capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return False, "did not finish in 900 s"
    out = p.stdout
    if "RAISED" in out:
        return True, "raised"
    if "BUILT" not in out:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"did not build ({tail[:200]})"
    if p.returncode < 0:
        try:
            sig = signal.Signals(-p.returncode).name
        except ValueError:
            sig = f"signal {-p.returncode}"
        return False, f"dies with {sig} (signal {-p.returncode})"
    last = [line for line in out.splitlines() if line.strip()][-1]
    return False, last.lower()


def probe(*, say=None) -> Verdict:
    """Probe (or recall) the toolchain; record and return the verdict."""
    v = cached()
    if v is not None:
        return v
    say = say or (lambda s: print(s, file=sys.stderr, flush=True))

    prepare_cuda_home()
    root = build_root() / "toolchain-probe"
    with file_lock(build_root() / "toolchain.lock"):
        v = cached()  # another process may have probed while we waited
        if v is not None:
            return v
        say("rmsnorm: probing the C++ toolchain (a TORCH_CHECK with a number must raise) ...")
        tried, first_failure = [], ""
        chosen = None
        for i, (desc, cflags, ldflags) in enumerate(VARIANTS):
            ok, how = _try(i, root)
            tried.append(f"{desc}: {how}")
            if ok:
                chosen = (desc, cflags, ldflags)
                break
            if i == 0:
                first_failure = how
                if how.startswith("did not build"):
                    break  # not the crash this probe is for: a broken build shows in the build itself
        desc, cflags, ldflags = chosen or (VARIANTS[0][0], (), ())
        v = Verdict(sound=chosen is not None, variant=desc, cflags=tuple(cflags), ldflags=tuple(ldflags),
                    compiler=_compiler(), default_failure=first_failure, tried=tuple(tried))
        if first_failure.startswith("did not build"):
            raise RuntimeError(f"the C++ toolchain cannot build an extension here: {first_failure}")
        path = _cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(v)))
        os.replace(tmp, path)
    return v


def main() -> int:
    """python -m harness toolchain: probe afresh and print what was found."""
    p = _cache_path()
    p.unlink(missing_ok=True)
    v = probe()
    print(v.line())
    for t in v.tried:
        print(f"  {t}")
    return 0 if v.sound else 1
