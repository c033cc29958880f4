"""scripts/setup.sh decides what to install from what is present; these tests run the
real script against stub commands (dpkg-query, id, sudo, apt-get, python) on a
PATH that holds nothing else, so nothing is installed and no root is needed."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"
REAL_TOOLS = ["bash", "sed", "awk", "tr", "dirname", "cat", "env", "mkdir", "cp", "chmod"]

# Every Debian package setup.sh can ask for, as `--list ci` prints them.
ALL_APT = subprocess.run(["bash", str(SETUP), "--list", "ci", "pylib"], capture_output=True, text=True,
                         check=True).stdout.splitlines()[0].removeprefix("debian: ").split()

STUB_DPKG = """#!/bin/bash
# dpkg-query -W -f=FMT PKG...: one line per installed package named in $FAKE_INSTALLED.
shift 2
for p in "$@"; do
  case " $FAKE_INSTALLED " in *" $p "*) echo "$p ii" ;; esac
done
"""
STUB_ID = '#!/bin/bash\necho "$FAKE_UID"\n'
STUB_SUDO = """#!/bin/bash
[ "$FAKE_SUDO_OK" = 1 ] || exit 1
[ "$1" = -n ] && shift
[ "$1" = true ] && exit 0
echo "sudo $*" >>"$FAKE_LOG"
"""
STUB_APT = '#!/bin/bash\necho "apt-get $*" >>"$FAKE_LOG"\n'
# A Python interpreter: answers setup.sh's probe from FAKE_PY_* and logs the rest.
STUB_PY = r"""#!/bin/bash
if [ "$1" = - ]; then
  shift
  missing=""
  for m in "$@"; do case " $FAKE_PY_MISSING " in *" $m "*) missing="$missing $m" ;; esac; done
  echo "missing=${missing# }"
  echo "managed=$FAKE_PY_MANAGED"
  echo "pip=$FAKE_PY_PIP"
  echo "headers=$FAKE_PY_HEADERS"
  echo "system=$FAKE_PY_SYSTEM"
  echo "version=3.11"
  exit 0
fi
echo "python $*" >>"$FAKE_LOG"
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$4/bin" && cp "$0" "$4/bin/python" && chmod +x "$4/bin/python"; fi
"""


def _write(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def sandbox(tmp_path):
    """A PATH with the stubs and a few real tools, and a project root without a model."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in REAL_TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    _write(bin_dir / "dpkg-query", STUB_DPKG)
    _write(bin_dir / "id", STUB_ID)
    _write(bin_dir / "sudo", STUB_SUDO)
    _write(bin_dir / "apt-get", STUB_APT)
    _write(bin_dir / "python3", STUB_PY)
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    return tmp_path


def run(sandbox, *args, installed=ALL_APT, uid=0, sudo_ok=False, python=True, model=True, extra_env=None, **py):
    """Runs setup.sh; returns (exit status, stdout, stderr, log of stubbed commands)."""
    bin_dir, project, log = sandbox / "bin", sandbox / "project", sandbox / "log"
    if not python:
        (bin_dir / "python3").unlink(missing_ok=True)
    model_file = sandbox / ".cache" / "kvshare" / "gemma-3-270m-q4_k_m.gguf"  # HOME is the sandbox
    if model:
        model_file.parent.mkdir(parents=True, exist_ok=True)
        model_file.touch()
    env = {
        "PATH": str(bin_dir), "HOME": str(sandbox), "KVSHARE_SETUP_ROOT": str(project),
        "FAKE_INSTALLED": " ".join(installed), "FAKE_UID": str(uid), "FAKE_SUDO_OK": "1" if sudo_ok else "0",
        "FAKE_LOG": str(log),
        "FAKE_PY_MISSING": py.get("missing", ""), "FAKE_PY_MANAGED": py.get("managed", "0"),
        "FAKE_PY_PIP": py.get("pip", "1"), "FAKE_PY_HEADERS": py.get("headers", "1"),
        "FAKE_PY_SYSTEM": py.get("system", "0"),
        **(extra_env or {}),
    }
    res = subprocess.run([shutil.which("bash"), str(SETUP), *args], env=env, capture_output=True, text=True)
    return res.returncode, res.stdout, res.stderr, log.read_text() if log.exists() else ""


