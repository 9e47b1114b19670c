"""Property-based test of the usage API, generated from docs/usage-api.openapi.yaml.

Run by tests/usage-api/run.sh against `awsmp local up --serve` (the URLs come from the
environment it sets). Schemathesis generates requests for both operations and both
request media types, valid and invalid (positive and negative modes; its examples,
coverage and fuzzing phases), signs each one with SigV4 as API Gateway requires (a 403
to a signed request fails the run: a signing fault), and checks every answer:

- never a 5xx (`not_a_server_error`);
- the answer conforms to the contract: a documented status code, content type, headers
  and body schema; 404/405 for a request outside the two operations (the local
  stand-in forwards those to the function) against `x-unrouted-responses`, with the
  `Allow` the path answers; a schema-valid request is not refused
  (`positive_data_acceptance`);
- a 200 to a POST holds one verdict per event of the batch, in its order (the same id),
  and a summary that counts them; a 200 to a GET is the event and license asked for.

Every verdict is recorded under the event's (licenseArn, id) as the request carried
them (ids with any characters: keys are compared as strings, never parsed). After the
generated requests, an unsigned POST and GET must get 403, then the last test reads the
usage table in the emulator and compares it with what was there before:

- no item for an event whose only verdicts were `rejected` (the property the summary
  line counts), and no new item for an id never answered `accepted`;
- every `accepted` event has its ingestion marker (`event#<id>`), the row it points to
  holds the first accepted event's quantity (a repeated id wrote nothing), and a
  `duplicate` has its marker;
- read back through GET (percent-encoded path segment), up to READ_BACK accepted events
  answer 200 with their id and as many only-rejected ones answer 404.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter, defaultdict
from decimal import Decimal, InvalidOperation
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, unquote_plus, urlsplit, urlunsplit

import boto3
import jsonschema
import pytest
import requests
import schemathesis
import yaml
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, settings
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "docs" / "usage-api.openapi.yaml"


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run this test through tests/usage-api/run.sh", returncode=2)
    return value


BASE_URL = _env("USAGE_API_BASE_URL").rstrip("/")  # e.g. http://127.0.0.1:40573
EMULATOR_URL = _env("AWSMP_EMULATOR_URL")
USAGE_TABLE = _env("AWSMP_USAGE_TABLE")
MAX_EXAMPLES = int(os.environ.get("USAGE_API_MAX_EXAMPLES", "200"))
READ_BACK = 50  # accepted and rejected events each read back through GET after the run

# A license of the demo's (its buyer registered): the unsigned request below uses it.
DEMO_LICENSE = "arn:aws:license-manager::123456789012:license:l-1f2e3d4c5b6a79807162534a5b6c7d8e"
CREDENTIALS = Credentials("test", "test")  # what the local stack's SigV4 check accepts
REGION = "us-east-1"

with SPEC_PATH.open(encoding="utf-8") as spec_file:
    SPEC = yaml.safe_load(spec_file)

schema = schemathesis.openapi.from_path(SPEC_PATH)
schema.config.update(base_url=BASE_URL, request_timeout=30)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    # `Authorization` is the sigv4 scheme's header: the signer sets it, never the generator.
    with_security_parameters=False,
)


# ---- SigV4 ------------------------------------------------------------------------------


def canonical_query(query: str) -> str:
    """The query re-encoded as SigV4 canonicalizes it (RFC 3986 unreserved characters
    kept, everything else `%XX`), in the same order. `requests` form-encodes a space as
    `+`, which botocore's signer would sign as it stands while a server reads it as a
    space or a plus: sent as `%20` it means the same and signs unambiguously."""
    pairs = []
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        pairs.append(quote(unquote_plus(name), safe="-_.~") + sep + quote(unquote_plus(value), safe="-_.~"))
    return "&".join(pairs)


class SigV4(requests.auth.AuthBase):
    """Signs a prepared request (its body already serialized) as the AWS SDKs do."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        url = urlsplit(request.url)
        if url.query:
            request.url = urlunsplit(url._replace(query=canonical_query(url.query)))
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        headers = {"host": urlsplit(request.url).netloc}
        content_type = request.headers.get("Content-Type")
        if content_type is not None:
            headers["content-type"] = content_type
        signed = AWSRequest(method=request.method, url=request.url, data=body, headers=headers)
        SigV4Auth(CREDENTIALS, "execute-api", REGION).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date"):
            request.headers[name] = signed.headers[name]
        return request


