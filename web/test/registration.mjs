// Drives the registration page in headless Chromium the way a buyer does, starting
// from Marketplace's form POST to the fulfillment endpoint. Run by
// crates/register/tests/browser.rs, which starts the endpoints and seeds the tokens,
// then asserts on the JSON this script prints (one line, prefixed "RESULT ").
//
// Environment (all set by the Rust test):
//   AWSMP_FULFILLMENT_URL  the fulfillment endpoint (POST target of the Marketplace form)
//   AWSMP_PAGE_URL         the registration page (where the fulfillment endpoint redirects)
//   AWSMP_VALID_TOKEN      a token the simulator resolves
//   AWSMP_EXPIRED_TOKEN    a token the simulator reports expired
//   AWSMP_ARTIFACTS_DIR    where screenshots go
//   AWSMP_CHROMIUM         the browser binary (default /usr/bin/chromium)
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

function required(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set (crates/register/tests/browser.rs sets it)`);
  }
  return value;
}

const fulfillmentUrl = required("AWSMP_FULFILLMENT_URL");
const pageUrl = required("AWSMP_PAGE_URL");
const validToken = required("AWSMP_VALID_TOKEN");
const expiredToken = required("AWSMP_EXPIRED_TOKEN");
const artifacts = required("AWSMP_ARTIFACTS_DIR");
const executablePath = process.env.AWSMP_CHROMIUM || "/usr/bin/chromium";

mkdirSync(artifacts, { recursive: true });
const userDataDir = mkdtempSync(join(tmpdir(), "awsmp-chromium-"));

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 900, height: 860 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
context.setDefaultTimeout(20000);

const result = {};

// Every Content-Security-Policy refusal a page logs: the test serves the page with the
// template's CSP, so a request the page makes that the CSP refuses in AWS shows here.
const cspViolations = [];
context.on("page", (page) => {
  page.on("console", (message) => {
    if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
  });
});

// Marketplace's step: the buyer's browser POSTs the token to the fulfillment URL.
// Resolves once the page behind the 303 has rendered one of its views.
async function arriveFromMarketplace(page, token) {
  const redirects = [];
  let pageCsp = null;
  page.on("response", (response) => {
    if (response.url() === pageUrl.replace(/#.*$/, "")) {
      pageCsp = response.headers()["content-security-policy"] || null;
    }
    if (response.url().startsWith(fulfillmentUrl)) {
      const headers = response.headers();
      redirects.push({
        status: response.status(),
        locationHasToken: (headers.location || "").includes("#token="),
        locationHasError: (headers.location || "").includes("#error="),
        referrerPolicy: headers["referrer-policy"] || null,
        cacheControl: headers["cache-control"] || null,
      });
    }
  });
  const hidden = token === null ? "" : `<input type="hidden" name="x-amzn-marketplace-token" value="${token}">`;
  await page.setContent(
    `<form method="post" action="${fulfillmentUrl}" enctype="application/x-www-form-urlencoded">${hidden}` +
      `<input type="hidden" name="x-amzn-marketplace-offer-type" value="free-trial"></form>`,
  );
  await Promise.all([
    page.waitForURL((url) => url.href.startsWith(pageUrl.replace(/#.*$/, ""))),
    page.evaluate(() => document.forms[0].submit()),
  ]);
  await page.locator("#view-form:not([hidden]), #view-token:not([hidden])").first().waitFor();
  return { redirect: redirects[0] || null, addressBar: page.url(), pageCsp };
}

async function fill(page, values) {
  for (const [name, value] of Object.entries(values)) {
    await page.fill(`[name="${name}"]`, value);
  }
}

async function visibleTexts(page, selector) {
  return page.locator(selector).evaluateAll((els) =>
    els.filter((el) => !el.hidden && el.offsetParent !== null).map((el) => el.textContent.trim()),
  );
}

const buyer = {
  companyName: "Example Corp",
  contactName: "Jane Buyer",
  contactEmail: "jane@example.com",
};

try {
  // 1. A successful registration.
  {
    const page = await context.newPage();
    const arrival = await arriveFromMarketplace(page, validToken);
    const labelled = await page.evaluate(() =>
      Array.from(document.querySelectorAll("#fields input, #fields textarea, #fields select")).every(
        (el) => document.querySelector(`label[for="${el.id}"]`) !== null,
      ),
    );
    await page.screenshot({ path: join(artifacts, "registration-form.png"), fullPage: true });
    await fill(page, buyer);
    await page.click("#submit");
    await page.locator("#view-success").waitFor({ state: "visible" });
    await page.screenshot({ path: join(artifacts, "registration-success.png"), fullPage: true });
    result.success = {
      ...arrival,
      allInputsLabelled: labelled,
      title: (await page.textContent("#success-title")).trim(),
      message: (await page.textContent("#success-message")).trim(),
      focused: await page.evaluate(() => document.activeElement && document.activeElement.id),
    };
    await page.close();
  }

  // 2. Validation errors: first the page's own checks, then the register endpoint's.
  {
    const page = await context.newPage();
    await arriveFromMarketplace(page, validToken);
    await fill(page, { contactEmail: "not-an-email" });
    await page.click("#submit");
    await page.locator("#form-error").waitFor({ state: "visible" });
    await page.screenshot({ path: join(artifacts, "validation-client.png"), fullPage: true });
    const client = {
      summary: await visibleTexts(page, "#form-error-list li"),
      fieldErrors: await visibleTexts(page, ".field-error"),
      invalid: await page.locator('[aria-invalid="true"]').evaluateAll((els) => els.map((el) => el.name)),
    };

    // A value longer than the server's cap: the page's maxlength is lifted, as a script would.
    await fill(page, { ...buyer });
    await page.evaluate(() => {
      const input = document.querySelector('[name="companyName"]');
      input.removeAttribute("maxlength");
      input.value = "x".repeat(1001);
    });
    await page.click("#submit");
    await page.locator("#field-companyName-error").waitFor({ state: "visible" });
    await page.screenshot({ path: join(artifacts, "validation-server.png"), fullPage: true });
    const server = {
      fieldError: (await page.textContent("#field-companyName-error")).trim(),
      summaryVisible: await page.isVisible("#form-error"),
      formStillShown: await page.isVisible("#view-form"),
    };
    result.validation = { client, server };
    await page.close();
  }

  // 3. An expired token.
  {
    const page = await context.newPage();
    const arrival = await arriveFromMarketplace(page, expiredToken);
    await fill(page, buyer);
    await page.click("#submit");
    await page.locator("#view-token").waitFor({ state: "visible" });
    await page.screenshot({ path: join(artifacts, "expired-token.png"), fullPage: true });
    result.expired = {
      ...arrival,
      title: (await page.textContent("#token-title")).trim(),
      message: (await page.textContent("#token-message")).trim(),
      marketplaceLink: await page.getAttribute("#marketplace-link", "href"),
      focused: await page.evaluate(() => document.activeElement && document.activeElement.id),
    };
    await page.close();
  }

  // 4. Marketplace's POST without a token.
  {
    const page = await context.newPage();
    const arrival = await arriveFromMarketplace(page, null);
    await page.screenshot({ path: join(artifacts, "missing-token.png"), fullPage: true });
    result.missing = {
      ...arrival,
      tokenViewVisible: await page.isVisible("#view-token"),
      formVisible: await page.isVisible("#view-form"),
      message: (await page.textContent("#token-message")).trim(),
      marketplaceLink: await page.getAttribute("#marketplace-link", "href"),
    };
    await page.close();
  }
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}

result.cspViolations = cspViolations;
console.log("RESULT " + JSON.stringify(result));
