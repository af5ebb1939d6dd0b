"""scripts/plot draws the charts of `kvtier bench workload --json` rows."""
import json
import os
import subprocess

import pytest

PLOT = os.environ.get("PLOT_SCRIPT", os.path.join(os.path.dirname(__file__), "../../scripts/plot"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def workload_rows():
    rows = []
    for scenario in ("multi-round-qa", "no-reuse"):
        for concurrency in (1, 8, 32):
            for k, cache in enumerate(("off", "host", "kvtierd")):
                rows.append({"bench": "workload", "scenario": scenario,
                             "concurrency": concurrency, "cache": cache,
                             "ttft_p50_ms": 100.0 * concurrency / (k + 1),
                             "output_tokens_per_s": 50.0 * (k + 1)})
    return rows


def run_plot(args, stdin_text=None):
    return subprocess.run(["/usr/bin/python3", PLOT, *args], input=stdin_text, text=True,
                          capture_output=True, timeout=100)


@pytest.mark.parametrize("from_stdin", [False, True])
def test_draws_both_charts_from_workload_rows(tmp_path, from_stdin):
    rows = workload_rows()
    # Other benches' rows and lines that are not JSON are skipped.
    text = "\n".join(json.dumps(r) for r in rows)
    text += "\nnot json\n" + json.dumps({"bench": "workload_kill", "kill_to_503_ms": 3}) + "\n"
    out = tmp_path / "charts"
    if from_stdin:
        result = run_plot([str(out)], stdin_text=text)
    else:
        path = tmp_path / "rows.jsonl"
        path.write_text(text)
        result = run_plot([str(out), str(path)])
    assert result.returncode == 0, result.stderr
    assert f"{len(rows)} rows, 2 scenarios" in result.stdout
    for name in ("ttft_p50.png", "throughput.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name


def test_input_without_workload_rows_is_an_error(tmp_path):
    result = run_plot([str(tmp_path / "charts")],
                      stdin_text=json.dumps({"bench": "tiers", "ratio": 1.0}) + "\n")
    assert result.returncode == 1
    assert "no rows" in result.stderr
    assert not (tmp_path / "charts").exists()