def without(*pkgs):
    return [p for p in ALL_APT if p not in pkgs]


def test_everything_present_plans_nothing_and_is_silent(sandbox):
    assert run(sandbox, "--plan", "ci")[:2] == (0, "")
    rc, out, err, log = run(sandbox, "ci")
    assert (rc, out, err) == (0, "", "")
    assert log == f"python {sandbox}/project/scripts/fetch_model.py --quiet\n"  # only the model check


def test_missing_packages_as_root_are_installed_with_apt_get(sandbox):
    installed = without("libhwy-dev", "libcli11-dev")
    assert run(sandbox, "--plan", "build", installed=installed)[1] == "apt (root): libhwy-dev libcli11-dev\n"
    rc, _, err, log = run(sandbox, "build", installed=installed)
    assert rc == 0
    assert log.splitlines() == ["apt-get update -qq",
                                "apt-get install -y -qq --no-install-recommends libhwy-dev libcli11-dev"]
    assert "installing Debian packages: libhwy-dev libcli11-dev" in err


def test_missing_packages_through_passwordless_sudo(sandbox):
    installed = without("libgtest-dev")
    assert run(sandbox, "--plan", "build", installed=installed, uid=1000, sudo_ok=True)[1] == \
        "apt (sudo): libgtest-dev\n"
    rc, _, _, log = run(sandbox, "build", installed=installed, uid=1000, sudo_ok=True)
    assert rc == 0
    assert "sudo apt-get install -y -qq --no-install-recommends libgtest-dev" in log


def test_without_root_or_sudo_it_stops_with_the_exact_apt_line(sandbox):
    installed = without("cmake", "libbenchmark-dev")
    assert run(sandbox, "--plan", "build", installed=installed, uid=1000)[1] == "apt (none): cmake libbenchmark-dev\n"
    rc, _, err, log = run(sandbox, "build", installed=installed, uid=1000)
    assert rc == 1 and log == ""
    assert "    sudo apt-get install -y --no-install-recommends cmake libbenchmark-dev\n" in err


def test_check_mode_lists_what_is_missing_and_installs_nothing(sandbox):
    rc, _, err, log = run(sandbox, "--check", "build", installed=without("g++"))
    assert rc == 1 and log == ""
    assert "missing Debian packages: g++" in err
    assert "sudo apt-get install -y --no-install-recommends g++" in err
    assert run(sandbox, "--check", "build")[0] == 0


def test_groups_ask_for_their_own_packages_only(sandbox):
    out = run(sandbox, "--plan", "pylib", installed=[])[1]
    assert out == ("apt (root): g++ libhwy-dev libsentencepiece-dev libstb-dev libwebp-dev libjpeg-dev libdnnl-dev "
                   "ocl-icd-opencl-dev libsndfile1-dev libsoxr-dev libfftw3-dev\n")
    out = run(sandbox, "--plan", "ci", installed=without("clang", "libgtest-dev"))[1]
    assert out == "apt (root): libgtest-dev clang\n"
    # The server's build and test packages come with build / tests, not with pylib.
    out = run(sandbox, "--plan", "tests", installed=without("libcpp-httplib-dev", "chromium", "nginx"))[1]
    assert out == "apt (root): libcpp-httplib-dev chromium nginx\n"
    assert run(sandbox, "--plan", "build", installed=without("chromium"))[1] == ""


