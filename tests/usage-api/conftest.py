"""The summary line of tests/usage-api/test_property.py (printed after pytest's own)."""

import sys


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    module = sys.modules.get("test_property")
    run = getattr(module, "Run", None)
    if run is None:
        return
    rows = "?" if run.rows_for_rejected is None else run.rows_for_rejected
    statuses = ", ".join(f"{code}: {n}" for code, n in sorted(run.statuses.items()))
    by_media = {}
    for (media, status), n in sorted(run.verdicts.items()):
        by_media.setdefault(media, []).append(f"{status} {n}")
    verdicts = "; ".join(f"{media}: {', '.join(counts)}" for media, counts in by_media.items())
    write = terminalreporter.write_line
    write("requests: " + ", ".join(f"{name}: {n}" for name, n in run.operations.most_common()))
    write(f"responses by status: {statuses or '-'}")
    write(f"verdicts by request media type: {verdicts or '-'}")
    write(
        f"usage API property test: {run.requests} requests, {len(run.server_errors)} server errors, "
        f"{rows} rows written for rejected events"
    )
