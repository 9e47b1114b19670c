"""Sizes and init times of the Lambda bootstraps, beside a Python/boto3 handler's init
(the measuring half of scripts/lambda-artifacts.sh, which builds the binaries first).

Init time is the time from starting the process to its first
GET /2018-06-01/runtime/invocation/next on a local Runtime API served here: everything
a cold start spends in the function's own code before it can take a request (config,
SDK clients, runtime set-up), without Lambda's sandbox and download time. The request is
held until the process is killed, so no event is ever handled and nothing is called.

Each bootstrap runs with the environment its template gives it (names read from the
templates, plausible values below; a variable without one stops the run, so the
templates cannot drift from this list), Lambda's own variables, dummy credentials, and
every SDK endpoint on a closed local port. Runs go round-robin over the functions after
one discarded warm-up round (page cache, Python bytecode), so a busy moment of the
machine lands on all of them alike. Standard library only.
"""

import argparse
import http.server
import io
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

SIZE_GOAL_BYTES = 8_000_000  # "<= 8 MB" (decimal; 7.63 MiB)
INIT_GOAL_MS = 30.0
AL2023_GLIBC = "2.34"  # Amazon Linux 2023's core glibc, which provided.al2023 runs on
RUN_TIMEOUT_S = 10.0

# A closed port: the SDKs would get "connection refused" at once, if they ever called.
# Nothing should call at init; if something does, it fails fast and shows in the figure.
NOWHERE = "http://127.0.0.1:9"
STAGE = "bench"
PRODUCT = "prodbench01"
PAGE = "https://d111111abcdef8.cloudfront.net"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012"

# What each function's template variable would hold in a deployed stack (stage "bench",
# parameter defaults). Every variable a template sets must have an entry.
TEMPLATE_VALUES = {
    "PRODUCT_CODE": PRODUCT,
    "STAGE": STAGE,
    "SUBSCRIBERS_TABLE": f"awsmp-subscribers-{STAGE}",
    "SUBSCRIBERS_TABLE_REGION": "us-east-1",
    "CUSTOMER_PROFILE_TABLE": f"awsmp-{PRODUCT}-{STAGE}-customer-profile",
    "ALLOWED_REGISTRATION_FIELDS": "companyName,contactName,contactEmail,contactPhone",
    "RESOLVE_CUSTOMER_REGION": "us-east-1",
    "REGISTRATION_PAGE_URL": f"{PAGE}/",
    "ALLOWED_ORIGIN": PAGE,
    "USAGE_TABLE": f"awsmp-{PRODUCT}-{STAGE}-usage",
    "AGGREGATED_TABLE": f"awsmp-{PRODUCT}-{STAGE}-aggregated-usage",
    "WORK_QUEUE_URL": f"{QUEUE}/awsmp-{PRODUCT}-{STAGE}-work",
    "DEPROVISION_WORK_QUEUE_URL": f"{QUEUE}/awsmp-{PRODUCT}-{STAGE}-deprovision-work",
    "CLEANUP_QUEUE_URL": f"{QUEUE}/awsmp-{PRODUCT}-{STAGE}-cleanup",
    "METERING_LOCK_HOURS": "1",
    "FLUSH_MARGIN_MINUTES": "6",
    "ZERO_QUANTITY_POLICY": "defer",
    "METERING_MODE": "live",
    "TEST_ACCOUNT_ALLOWLIST": "",
    "DEPLOYMENT_MODE": "full",
    "METERING_REQUESTS_PER_SECOND": "10",
    "DATA_RETENTION_DAYS": "0",
}


