"""Installed the way Python tools are: `pip install <clone>` into a fresh virtual environment, then,
from a folder outside the clone, the console command judges an example extension, the README's
snippets run as script files, and a kernel repository of its own runs the laws through its own
pytest with the plugin. The environment sees the system's packages (torch is several GB); the
wheel is built from the clone as pip builds it."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests._run import ROOT, sharing_env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    outside = base / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMSNORM_", "PYTEST_", "PYTHONPATH"))}
    env.update(XDG_CACHE_HOME=str(base / "cache"), TORCH_EXTENSIONS_DIR=str(base / "torch_extensions"),
               RMSNORM_BUILD="cpu", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    env.update(sharing_env())
    return venv, outside, env


@pytest.fixture(scope="module")
def kernel_repo(tmp_path_factory):
    """A kernel repository of its own: the example extension as its csrc/, and a test of its own.
    The console command judges the same csrc/ as the repository's pytest, so the installed copy
    builds the example once (the build folder is keyed by the sources, ninja by their paths)."""
    repo = tmp_path_factory.mktemp("my-kernels")
    shutil.copytree(ROOT / "examples" / "float32_only", repo / "csrc")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_mine.py").write_text("def test_my_own():\n    assert 1 + 1 == 2\n")
    return repo


def _run(cmd, cwd, env, timeout=1800):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.slow("the installed copy builds the example in its own cache (the kernel repository's test "
                  "reuses that build), then judges it (270 s with the install, beside the mutation score)")
def test_the_console_command_judges_an_extension_from_outside_the_clone(installed, kernel_repo):
    # A law of the forward and one of the backward, through the installed command: the same example's
    # whole gate under the same contract is tests/test_report.py's, from the clone, and the kernel
    # repository's test below runs every law on this build through its own pytest.
    venv, outside, env = installed
    code, out = _run([str(venv / "bin" / "rmsnorm-gate"), "gate", "--target", str(kernel_repo / "csrc"),
                      "--dtypes", "float32", "--", "-k", "(test_forward_matches_reference or "
                      "test_backward_matches_reference) and not large and not tall"], outside, env)
    assert code == 0, out[-4000:]
    assert out.strip().splitlines()[-1].startswith("rmsnorm gate PASSED"), out[-2000:]
    assert "contract (command line): dtypes float32" in out, out[-2000:]


@pytest.mark.slow("the installed copy builds the extension (40 s)")
def test_the_readme_snippets_run_as_script_files(installed):
    """The README's snippets, as a user pastes them into a file outside the clone. The card route's snippet
    builds from the clone's sources.txt: tests/test_readme.py runs it there."""
    venv, outside, env = installed
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2, "the README's usage and variants snippets"
    for i, block in enumerate(blocks):
        script = outside / f"snippet_{i}.py"
        script.write_text(block)
        code, out = _run([str(venv / "bin" / "python"), str(script)], outside, env)
        assert code == 0, f"README snippet {i}:\n{block}\n{out[-4000:]}"
    assert "variants: ok" in out


@pytest.mark.slow("every law through the repository's own pytest, then a failing law shrunk (66 s)")
def test_a_kernel_repository_runs_the_laws_through_its_own_pytest(installed, kernel_repo):
    venv, _, env = installed
    repo = kernel_repo
    (repo / "wrong_tail.py").write_text(textwrap.dedent('''
        """An RMSNorm whose last column is zero when N % 8 == 7."""
        import torch

        def forward(x, weight, eps):
            inv = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
            y = (x.double() * inv * weight.double()).to(x.dtype)
            if x.shape[-1] % 8 == 7:
                y[..., -1] = 0
            return y
        '''))
    env = dict(env, RMSNORM_CONTRACT='{"dtypes": ["float32"]}')
    pytest_cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider"]
    code, out = _run(pytest_cmd + ["-v", "--rmsnorm-target=csrc", "--rmsnorm-device=cpu"], repo, env)
    assert code == 0, out[-4000:]
    assert "tests/test_mine.py::test_my_own PASSED" in out, out[-4000:]  # its own tests, and the laws
    assert "test_forward_matches_reference PASSED" in out and "rmsnorm gate" in out, out[-4000:]
    # Derandomized: in the default (dev) profile's 20 random cases, 2 runs in 20 drew no N % 8 == 7.
    code, out = _run(pytest_cmd + ["-q", "--rmsnorm-target=module:wrong_tail", "--rmsnorm-device=cpu",
                                   "--hypothesis-profile=ci", "-k",
                                   "test_forward_matches_reference and not reference_large and not reference_tall"],
                     repo, dict(env, PYTHONPATH=str(repo)))
    assert code == 1, out[-4000:]
    assert "forward_matches_reference" in out and "replay:" in out, out[-3000:]
    assert list((repo / "corpus").rglob("*.json")), "the failing case is saved in the repository's corpus"


def test_the_console_command_names_itself_its_version_and_takes_a_module_beside_the_user(installed, tmp_path):
    """Installed, it once named the commit of whatever repository site-packages sat in, said
    `python3 -m harness` in its help and replay lines, needed PYTHONPATH=. for a module beside the
    user, and printed another installed plugin's warnings into the gate."""
    venv, _, env = installed
    gate = str(venv / "bin" / "rmsnorm-gate")
    code, out = _run([gate, "--help"], tmp_path, env)
    assert code == 0 and out.startswith("usage: rmsnorm-gate"), out[:500]
    (tmp_path / "mine_wrong.py").write_text(textwrap.dedent('''
        import torch

        def forward(x, weight, eps):
            inv = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
            return (x.double() * inv * weight.double() * 1.01).to(x.dtype)
        '''))
    code, out = _run([gate, "gate", "--device", "cpu", "--target", "module:mine_wrong", "--corpus", str(tmp_path / "c"),
                      "--", "-k", "test_forward_matches_reference and not large and not tall"], tmp_path, env)
    assert code == 1, out[-3000:]
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"target module:mine_wrong, rmsnorm-gate {version} (installed)" in out, out[-2000:]
    assert "replay: rmsnorm-gate replay " in out and "python3 -m harness" not in out, out[-3000:]
    assert "PytestBenchmarkWarning" not in out, out[-3000:]  # a plugin the gate does not need
