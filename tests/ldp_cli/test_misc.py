"""The small commands and pieces of the CLI: audit, bench, tables, keys, progress."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

from ldp_cli.keys import load_keys, load_or_create_keys
from ldp_cli.main import build_parser
from ldp_cli.progress import Progress
from ldp_cli.table import format_estimate, format_series
from ldp_core.registry import classes
from tests.support.servers import REPO_ROOT


def ldp(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_audit_prints_the_table_and_exits_zero() -> None:
    done = ldp("audit", "--epsilons", "1", "--trials", "20000", "--seed", "3")
    assert done.returncode == 0, done.stderr
    # One audit per registered class (one- and two-level) at the one epsilon.
    assert f"{len(classes())} audits, 0 violations" in done.stdout
    assert "null control" in done.stdout and "oue d=8" in done.stdout


def test_bench_runs_the_benchmarks_or_says_why(tmp_path: Path) -> None:
    if (REPO_ROOT / "benchmarks" / "run_all.py").exists():
        done = ldp("bench", "--", "--help", cwd=tmp_path)  # arguments pass through
        assert done.returncode == 0, done.stderr
        assert "benchmarks" in done.stdout and "--quick" in done.stdout
        return
    done = ldp("bench", cwd=tmp_path)
    assert done.returncode == 2 and "no benchmarks/run_all.py found" in done.stderr


def test_parser_has_every_command() -> None:
    parser = build_parser()
    for argv in (
        ["up"],
        ["demo"],
        ["metric", "list"],
        ["estimate", "x"],
        ["plot", "x", "-o", "x.png"],
        ["audit"],
        ["bench"],
    ):
        assert parser.parse_args(argv).handler
    demo = parser.parse_args(["demo"])
    assert demo.devices == 5_000 and demo.collector_port == 0
    up = parser.parse_args(["up"])
    assert (up.host, up.collector_port, up.aggregator_port) == ("127.0.0.1", 8000, 8001)


def test_keys_are_private_and_made_once(tmp_path: Path) -> None:
    keys, created = load_or_create_keys(tmp_path / "d")
    assert created and len({keys.admin, keys.ingest, keys.analyst}) == 3
    assert stat.S_IMODE((tmp_path / "d" / "keys.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
    again, created_again = load_or_create_keys(tmp_path / "d")
    assert again == keys and not created_again
    assert load_keys(tmp_path / "missing") is None


def _body(suppressed: bool = False) -> dict[str, object]:
    return {
        "metric": "os",
        "version": 2,
        "kind": "categorical",
        "mechanism": "grr",
        "epsilon": 2.0,
        "unit": "per device, per metric, per day",
        "n": 900,
        "window": {"epochs": 2, "first_epoch": 7, "last_epoch": 8},
        "epoch_length": "day",
        "confidence": 0.95,
        "suppressed": suppressed,
        "reason": "900 reports in the window, below the metric's minimum of 1000"
        if suppressed
        else None,
        "estimate": None
        if suppressed
        else {
            "values": [
                {"category": "ios", "value": 0.61, "stderr": 0.02, "ci_low": 0.57, "ci_high": 0.65},
                {
                    "category": "android",
                    "value": -0.01,
                    "stderr": 0.02,
                    "ci_low": -0.05,
                    "ci_high": 0.03,
                },
            ]
        },
    }


def test_table_shows_intervals_truth_and_negative_values() -> None:
    text = format_estimate(_body(), {"ios": 0.6, "android": 0.07})
    lines = text.splitlines()
    assert lines[0] == (
        "os v2: categorical, mechanism grr, epsilon = 2 per report, per device, per metric, per day"
    )
    assert "n = 900 reports, 95% intervals" in lines[1]
    assert lines[3].split() == [
        "ios",
        "0.6100",
        "0.0200",
        "[",
        "0.5700,",
        "0.6500]",
        "0.6000",
        "yes",
    ]
    assert lines[4].split()[1] == "-0.0100" and lines[4].endswith("NO")
    suppressed = format_estimate(_body(suppressed=True))
    assert suppressed.endswith(
        "SUPPRESSED: 900 reports in the window, below the metric's minimum of 1000"
    )


def test_progress_is_plain_text_when_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = Progress("devices", 1000, stream=stream)
    for done in range(0, 1001, 10):
        bar.update(done)
    bar.finish("done")
    lines = stream.getvalue().splitlines()
    assert 10 <= len(lines) <= 12 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("devices [###") and "1,000/1,000" in lines[-1]


def test_audit_exit_code_flags_a_lying_mechanism() -> None:
    """A GRR that declares eps = 0.5 but runs at eps = 1 must fail the audit.

    Confidence 1 - 1e-7: the honest GRR's lower bound exceeds its declared eps
    with probability <= 1e-7 (Clopper-Pearson, all four bounds together); the
    liar's bound lands near 0.9 at 50,000 trials, far above 0.5.
    """
    from ldp_cli.ops import audit_exit_code
    from ldp_core import GRR
    from ldp_core.audit import audit

    class Liar(GRR):
        @property
        def epsilon(self) -> float:
            return 0.5

    conf = 1 - 1e-7
    honest = audit(GRR(1.0, 4), 50_000, conf, seed=5, vectorised=False)
    lying = audit(Liar(1.0, 4), 50_000, conf, seed=5, vectorised=False)
    assert audit_exit_code([honest]) == 0
    assert lying.violation and audit_exit_code([honest, lying]) == 1


def test_metric_spec_from_flags_and_file(tmp_path: Path) -> None:
    from ldp_cli.query import spec_from_args

    parser = build_parser()
    args = parser.parse_args(
        [
            "metric",
            "create",
            "lat",
            "--kind",
            "numeric",
            "--lo",
            "0",
            "--hi",
            "10",
            "--epsilon",
            "1",
            "--epsilon-inf",
            "4",
        ]
    )
    assert spec_from_args(args) == {
        "name": "lat",
        "kind": "numeric",
        "epsilon": 1.0,
        "mechanism": "auto",
        "epoch": "day",
        "unit": "device",
        "min_reports": 100,
        "lo": 0.0,
        "hi": 10.0,
        "longitudinal": {"epsilon_inf": 4.0},
    }
    spec = tmp_path / "spec.json"
    spec.write_text('{"name": "b", "kind": "boolean", "epsilon": 1}')
    args = parser.parse_args(["metric", "create", "--spec", str(spec)])
    assert spec_from_args(args)["name"] == "b"


def test_series_table_marks_suppressed_epochs() -> None:
    body = {
        **_body(),
        "domain": ["ios", "android"],
        "series": [
            {
                "epoch": 7,
                "start_time": 7 * 86400,
                "n": 800,
                "suppressed": False,
                "reason": None,
                "estimate": {
                    "values": [
                        {
                            "category": "ios",
                            "value": 0.6,
                            "stderr": 0.02,
                            "ci_low": 0.56,
                            "ci_high": 0.64,
                        },
                        {
                            "category": "android",
                            "value": 0.4,
                            "stderr": 0.02,
                            "ci_low": 0.36,
                            "ci_high": 0.44,
                        },
                    ]
                },
            },
            {
                "epoch": 8,
                "start_time": 8 * 86400,
                "n": 100,
                "suppressed": True,
                "reason": "100 reports in the window, below the metric's minimum of 500",
                "estimate": None,
            },
        ],
    }
    lines = format_series(body).splitlines()
    assert lines[0] == "per day: share of 'ios'"
    assert lines[2].split() == ["7", "1970-01-08", "800", "0.6000", "[0.5600,", "0.6400]"]
    assert lines[3].split()[:4] == ["8", "1970-01-09", "100", "suppressed:"]