SIGV4 = SigV4()


# ---- what the run saw -------------------------------------------------------------------


class Run:
    requests = 0
    statuses: Counter = Counter()
    # "POST application/json" and the like -> how many requests
    operations: Counter = Counter()
    server_errors: list[str] = []
    # (request media type, verdict status) -> how many events
    verdicts: Counter = Counter()
    # (licenseArn, id) -> the statuses its events were answered with, over the whole run
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    # for a failure message: (licenseArn, id, status) -> the first event answered so
    example: dict[tuple[str, str, str], str] = {}
    # (licenseArn, id) -> the quantity of the event first answered `accepted`
    accepted_quantity: dict[tuple[str, str], Decimal | None] = {}
    rows_for_rejected = None  # set by the table check
    before: set[tuple[str, str]] | None = None  # the usage table's keys before the run


def table_keys() -> dict[tuple[str, str], dict]:
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=EMULATOR_URL,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    items = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=USAGE_TABLE):
        for item in page["Items"]:
            key = (item["licenseArn"]["S"], item["customerAWSAccountId_dimension_timestamp"]["S"])
            items[key] = item
    return items


def event_id_of(sort_key: str) -> str | None:
    """The event id an item of the usage table belongs to: `event#<id>` (the ingestion
    marker) or `<account>#<dimension>#<timestamp>#<id>` (the row); None for a row
    written without an id."""
    if sort_key.startswith("event#"):
        return sort_key[len("event#") :]
    parts = sort_key.split("#", 3)
    return parts[3] if len(parts) == 4 else None


def header(response, name: str) -> str | None:
    """A response header (schemathesis keeps them lower-cased, each a list of values)."""
    values = response.headers.get(name.lower())
    return ", ".join(values) if values else None


def describe(case, response) -> str:
    request = response.request
    body = request.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "backslashreplace")
    if body is not None and len(body) > 4000:
        body = body[:4000] + "...(truncated)"
    text = response.text if len(response.text) <= 4000 else response.text[:4000] + "...(truncated)"
    return (
        f"request: {request.method} {request.url}\n"
        f"  content-type: {request.headers.get('Content-Type')}\n"
        f"  body: {body}\n"
        f"response: {response.status_code} {header(response, 'Content-Type')}\n"
        f"  body: {text}"
    )


# ---- checks beyond the built-in ones ----------------------------------------------------

# path -> the one method it answers (the request target as sent, still percent-encoded)
ROUTES = (
    (re.compile(r"^/usage/events$"), "POST"),
    (re.compile(r"^/usage/events/[^/]+$"), "GET"),
    (re.compile(r"^/subscriptions/[^/]+$"), "GET"),
)
_REGISTRY = Registry().with_resource("urn:usage-api", DRAFT202012.create_resource({**SPEC, "$id": "urn:usage-api"}))


def _validate(instance, pointer: str, context: str) -> None:
    """Validates against a JSON pointer into the OpenAPI document (refs resolved in it)."""
    validator = jsonschema.Draft202012Validator({"$ref": f"urn:usage-api#{pointer}"}, registry=_REGISTRY)
    errors = [error.message for error in validator.iter_errors(instance)]
    assert not errors, f"body does not match {pointer}: {'; '.join(errors)}\n{context}"


def route_method(path: str) -> str | None:
    return next((method for route, method in ROUTES if route.match(path)), None)