def lambda_env(function_name, memory, api, task_root):
    """What the Lambda service sets in every function's environment, with dummies for
    the credentials and every endpoint on NOWHERE. Nothing is inherited from this
    process (no ~/.aws, no proxy, no RUST_LOG)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
        "LAMBDA_TASK_ROOT": task_root,
        "LAMBDA_RUNTIME_DIR": task_root,
        "AWS_LAMBDA_RUNTIME_API": api,
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/12/01/[$LATEST]00000000000000000000000000000000",
        "AWS_LAMBDA_LOG_FORMAT": "JSON",
        "AWS_LAMBDA_LOG_LEVEL": "INFO",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_EXECUTION_ENV": "AWS_Lambda_bench",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIDLOCALBENCHDUMMY0",
        "AWS_SECRET_ACCESS_KEY": "local-bench-dummy-secret",
        "AWS_SESSION_TOKEN": "local-bench-dummy-token",
        "AWS_CONFIG_FILE": os.path.join(task_root, "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(task_root, "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": NOWHERE,
        "AWS_ENDPOINT_URL_DYNAMODB": NOWHERE,
        "AWS_ENDPOINT_URL_SQS": NOWHERE,
        "AWS_ENDPOINT_URL_MARKETPLACE_METERING": NOWHERE,
        "AWS_ENDPOINT_URL_STS": NOWHERE,
    }


def template_functions(paths):
    """(binary, [env names], memory MB) for every rust-cargolambda function, in
    template order: the `Binary:` build property, then the function's
    Environment.Variables keys and MemorySize (plain text scan; the templates use
    CloudFormation tags a YAML loader would need teaching)."""
    functions = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        current = None
        vars_indent = None
        for line in lines:
            indent = len(line) - len(line.lstrip(" "))
            text = line.strip()
            if re.match(r"^  [A-Za-z0-9]+:$", line):  # a new resource
                current, vars_indent = None, None
                continue
            m = re.match(r"^Binary:\s*(\S+)$", text)
            if m:
                current = {"binary": m.group(1), "env": [], "memory": 128}
                functions.append(current)
                continue
            if current is None:
                continue
            m = re.match(r"^MemorySize:\s*(\d+)$", text)
            if m:
                current["memory"] = int(m.group(1))
            if text == "Variables:":
                vars_indent = indent
                continue
            if vars_indent is not None:
                m = re.match(r"^([A-Z][A-Z0-9_]*):", text)
                if indent > vars_indent and m:
                    current["env"].append(m.group(1))
                elif text:
                    vars_indent = None
    return functions


class Run:
    """One process start: when its first /next arrived, or what init error it posted."""

    def __init__(self):
        self.arrived = threading.Event()
        self.finished = threading.Event()
        self.next_ns = None
        self.init_error = None


class RuntimeApi(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), RuntimeApiHandler)
        self.current = None

    @property
    def address(self):
        return f"127.0.0.1:{self.server_address[1]}"


class RuntimeApiHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        now = time.perf_counter_ns()
        run = self.server.current
        if self.path == "/2018-06-01/runtime/invocation/next" and run is not None:
            if run.next_ns is None:
                run.next_ns = now
                run.arrived.set()
            # Held until the process is gone: init is over, no event is ever handled.
            run.finished.wait(RUN_TIMEOUT_S)
            self.close_connection = True
            return
        self.send_error(404)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        run = self.server.current
        if self.path == "/2018-06-01/runtime/init/error" and run is not None:
            run.init_error = body or "(empty init error)"
            run.arrived.set()
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def start_once(api, target, log_path):
    """Starts the target once; ms to its first /next, or raises with what went wrong."""
    run = Run()
    api.current = run
    with open(log_path, "wb") as log:
        start = time.perf_counter_ns()
        proc = subprocess.Popen(
            target["argv"],
            env=target["env"],
            cwd=target["env"]["LAMBDA_TASK_ROOT"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            while not run.arrived.wait(0.002):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            code = proc.wait()
            run.finished.set()
            api.current = None
    if run.next_ns is not None:
        return (run.next_ns - start) / 1e6
    with open(log_path, "rb") as log:
        output = log.read().decode("utf-8", "replace").strip()[-1500:]
    if run.init_error is not None:
        raise RuntimeError(f"init error posted: {run.init_error}; output: {output}")
    if code is not None and code >= 0:
        raise RuntimeError(f"exited {code} before /next; output: {output}")
    raise RuntimeError(f"no /next within {RUN_TIMEOUT_S:.0f} s; output: {output}")


def glibc_needed(path):
    """The newest GLIBC_x.y symbol version the binary names (its dynamic linker refuses
    to start it on an older C library); "-" where it names none (a static binary)."""
    with open(path, "rb") as f:
        versions = {(int(a), int(b)) for a, b in re.findall(rb"GLIBC_(\d+)\.(\d+)", f.read())}
    return "%d.%d" % max(versions) if versions else "-"


def zipped_size(path):
    """What `sam package` uploads: the bootstrap alone in a deflated zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(path, "bootstrap")
    return len(buffer.getvalue())


