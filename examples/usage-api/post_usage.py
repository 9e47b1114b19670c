#!/usr/bin/env python3
"""Post usage events to an awsmp-metering usage API, signed with SigV4 by botocore.

    AWS_REGION=us-east-1 python3 post_usage.py "$USAGE_API_URL" events.json

events.json holds a JSON list of events ({"id", "licenseArn", "customerAWSAccountId",
"dimension", "quantity", optional "timestamp", "tags" or "usageAllocations"}). Credentials
come from botocore's usual chain (environment, profile, instance or task role). Prints
the API's answer (a verdict per event, in order) and exits 1 unless every event was
accepted or a duplicate of an earlier write. Retrying after a timeout or a 503 is safe:
events already written answer "duplicate".
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

import botocore.auth
import botocore.awsrequest
import botocore.session


def post_usage(url, region, events, attempts=5):
    """POSTs `events` (at most 100) to `url`/usage/events; returns the parsed answer."""
    body = json.dumps({"events": events}).encode()
    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise SystemExit("no AWS credentials found (environment, profile or role)")
    for attempt in range(attempts):
        request = botocore.awsrequest.AWSRequest(
            method="POST",
            url=url.rstrip("/") + "/usage/events",
            data=body,
            headers={"content-type": "application/json"},
        )
        # Signed anew on each attempt: a signature is valid for 15 minutes.
        botocore.auth.SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        prepared = urllib.request.Request(request.url, data=body, headers=dict(request.headers), method="POST")
        try:
            with urllib.request.urlopen(prepared, timeout=30) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as error:
            # 429 (the API's throttling) and 503 (the table's): the whole batch again.
            if error.code in (429, 503) and attempt + 1 < attempts:
                time.sleep(float(error.headers.get("retry-after") or 2 ** attempt))
                continue
            raise SystemExit(f"usage API answered {error.code}: {error.read().decode()}")
    raise SystemExit("usage API kept throttling")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[2]) as handle:
        events = json.load(handle)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    answer = post_usage(sys.argv[1], region, events)
    print(json.dumps(answer))
    if any(result["status"] not in ("accepted", "duplicate") for result in answer["results"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