def unrouted(case, response) -> bool:
    """A 404/405 the function answered for a request outside its operations (the
    stand-in forwards every request; API Gateway answers these itself), checked against
    `x-unrouted-responses`. True when it was such an answer (and conforms)."""
    if response.status_code not in (404, 405):
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    code = body.get("code") if isinstance(body, dict) else None
    if code != {404: "NotFound", 405: "MethodNotAllowed"}[response.status_code]:
        return False  # e.g. 404 UnknownEvent: the operation's own answer
    answers = route_method(urlsplit(response.request.url).path)
    context = describe(case, response)
    if response.status_code == 404:
        assert answers is None, f"404 NotFound for a routed path\n{context}"
        _validate(body, "/components/responses/NotFound/content/application~1json/schema", context)
    else:
        assert answers is not None and answers != response.request.method, (
            f"405 for a method the path answers, or a path the API does not route\n{context}"
        )
        allow = header(response, "Allow")
        assert allow == answers, f"405 with Allow {allow!r}, not {answers!r} (x-unrouted-responses)\n{context}"
        _validate(body, "/components/responses/MethodNotAllowed/content/application~1json/schema", context)
    content_type = (header(response, "Content-Type") or "").split(";")[0].strip()
    assert content_type == "application/json", f"{content_type!r} instead of application/json\n{context}"
    return True


def batch_events(request: requests.PreparedRequest):
    """The events of a POSTed batch as the function reads them: (licenseArn, id, event) of
    each, in order (licenseArn and id None unless strings); None when the body is not a
    batch of either shape."""
    body = request.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    try:
        batch = json.loads(body or b"")
    except ValueError:
        return None
    if isinstance(batch, dict) and isinstance(batch.get("events"), list):
        events = batch["events"]
        usage = events  # the native shape: the usage fields beside the id
    elif isinstance(batch, list):  # CloudEvents: the usage fields are in `data`
        events = batch
        usage = [e.get("data") if isinstance(e, dict) else None for e in events]
    else:
        return None
    found = []
    for event, fields in zip(events, usage):
        license_arn = fields.get("licenseArn") if isinstance(fields, dict) else None
        event_id = event.get("id") if isinstance(event, dict) else None
        found.append(
            (
                license_arn if isinstance(license_arn, str) else None,
                event_id if isinstance(event_id, str) else None,
                event,
            )
        )
    return found


def quantity_of(event) -> Decimal | None:
    """The quantity an event carries (a number, or a numeric string, which the function
    also reads); None when it has none of those."""
    fields = event.get("data") if isinstance(event, dict) and "specversion" in event else event
    quantity = fields.get("quantity") if isinstance(fields, dict) else None
    if isinstance(quantity, bool) or not isinstance(quantity, (int, float, str)):
        return None
    try:
        return Decimal(str(quantity).strip())
    except InvalidOperation:
        return None


def stored_event_id(event, event_id):
    """The event id the usage table keys an event by: a CloudEvent's is `ce#` and the
    SHA-256 of its `source` and `id`, each prefixed with its byte length as 8 bytes big
    endian (`items::ingestion::cloudevents_event_key`), since only the two together are
    unique; a native event's is its `id`."""
    if not (isinstance(event, dict) and "specversion" in event):
        return event_id
    source = event.get("source")
    if not isinstance(source, str) or not isinstance(event_id, str):
        return event_id
    digest = hashlib.sha256()
    for part in (source, event_id):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return "ce#" + digest.hexdigest()