def load_average():
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True, help="folder holding the built binaries")
    parser.add_argument("--template", action="append", required=True)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--python", required=True, help="Python 3.11 with boto3")
    parser.add_argument("--label", default="", help="what was built (printed in the heading)")
    parser.add_argument("--target", required=True, help="the target triple the binaries are for")
    parser.add_argument("--run-with", default="",
                        help="an emulator command each bootstrap is started under "
                             "(another architecture's binaries); leaves out the Python rows")
    args = parser.parse_args()
    emulator = shlex.split(args.run_with)
    here = os.path.dirname(os.path.abspath(__file__))

    functions = template_functions(args.template)
    if not functions:
        sys.exit("lambda-artifacts: no `Binary:` build property in the templates")
    missing = sorted({n for f in functions for n in f["env"] if n not in TEMPLATE_VALUES})
    if missing:
        sys.exit(f"lambda-artifacts: no plausible value for template variables {missing}; "
                 "add them to TEMPLATE_VALUES in scripts/lambda_artifacts.py")

    api = RuntimeApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    scratch = tempfile.mkdtemp(prefix="awsmp-lambda-init-")

    targets = []
    for f in functions:
        path = os.path.join(args.bin_dir, f["binary"])
        if not os.path.isfile(path):
            sys.exit(f"lambda-artifacts: {path} is not built")
        name = f"awsmp-{PRODUCT}-{STAGE}-{f['binary']}"
        env = lambda_env(name, f["memory"], api.address, scratch)
        env.update({n: TEMPLATE_VALUES[n] for n in f["env"]})
        env["_HANDLER"] = "bootstrap"
        size = os.path.getsize(path)
        targets.append({"name": f["binary"], "argv": emulator + [path], "env": env,
                        "size": size, "zip": zipped_size(path), "glibc": glibc_needed(path),
                        "ms": [], "errors": []})
    pythons = () if emulator else (("python3.11 + boto3.client", "lambda_boto3_handler.handler"),
                                   ("python3.11, empty handler", ""))
    for name, handler in pythons:
        env = lambda_env("awsmp-bench-python", 256, api.address, here)
        env["_HANDLER"] = handler
        # Bytecode is compiled once, in the warm-up round, outside the repository and
        # the venv (a deployed package ships its .pyc; so does the managed boto3).
        env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
        # The venv's setuptools .pth would import its distutils shim at every start;
        # Lambda's Python has no such thing.
        env["SETUPTOOLS_USE_DISTUTILS"] = "stdlib"
        targets.append({"name": name, "size": None, "ms": [], "errors": [], "env": env,
                        "argv": [args.python, "-s", os.path.join(here, "lambda_python_bootstrap.py")]})

    load_before = load_average()
    print(f"lambda-artifacts: init, {args.runs} runs each round-robin after a warm-up "
          f"round, Runtime API on {api.address}", flush=True)
    for round_no in range(args.runs + 1):
        for t in targets:
            try:
                ms = start_once(api, t, os.path.join(scratch, "last.log"))
                if round_no > 0:
                    t["ms"].append(ms)
            except RuntimeError as e:
                t["errors"].append(str(e))
        if round_no in (0, args.runs) or round_no % 5 == 0:
            print(f"lambda-artifacts: round {round_no}/{args.runs} done"
                  + (" (warm-up, discarded)" if round_no == 0 else ""), flush=True)
    load_after = load_average()
    api.shutdown()
    shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(f"Lambda artifacts ({args.label})")
    if args.target.startswith("aarch64"):
        print(f"  target {args.target}: the templates' arm64")
    else:
        print(f"  target {args.target}, NOT arm64: the templates deploy arm64 (aarch64), which "
              f"this build did not produce; these are no arm64 figures")
    if emulator:
        print(f"  init under {' '.join(emulator)}: each bootstrap starts and reaches /next; "
              f"the times are the emulator's, not arm64's (no Python rows)")
    print(f"  size goal <= 8 MB = {SIZE_GOAL_BYTES:,} bytes; init goal <= {INIT_GOAL_MS:.0f} ms "
          f"(exec to first /next); ratio = figure / goal, <= 1.00 meets it")
    print(f"  glibc: the newest C library version a bootstrap asks for; provided.al2023 has "
          f"{AL2023_GLIBC}")
    print(f"  load average {load_before} before, {load_after} after the init runs "
          f"({os.cpu_count()} cores)")
    print()
    header = (f"{'function':<26} {'bytes':>11} {'MB':>6} {'MiB':>6} {'/8MB':>5}  "
              f"{'zip bytes':>10} {'/8MB':>5} {'glibc':>5}  {'init min':>8} {'median':>7} {'max':>7} "
              f"{'/30ms':>6}  {'runs':>4}")
    print(header)
    print("-" * len(header))
    for t in targets:
        if t["size"] is None:
            size = f"{'(managed runtime: boto3 not in the package)':<58}"
        else:
            size = (f"{t['size']:>11,} {t['size'] / 1e6:>6.2f} {t['size'] / 2**20:>6.2f} "
                    f"{t['size'] / SIZE_GOAL_BYTES:>5.2f}  {t['zip']:>10,} "
                    f"{t['zip'] / SIZE_GOAL_BYTES:>5.2f} {t['glibc']:>5}")
        if t["ms"]:
            ms = t["ms"]
            med = statistics.median(ms)
            # An emulator's times say nothing of the goal: no ratio for them.
            ratio = f"{'-':>6}" if emulator else f"{med / INIT_GOAL_MS:>6.2f}"
            init = f"{min(ms):>8.1f} {med:>7.1f} {max(ms):>7.1f} {ratio}"
        else:
            init = f"{'(no successful run)':>31}"
        runs = f"{len(t['ms'])}" + (f" +{len(t['errors'])} failed" if t["errors"] else "")
        print(f"{t['name']:<26} {size}  {init}  {runs:>4}")
    print("-" * len(header))
    if emulator:
        print("  init in ms under the emulator: a check that each bootstrap starts, not a figure.")
    else:
        print("  init in ms; /30ms is the median's ratio. Python rows: the same Runtime API, "
              "a minimal bootstrap\n  (scripts/lambda_python_bootstrap.py, a bare socket) "
              "importing scripts/lambda_boto3_handler.py, or nothing.")
    failed = [t for t in targets if t["errors"]]
    for t in failed:
        print(f"\nlambda-artifacts: {t['name']}: {len(t['errors'])} failed run(s); last: "
              f"{t['errors'][-1]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
