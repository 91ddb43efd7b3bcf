"""benchmarks/pending/: a kernel change prepared without a GPU stays a patch that applies to the kernels on main,
so the call that measures it (run-placement.sh) can run on any later commit. A change to kernels/ that breaks it
must rebase the patch or retire the folder (README's Known problems says what it holds)."""

import shutil
import subprocess

import pytest

from harness.build import ROOT

PATCH = ROOT / "benchmarks" / "pending" / "placement.patch"


@pytest.mark.skipif(not PATCH.exists(), reason="nothing pending")
def test_the_pending_patch_applies_to_the_kernels_on_main():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    files = sorted({line[len("+++ b/"):] for line in PATCH.read_text().splitlines() if line.startswith("+++ b/")})
    assert files and all(f.startswith(("kernels/", "tests/")) for f in files), files
    # From the repository's root, against the working tree (git apply skips paths outside the directory it runs in).
    p = subprocess.run(["git", "apply", "--check", "-v", str(PATCH)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, f"benchmarks/pending/placement.patch no longer applies:\n{p.stderr[-2000:]}"
    assert "Skipped" not in p.stderr, p.stderr[-2000:]
    assert all(f"Checking patch {f}..." in p.stderr for f in files), p.stderr[-2000:]
