#!/usr/bin/env node
// Post usage events to an awsmp-metering usage API, signed with SigV4 by the AWS SDK's
// signer (@smithy/signature-v4). Node.js 18+ (its built-in fetch); `npm ci` here first.
//
//     AWS_REGION=us-east-1 node post_usage.mjs "$USAGE_API_URL" events.json
//
// events.json holds a JSON list of events ({"id", "licenseArn", "customerAWSAccountId",
// "dimension", "quantity", optional "timestamp", "tags" or "usageAllocations"}).
// Credentials come from the SDK's default chain (environment, profile, SSO, web identity,
// container or instance role). Prints the API's answer (a verdict per event, in order)
// and exits 1 unless every event was accepted or a duplicate of an earlier write.
// Retrying after a timeout or a 503 is safe: events already written answer "duplicate".

import { readFile } from "node:fs/promises";

import { defaultProvider } from "@aws-sdk/credential-provider-node";
import { Hash } from "@smithy/hash-node";
import { SignatureV4 } from "@smithy/signature-v4";

const USAGE = `usage: node post_usage.mjs USAGE_API_URL events.json
  (region from AWS_REGION or AWS_DEFAULT_REGION, default us-east-1;
   credentials from the AWS SDK's default chain)`;

/** Stops with `message` on stderr and exit status 1. */
function fail(message) {
  console.error(message);
  process.exit(1);
}

/** POSTs `events` (at most 100) to `url`/usage/events; returns the parsed answer. */
async function postUsage(url, region, events, attempts = 5) {
  const body = JSON.stringify({ events });
  const target = new URL(url.replace(/\/+$/, "") + "/usage/events");
  const credentials = defaultProvider();
  try {
    await credentials();
  } catch (error) {
    fail(`no AWS credentials found (environment, profile or role): ${error.message}`);
  }
  const signer = new SignatureV4({
    credentials,
    region,
    service: "execute-api",
    sha256: Hash.bind(null, "sha256"),
  });
  for (let attempt = 0; attempt < attempts; attempt++) {
    // Signed anew on each attempt: a signature is valid for 15 minutes.
    const signed = await signer.sign({
      method: "POST",
      protocol: target.protocol,
      hostname: target.hostname,
      port: target.port ? Number(target.port) : undefined,
      path: target.pathname,
      query: Object.fromEntries(target.searchParams),
      headers: { host: target.host, "content-type": "application/json" },
      body,
    });
    // fetch sets Host itself, from the same URL (the signed value).
    const { host: _host, ...headers } = signed.headers;
    let response;
    try {
      response = await fetch(target, {
        method: "POST",
        headers,
        body,
        signal: AbortSignal.timeout(30_000),
      });
    } catch (error) {
      fail(`POST ${target}: ${error.cause?.message ?? error.message}`);
    }
    if (response.ok) {
      return await response.json();
    }
    // 429 (the API's throttling) and 503 (the table's): the whole batch again.
    if ((response.status === 429 || response.status === 503) && attempt + 1 < attempts) {
      const retryAfter = Number.parseFloat(response.headers.get("retry-after") ?? "");
      const seconds = Number.isFinite(retryAfter) ? retryAfter : 2 ** attempt;
      await response.arrayBuffer();
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      continue;
    }
    fail(`usage API answered ${response.status}: ${await response.text()}`);
  }
  fail("usage API kept throttling");
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length !== 2) {
    fail(USAGE);
  }
  const [url, file] = args;
  const events = JSON.parse(await readFile(file, "utf8"));
  const region = process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || "us-east-1";
  const answer = await postUsage(url, region, events);
  console.log(JSON.stringify(answer));
  if (answer.results.some((result) => !["accepted", "duplicate"].includes(result.status))) {
    process.exitCode = 1;
  }
}

await main();
