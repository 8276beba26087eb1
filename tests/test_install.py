"""squall installed as users install it: a wheel built from this checkout, installed into a fresh virtualenv
outside the repository, runs a user's topology file with the installed ``squall run``.

Two builds: the compiled one (a C compiler and Cython at build time) and the pure-Python one
(``SQUALL_PURE_PYTHON=1``, what a machine without a compiler gets too).

How the test keeps offline and quick:

* The wheel is built with ``--no-build-isolation``: the build requirements (setuptools, Cython) come from the
  running interpreter's environment instead of being downloaded into a throwaway one. The build itself is the
  same ``pip wheel .`` users run.
* The fresh venv gets the wheel with ``--no-deps``, and its dependencies (pyspark, numpy, ...) through a ``.pth``
  file that appends the running environment's site-packages to its ``sys.path``: installing them would download
  about 500 MB. A ``.pth`` path line adds a directory without running that directory's own ``.pth`` files, so
  the development checkout's editable install of squall stays out; the fresh venv's site-packages comes first,
  and the test asserts that squall, on the driver and on Spark's workers, is the installed one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMPILED = {  # the modules setup.py compiles
    "squall/model/tuple",
    "squall/model/groupings",
    "squall/model/hashing",
    "squall/model/attempt",
    "squall/spark/collectors",
    "squall/spark/execution",
    "squall/spark/spouts",
    "squall/spark/load",
    "squall/connectors/kafka/spout",
    "squall/connectors/kafka/offsets",
    "squall/model/_keyhash",
    "squall/spark/_atomic",
    "squall/reliability/_xor_fold",
    "squall/reliability/_acker_merge",
}
PACKAGE_DATA = {
    "squall/ui/page.html",
    "squall/model/_keyhash.pyx",
    "squall/spark/_atomic.pyx",
    "squall/reliability/_xor_fold.pyx",
    "squall/reliability/_acker_merge.pyx",
    "squall/model/tuple.pxd",
    "squall/spark/collectors.pxd",
    "squall/spark/execution.pxd",
}
SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away", "four score and seven years ago"]
N = 150
PATHS = ("purelib", "platlib")

# A user's topology file, in a directory of its own: a spout of N sentences with msg ids, split, count.
TOPOLOGY = """
import json
import os
from pathlib import Path

import squall
from squall import BasicBolt, Spout, TopologyBuilder

SENTENCES = {sentences!r}
CONF = {{"topology.message.timeout.secs": 60}}


def where_squall_is(out: Path, name: str) -> None:
    import squall.model.tuple

    (out / name).write_text(json.dumps([squall.__file__, squall.model.tuple.__file__]))


class Sentences(Spout):
    outputs = ("sentence",)

    def __init__(self, out: str, n: int) -> None:
        self.out, self.n = Path(out), n

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0
        where_squall_is(self.out, "worker")

    def next_tuple(self):
        if self.next < self.n:
            self.collector.emit([SENTENCES[self.next % len(SENTENCES)]], msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        with open(self.out / "acked", "a") as f:
            f.write(f"{{msg_id}}\\n")

    def fail(self, msg_id):
        with open(self.out / "failed", "a") as f:
            f.write(f"{{msg_id}}\\n")


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


class Count(BasicBolt):
    outputs = ("word", "count")

    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def prepare(self, conf, context):
        self.counts, self.path = {{}}, self.out / f"counts-{{context.task_id}}.json"

    def execute(self, tup, collector):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.path.write_text(json.dumps(self.counts))
        collector.emit([word, self.counts[word]])


def build_topology(conf):
    out = conf["out.dir"]
    where_squall_is(Path(out), "driver")
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences(out, int(conf["out.sentences"])))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(out), 2).fields_grouping("split", ["word"])
    return b.build()
"""


def git_status() -> str | None:
    """The checkout's ``git status`` (untracked files included), or None outside a git checkout."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True, text=True
    ).stdout


def build_wheel(tmp_path: Path, env: dict[str, str]) -> tuple[Path, set[str], str]:
    """``pip wheel`` of the checkout: the wheel, the names in it, and what the build printed. The checkout's
    ``git status`` is the same after it."""
    status = git_status()
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-v", "-w", wheels],
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert git_status() == status  # the build's files (build/, *.egg-info, .c) are all ignored
    (wheel,) = wheels.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert names >= PACKAGE_DATA
    assert not any(name.endswith(".c") for name in names)
    return wheel, names, built.stdout + built.stderr


def extensions(names: set[str]) -> set[str]:
    return {name.split(".", 1)[0] for name in names if name.endswith(".so")}


def clean_env(**extra: str) -> dict[str, str]:
    # PYSPARK_PYTHON: this process's squall set it, once it started Spark; the user's run picks its own.
    dropped = ("PYTHONPATH", "SQUALL_PURE_PYTHON", "VIRTUAL_ENV", "CC", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **extra}


def test_without_a_c_compiler_the_build_is_pure_python(tmp_path):
    wheel, names, output = build_wheel(tmp_path, clean_env(CC="/nonexistent/cc"))
    assert "squall: WARNING: no C compiler (/nonexistent/cc not found); building pure Python (slower)" in output
    assert extensions(names) == set()
    assert wheel.name == "squall-0.1.0-py3-none-any.whl"


@pytest.mark.parametrize("build", ["compiled", "pure"])
def test_a_wheel_installed_in_a_fresh_venv_runs_a_users_topology(tmp_path, build):
    env = clean_env()
    wheel, names, output = build_wheel(tmp_path, clean_env(SQUALL_PURE_PYTHON="1") if build == "pure" else env)
    if build == "compiled":
        assert extensions(names) == COMPILED
        python_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        assert wheel.name.startswith(f"squall-0.1.0-{python_tag}-{python_tag}-")
    else:
        assert "squall: SQUALL_PURE_PYTHON is set: building pure Python (slower)" in output
        assert extensions(names) == set()
        assert wheel.name == "squall-0.1.0-py3-none-any.whl"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
        env=env,
        check=True,
    )
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    # the running environment's site-packages after the venv's own: squall's dependencies, not squall
    (site / "dependencies.pth").write_text(
        "".join(f"{path}\n" for path in dict.fromkeys(map(sysconfig.get_path, PATHS)))
    )

    project, out = tmp_path / "project", tmp_path / "out"
    project.mkdir()
    out.mkdir()
    (project / "word_count.py").write_text(TOPOLOGY.format(sentences=SENTENCES))
    conf = ["--conf", f"out.dir={out}", "--conf", f"out.sentences={N}"]
    run = subprocess.run(
        [venv / "bin" / "squall", "run", "word_count.py", "--no-ui", "--idle-secs", "2", "--master", "local[2]", *conf],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    acked = (out / "acked").read_text().split()
    assert sorted(map(int, acked)) == list(range(N))
    assert not (out / "failed").exists()
    counts = Counter()
    for part in out.glob("counts-*.json"):
        counts.update(read_json(part))
    expected = Counter(w for i in range(N) for w in SENTENCES[i % len(SENTENCES)].split())
    assert counts == expected
    for where in ("driver", "worker"):
        package, tuple_module = read_json(out / where)
        assert Path(package) == site / "squall" / "__init__.py"
        assert Path(tuple_module).parent == site / "squall" / "model"
        assert Path(tuple_module).suffix == (".so" if build == "compiled" else ".py")


def read_json(path: Path):
    return json.loads(path.read_text())