def record_batch(case, response) -> None:
    """Checks a 200 to a POST against the batch it answers and records every verdict."""
    answer = response.json()
    results, summary = answer["results"], answer["summary"]
    events = batch_events(response.request)
    media = (response.request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    context = describe(case, response)
    assert events is not None, f"200 for a body that is not a batch\n{context}"
    assert len(results) == len(events), f"{len(results)} verdicts for {len(events)} events\n{context}"
    counted = Counter(result["status"] for result in results)
    for status in ("accepted", "duplicate", "conflict", "rejected"):
        assert summary[status] == counted[status], f"summary.{status} does not count the verdicts\n{context}"
    for index, ((license_arn, event_id, event), result) in enumerate(zip(events, results)):
        status = result["status"]
        Run.verdicts[(media, status)] += 1
        if status != "rejected":
            assert result["id"] == event_id, f"verdict id {result['id']!r} for event id {event_id!r}\n{context}"
        if license_arn is None:
            # Not a string: nothing can be written under it (the table check below finds
            # any item that is not an accepted event's).
            assert status == "rejected", f"{status} for an event without a string licenseArn\n{context}"
            continue
        stored = stored_event_id(event, event_id)
        ids = {stored} if stored != event_id else {event_id, result["id"]}
        for i in ids - {None}:
            if status == "accepted" and (license_arn, i) not in Run.accepted_quantity:
                Run.accepted_quantity[(license_arn, i)] = quantity_of(event)
            Run.seen[(license_arn, i)].add(status)
            Run.example.setdefault(
                (license_arn, i, status),
                f"  POST {response.request.url} ({media}), event {index + 1} of {len(events)}:\n"
                f"    {json.dumps(event, ensure_ascii=False)}\n"
                f"  answered: {json.dumps(result, ensure_ascii=False)}",
            )


def check_event_fate(case, response) -> None:
    """A 200 to a GET is the event asked for: its id (the path segment, percent-decoded)
    and the license of the query."""
    url = urlsplit(response.request.url)
    asked_id = unquote(url.path.rsplit("/", 1)[-1])
    licenses = parse_qs(url.query).get("licenseArn", [])
    answer = response.json()
    context = describe(case, response)
    assert answer["id"] == asked_id, f"GET answered event {answer['id']!r} for id {asked_id!r}\n{context}"
    usage = answer["usage"]
    if usage is not None and len(licenses) == 1:
        assert usage["licenseArn"] == licenses[0], f"GET answered another license's event\n{context}"


# ---- the tests --------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def usage_table_before():
    Run.before = set(table_keys())


@schema.parametrize()
@settings(
    database=None,
    deadline=None,
    # The same examples on every `make test` (CI must not pass or fail by chance);
    # USAGE_API_RANDOM=1 explores new ones.
    derandomize=os.environ.get("USAGE_API_RANDOM") != "1",
    suppress_health_check=list(HealthCheck),
)
def test_usage_api(case):
    response = case.call(auth=SIGV4)
    Run.requests += 1
    Run.statuses[response.status_code] += 1
    sent_type = response.request.headers.get("Content-Type")
    Run.operations[f"{response.request.method} {sent_type}" if sent_type else response.request.method] += 1
    if response.status_code >= 500:
        Run.server_errors.append(describe(case, response))
    if response.status_code == 403:
        # Signed: the stand-in refuses only an unsigned or mis-signed request, so a 403
        # is this harness's fault, and no request behind it reached the function.
        pytest.fail(f"signed request refused (check the signing)\n{describe(case, response)}")
    if unrouted(case, response):
        return
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
            positive_data_acceptance,
        ],
        transport_kwargs={"auth": SIGV4},
    )
    if case.method.upper() == "POST" and response.status_code == 200:
        record_batch(case, response)
    if case.method.upper() == "GET" and response.status_code == 200:
        check_event_fate(case, response)


def test_unsigned_requests_are_refused():
    """The stand-in answers 403 as API Gateway does, before the function: nothing written
    (the table check below would find the event's items)."""
    event = {
        "id": "usage-api-test-unsigned",
        "licenseArn": DEMO_LICENSE,
        "customerAWSAccountId": "111122223333",
        "dimension": "requests",
        "quantity": 1,
    }
    for method, url, kwargs in (
        ("POST", f"{BASE_URL}/usage/events", {"json": {"events": [event]}}),
        ("GET", f"{BASE_URL}/usage/events/{event['id']}", {"params": {"licenseArn": DEMO_LICENSE}}),
    ):
        response = requests.request(method, url, timeout=30, **kwargs)
        Run.requests += 1
        Run.statuses[response.status_code] += 1
        Run.operations[f"{method} unsigned"] += 1
        assert response.status_code == 403, f"unsigned {method} answered {response.status_code}: {response.text}"
        _validate(response.json(), "/components/schemas/GatewayError", response.text)
    Run.seen[(DEMO_LICENSE, event["id"])].add("rejected")
    Run.example[(DEMO_LICENSE, event["id"], "rejected")] = f"  unsigned POST {BASE_URL}/usage/events: {event}"


