// The registration page: takes the Marketplace token from the URL fragment (where the
// fulfillment endpoint put it), removes it from the address bar, shows the seller's
// fields, posts token + fields to the register endpoint, and shows the outcome.
// No framework; everything is rendered with DOM APIs (no innerHTML), so nothing in the
// configuration or in a server answer is ever interpreted as markup.
(function () {
  "use strict";

  var MARKETPLACE_URL = "https://aws.amazon.com/marketplace/library";
  var MAX_VALUE_CHARS = 1000;
  var TOKEN_CODES = ["missing-token", "invalid-token", "expired-token", "wrong-product"];
  var TOKEN_MESSAGES = {
    "missing-token": "This page was opened without a registration link from AWS Marketplace, or the page was reloaded after the link was used.",
    "invalid-token": "This registration link is not valid.",
    "expired-token": "Your registration link has expired. Return to AWS Marketplace and choose Set up your account again.",
    "wrong-product": "This registration link is for a different product.",
    "bad-request": "AWS Marketplace sent a registration request we could not read."
  };

  // Read the fragment once, then clear it so the token is not left in the address bar,
  // the history entry, bookmarks or screenshots.
  var fragment = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  var token = fragment.get("token");
  var fragmentError = fragment.get("error");
  if (window.location.hash) {
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
  }

  var config = window.AWSMP_REGISTRATION_CONFIG;

  function $(id) { return document.getElementById(id); }

  function show(viewId) {
    ["view-loading", "view-form", "view-success", "view-token"].forEach(function (id) {
      $(id).hidden = id !== viewId;
    });
  }

  function focusHeading(id) {
    var heading = $(id);
    if (heading) { heading.focus(); }
  }

  function applyBranding() {
    var productName = config.productName || "your";
    var sellerName = config.sellerName || "The seller";
    document.title = "Set up your " + productName + " account";
    $("form-title").textContent = "Set up your " + productName + " account";
    $("brand-name").textContent = productName;
    Array.prototype.forEach.call(document.querySelectorAll("[data-product-name]"), function (el) {
      el.textContent = productName;
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-seller-name]"), function (el) {
      el.textContent = sellerName;
    });
    if (config.logoUrl) {
      $("brand-logo").src = config.logoUrl;
      $("brand-logo").alt = sellerName;
      $("brand-logo").hidden = false;
    }
    if (config.brandColor) {
      document.documentElement.style.setProperty("--brand", config.brandColor);
    }
    if (config.supportUrl) {
      $("support-link").href = config.supportUrl;
      $("support-link").hidden = false;
    }
  }

  function showTokenProblem(code, serverMessage) {
    $("token-message").textContent = serverMessage || TOKEN_MESSAGES[code] || TOKEN_MESSAGES["missing-token"];
    $("marketplace-link").href = MARKETPLACE_URL;
    show("view-token");
    focusHeading("token-title");
  }

  function fieldId(name) { return "field-" + name.replace(/[^A-Za-z0-9_-]/g, "_"); }

  function renderFields() {
    var container = $("fields");
    (config.fields || []).forEach(function (field) {
      var id = fieldId(field.name);
      var wrapper = document.createElement("div");
      wrapper.className = "field";

      var label = document.createElement("label");
      label.htmlFor = id;
      label.textContent = field.label || field.name;
      if (field.required) {
        var star = document.createElement("span");
        star.className = "required";
        star.setAttribute("aria-hidden", "true");
        star.textContent = " *";
        label.appendChild(star);
      }
      wrapper.appendChild(label);

      if (field.help) {
        var help = document.createElement("p");
        help.className = "help";
        help.id = id + "-help";
        help.textContent = field.help;
        wrapper.appendChild(help);
      }

      var input;
      if (field.type === "textarea") {
        input = document.createElement("textarea");
        input.rows = 4;
      } else if (field.type === "select") {
        input = document.createElement("select");
        var blank = document.createElement("option");
        blank.value = "";
        blank.textContent = "Choose…";
        input.appendChild(blank);
        (field.options || []).forEach(function (option) {
          var el = document.createElement("option");
          el.value = typeof option === "string" ? option : option.value;
          el.textContent = typeof option === "string" ? option : (option.label || option.value);
          input.appendChild(el);
        });
      } else {
        input = document.createElement("input");
        input.type = ["email", "tel", "url"].indexOf(field.type) >= 0 ? field.type : "text";
      }
      input.id = id;
      input.name = field.name;
      if (field.required) {
        input.required = true;
        input.setAttribute("aria-required", "true");
      }
      if (field.autocomplete) { input.setAttribute("autocomplete", field.autocomplete); }
      var maxLength = Math.min(field.maxLength || MAX_VALUE_CHARS, MAX_VALUE_CHARS);
      if (field.type !== "select") { input.maxLength = maxLength; }
      input.dataset.label = field.label || field.name;

      var error = document.createElement("p");
      error.className = "field-error";
      error.id = id + "-error";
      error.hidden = true;

      input.setAttribute("aria-describedby", (field.help ? id + "-help " : "") + error.id);
      wrapper.appendChild(input);
      wrapper.appendChild(error);
      container.appendChild(wrapper);
    });
  }

  function inputs() {
    return Array.prototype.slice.call($("registration-form").querySelectorAll("input, textarea, select"));
  }

  function setFieldError(input, message) {
    var error = $(input.id + "-error");
    if (message) {
      error.textContent = message;
      error.hidden = false;
      input.setAttribute("aria-invalid", "true");
    } else {
      error.textContent = "";
      error.hidden = true;
      input.removeAttribute("aria-invalid");
    }
  }

  function clearErrors() {
    inputs().forEach(function (input) { setFieldError(input, null); });
    $("form-error").hidden = true;
    $("form-error-message").textContent = "";
    $("form-error-list").textContent = "";
  }

  // The error summary at the top of the form: a message, and one link per field error.
  function showFormError(message, fieldErrors) {
    $("form-error-message").textContent = message;
    var list = $("form-error-list");
    list.textContent = "";
    (fieldErrors || []).forEach(function (item) {
      var li = document.createElement("li");
      var link = document.createElement("a");
      link.href = "#" + item.input.id;
      link.textContent = item.message;
      link.addEventListener("click", function (event) {
        event.preventDefault();
        item.input.focus();
      });
      li.appendChild(link);
      list.appendChild(li);
    });
    $("form-error").hidden = false;
    $("form-error").focus();
  }

  function validationMessage(input) {
    var label = input.dataset.label;
    if (input.validity.valueMissing) { return "Enter " + label.toLowerCase().replace(/ \(optional\)$/, "") + "."; }
    if (input.validity.typeMismatch && input.type === "email") { return "Enter an email address like name@example.com for " + label.toLowerCase() + "."; }
    if (input.validity.typeMismatch) { return "Enter a valid value for " + label.toLowerCase() + "."; }
    if (input.validity.tooLong) { return label + " must be at most " + input.maxLength + " characters."; }
    return input.validationMessage;
  }

  function validate() {
    var problems = [];
    inputs().forEach(function (input) {
      if (!input.checkValidity()) {
        var message = validationMessage(input);
        setFieldError(input, message);
        problems.push({ input: input, message: message });
      }
    });
    return problems;
  }

  function setBusy(busy) {
    var button = $("submit");
    button.disabled = busy;
    button.textContent = busy ? "Setting up your account…" : "Complete setup";
    $("registration-form").setAttribute("aria-busy", busy ? "true" : "false");
  }

  function submit(event) {
    event.preventDefault();
    clearErrors();
    var problems = validate();
    if (problems.length > 0) {
      showFormError("Check the highlighted fields and submit again.", problems);
      return;
    }
    var body = new URLSearchParams();
    body.append("x-amzn-marketplace-token", token);
    inputs().forEach(function (input) { body.append(input.name, input.value.trim()); });

    setBusy(true);
    post(config.registerEndpoint, {
      method: "POST",
      body: body,
      credentials: "omit",
      cache: "no-store",
      referrerPolicy: "no-referrer"
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (answer) {
        return { status: response.status, answer: answer };
      });
    }).then(function (result) {
      setBusy(false);
      handleAnswer(result.status, result.answer);
    }).catch(function () {
      setBusy(false);
      showFormError("We could not reach the registration service. Check your connection and submit again.");
    });
  }

  // WafRegisterChallenge: the WebACL challenges a POST /register that carries no AWS WAF
  // token. The WebACL's integration SDK (challenge.js under the URL deploy.sh writes into
  // config.json) gets one in the background, and AwsWafIntegration.fetch sends it.
  var challengeSdk = null;

  function loadChallengeSdk() {
    if (!config.wafIntegrationUrl) { return null; }
    if (!challengeSdk) {
      challengeSdk = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = config.wafIntegrationUrl.replace(/\/?$/, "/") + "challenge.js";
        script.async = true;
        script.onload = function () {
          if (window.AwsWafIntegration && window.AwsWafIntegration.fetch) {
            resolve(window.AwsWafIntegration);
          } else {
            challengeSdk = null;
            reject(new Error("challenge.js defined no AwsWafIntegration"));
          }
        };
        script.onerror = function () {
          challengeSdk = null; // the next submit tries again
          reject(new Error("challenge.js did not load"));
        };
        document.head.appendChild(script);
      });
    }
    return challengeSdk;
  }

  function post(url, options) {
    var sdk = loadChallengeSdk();
    if (!sdk) { return fetch(url, options); }
    return sdk.then(function (waf) { return waf.fetch(url, options); });
  }

  function handleAnswer(status, answer) {
    var code = answer && answer.code;
    var message = answer && typeof answer.message === "string" ? answer.message : "";
    if (status >= 200 && status < 300 && code === "registered") {
      token = null;
      if (message) { $("success-message").textContent = message; }
      show("view-success");
      focusHeading("success-title");
      return;
    }
    if (TOKEN_CODES.indexOf(code) >= 0) {
      token = null;
      showTokenProblem(code, message);
      return;
    }
    var input = answer && answer.field ? $(fieldId(answer.field)) : null;
    if (input) {
      // The endpoint names the field by its form name; the buyer knows it by its label.
      message = message.split(answer.field).join(input.dataset.label);
      setFieldError(input, message);
      showFormError("Check the highlighted field and submit again.", [{ input: input, message: message }]);
      return;
    }
    showFormError(message || "Something went wrong while setting up your account (HTTP " + status + "). Please submit again in a few minutes.");
  }

  // deploy.sh (and the local stack) write config.json next to the page with the
  // deployed register URL; it wins over config.js's registerEndpoint when present.
  function loadDeployedConfig(then) {
    if (!window.fetch) {
      then();
      return;
    }
    fetch("config.json", { cache: "no-store" })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (deployed) {
        if (deployed && deployed.registerUrl && config) {
          config.registerEndpoint = deployed.registerUrl;
        }
        if (deployed && deployed.wafIntegrationUrl && config) {
          config.wafIntegrationUrl = deployed.wafIntegrationUrl;
        }
      })
      .catch(function () {})
      .then(then);
  }

  function start() {
    loadDeployedConfig(render);
  }

  function render() {
    if (!config || !config.registerEndpoint) {
      $("view-loading").textContent = "This page is not configured yet: config.js has no registerEndpoint.";
      return;
    }
    applyBranding();
    if (fragmentError || !token) {
      showTokenProblem(fragmentError || "missing-token");
      return;
    }
    renderFields();
    // The challenge's token is fetched while the buyer fills the form in.
    var sdk = loadChallengeSdk();
    if (sdk) { sdk.catch(function () {}); }
    $("registration-form").addEventListener("submit", submit);
    show("view-form");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