def test_python_modules_go_into_an_unmanaged_python(sandbox):
    rc, out, _, _ = run(sandbox, "--plan", "--print-python", "tests", missing="numpy gguf")
    assert out == "pip (python3): numpy gguf\npython: python3\n"
    rc, out, _, log = run(sandbox, "--print-python", "tests", missing="numpy gguf")
    assert rc == 0 and out == "python3\n"
    assert "python -m pip install -q --disable-pip-version-check --root-user-action=ignore numpy gguf" in log


def test_debian_python_gets_a_project_venv(sandbox):
    venv = sandbox / "project" / ".venv"
    args = dict(missing="pytest", managed="1", system="1", installed=ALL_APT)
    out = run(sandbox, "--plan", "--print-python", "tests", **args)[1]
    assert out == (f"apt (root): python3.11-venv\nvenv: {venv} (--system-site-packages)\n"
                   f"pip ({venv}/bin/python): pytest\npython: {venv}/bin/python\n")
    rc, out, _, log = run(sandbox, "--print-python", "tests", **args)
    assert rc == 0 and out == f"{venv}/bin/python\n"
    assert f"python -m venv --system-site-packages {venv}" in log
    assert "python -m pip install" in log
    # A later run finds the venv and uses it.
    assert run(sandbox, "--plan", "--print-python", "tests")[1] == f"python: {venv}/bin/python\n"


def test_no_python_at_all_brings_debian_python_and_a_venv(sandbox):
    out = run(sandbox, "--plan", "tests", python=False)[1]
    venv = sandbox / "project" / ".venv"
    assert out == (f"apt (root): python3 python3-venv\nvenv: {venv} (--system-site-packages)\n"
                   f"pip ({venv}/bin/python): numpy pytest gguf openai jsonschema jinja2\n")


def test_the_model_needs_a_python_with_pip(sandbox):
    # Debian's python3 without pip: the model fetch (pip install --target) needs a venv.
    out = run(sandbox, "--plan", "run", model=False, pip="0", managed="1", system="1")[1]
    venv = sandbox / "project" / ".venv"
    assert out == (f"apt (root): python3.11-venv\nvenv: {venv} (--system-site-packages)\n"
                   f"model: {sandbox}/.cache/kvshare/gemma-3-270m-q4_k_m.gguf\n")
    rc, _, err, _ = run(sandbox, "run", pip="0", managed="0")
    assert rc == 1 and "has no pip" in err


def test_python_headers_for_pip_install(sandbox):
    assert run(sandbox, "--plan", "pylib", headers="0", system="1")[1] == "apt (root): python3.11-dev\n"
    rc, _, err, _ = run(sandbox, "pylib", headers="0", system="0")
    assert rc == 1 and "Python.h is missing" in err


def test_not_debian_checks_no_packages(sandbox):
    (sandbox / "bin" / "dpkg-query").unlink()
    assert run(sandbox, "--plan", "build", installed=[])[:2] == (0, "")


def test_usage_errors(sandbox):
    assert run(sandbox, "bogus")[0] == 2
    assert run(sandbox)[0] == 2


def test_list_prints_the_one_list():
    out = subprocess.run(["bash", str(SETUP), "--list", "tests"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("debian: g++ cmake ninja-build libhwy-dev")
    assert "python: numpy pytest gguf openai jsonschema jinja2\n" in out


@pytest.mark.parametrize("env,where", [
    ({"KVSHARE_MODEL_DIR": "/srv/models"}, "/srv/models"),
    ({"KVSHARE_MODEL_DIR": "/srv/models", "XDG_CACHE_HOME": "/xdg"}, "/srv/models"),
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/kvshare"),
    ({"XDG_CACHE_HOME": "relative"}, "HOME/.cache/kvshare"),  # the XDG spec ignores relative paths
])
def test_the_model_directory_follows_the_environment(sandbox, env, where):
    where = where.replace("HOME", str(sandbox))
    out = run(sandbox, "--plan", "run", model=False, extra_env=env)[1]
    assert out == f"model: {where}/gemma-3-270m-q4_k_m.gguf\n"