def test_no_rows_for_rejected_events():
    """Runs after the generated requests: what they wrote is what they were told."""
    assert Run.requests > 0, "no request was sent"
    items = table_keys()
    new = {key: item for key, item in items.items() if key not in Run.before}
    written: dict[tuple[str, str], list[str]] = defaultdict(list)
    for license_arn, sort_key in new:
        event_id = event_id_of(sort_key)
        written[(license_arn, event_id)].append(sort_key)

    problems = []
    rejected_only = [key for key, statuses in Run.seen.items() if statuses == {"rejected"}]
    rows_for_rejected = 0
    for key in rejected_only:
        if key in written:
            rows_for_rejected += len(written[key])
            problems.append(
                f"items {written[key]} written for ({key[0]!r}, {key[1]!r}), answered only `rejected`:\n"
                f"{Run.example[(*key, 'rejected')]}"
            )
    Run.rows_for_rejected = rows_for_rejected

    for key, sort_keys in written.items():
        statuses = Run.seen.get(key, set())
        if "accepted" in statuses or statuses == {"rejected"}:  # fine, or reported above
            continue
        problems.append(
            f"items {sort_keys} written under {key[0]!r} for id {key[1]!r}, which no answer called"
            f" `accepted` (answered: {sorted(statuses) or 'never'})"
        )

    accepted = {key for key, statuses in Run.seen.items() if "accepted" in statuses}
    for license_arn, event_id in accepted:
        marker = items.get((license_arn, f"event#{event_id}"))
        if marker is None:
            problems.append(
                f"no marker event#{event_id!r} under {license_arn!r} for an accepted event:\n"
                f"{Run.example[(license_arn, event_id, 'accepted')]}"
            )
            continue
        row = marker.get("ingestedRow", {}).get("S")
        if row is None or (license_arn, row) not in items:
            problems.append(f"marker event#{event_id!r} under {license_arn!r} points to no row ({row!r})")
            continue
        # A repeated id writes nothing: the row still holds the first accepted event's usage.
        quantity = Run.accepted_quantity.get((license_arn, event_id))
        stored = items[(license_arn, row)].get("quantity", {}).get("N")
        if quantity is not None and stored is not None and Decimal(stored) != quantity:
            problems.append(
                f"row {row!r} under {license_arn!r} holds quantity {stored}, not the accepted event's {quantity}:\n"
                f"{Run.example[(license_arn, event_id, 'accepted')]}"
            )
    for key, statuses in Run.seen.items():
        if "duplicate" in statuses and (key[0], f"event#{key[1]}") not in items:
            problems.append(f"`duplicate` for ({key[0]!r}, {key[1]!r}) but no marker in the table")

    # Read back through the API (ids with odd characters most of all, percent-encoded as a
    # path segment): an accepted event is found, an event only ever rejected is not.
    def odd_first(keys):  # an empty id has no path, an empty license is MissingLicenseArn
        return sorted((key for key in keys if all(key)), key=lambda key: (key[1].isalnum(), key))[:READ_BACK]

    for key in odd_first(accepted) + odd_first(rejected_only):
        license_arn, event_id = key
        segment = quote(event_id, safe="")
        if segment.strip(".") == "":  # `.` or `..` would be a dot segment, not an id
            segment = segment.replace(".", "%2E")
        response = requests.get(
            f"{BASE_URL}/usage/events/{segment}", params={"licenseArn": license_arn}, auth=SIGV4, timeout=30
        )
        Run.requests += 1
        Run.statuses[response.status_code] += 1
        Run.operations["GET (read back)"] += 1
        wanted = 200 if key in accepted else 404
        answered_id = response.json().get("id") if response.status_code == 200 else None
        if response.status_code != wanted or (wanted == 200 and answered_id != event_id):
            problems.append(
                f"GET {response.request.url} answered {response.status_code} {response.text[:2000]}, expected"
                f" {wanted} for ({license_arn!r}, {event_id!r}), answered {sorted(Run.seen[key])} when posted"
            )

    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)
