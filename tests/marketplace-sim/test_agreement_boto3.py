"""boto3's ``marketplace-agreement`` client against the Marketplace simulator.

The installed botocore names both protocols of the service (``smithy-rpc-v2-cbor``
first, then ``json``): the default client speaks RPC v2 CBOR, and a copy of its
model that names only ``json`` makes it speak awsJson 1.0, as older botocore and
the AWS CLI do. Both must get the same answers.

Needs the built binary (``cargo build -p awsmp-marketplace-sim``; found under
``$CARGO_TARGET_DIR`` or ``target/``, or named by ``AWSMP_SIM_BIN``). Run:
``.venv/bin/python -m pytest tests/marketplace-sim -q``.
"""

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
AGREEMENT = "agmt-boto3000000000000000000"
LICENSE = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"


def simulator_binary() -> Path:
    if os.environ.get("AWSMP_SIM_BIN"):
        return Path(os.environ["AWSMP_SIM_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "awsmp-marketplace-sim"


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    binary = simulator_binary()
    if not binary.exists():
        pytest.skip(f"{binary} is not built (cargo build -p awsmp-marketplace-sim)")
    config = tmp_path_factory.mktemp("sim") / "config.json"
    config.write_text(
        json.dumps(
            {
                "clock": {"mode": "fixed", "at": "2026-03-15T12:30:00Z"},
                "products": [{"product_code": "prodboto3", "dimensions": ["requests"]}],
                "agreements": [
                    {
                        "agreement_id": AGREEMENT,
                        "license_arn": LICENSE,
                        "product_code": "prodboto3",
                        "customer_aws_account_id": "111122223333",
                        "proposer_account_id": "123456789012",
                        "offer_id": "offer-boto3",
                        "start_time": "2026-03-01T00:00:00Z",
                        "rate_card": [{"dimension_key": "requests", "price": "0.0025"}],
                    }
                ],
            }
        )
    )
    process = subprocess.Popen(
        [str(binary), "--port", "0", "--no-throttle", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "listening on " in line, line
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def json_only_models(tmp_path: Path) -> Path:
    """A data path holding the service model with only awsJson 1.0 in it."""
    loader = botocore.session.get_session().get_component("data_loader")
    model = loader.load_service_model("marketplace-agreement", "service-2")
    version = model["metadata"]["apiVersion"]
    model["metadata"]["protocol"] = "json"
    model["metadata"]["protocols"] = ["json"]
    folder = tmp_path / "marketplace-agreement" / version
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))
    return tmp_path


def client(endpoint: str, data_path: Path | None = None):
    session = botocore.session.Session()
    if data_path is not None:
        session.get_component("data_loader").search_paths.insert(0, str(data_path))
    return boto3.Session(botocore_session=session).client(
        "marketplace-agreement",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="AKIDSIMULATOR",
        aws_secret_access_key="simulator-secret",
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(params=["smithy-rpc-v2-cbor", "json"])
def agreements(request, simulator, tmp_path):
    data_path = json_only_models(tmp_path) if request.param == "json" else None
    c = client(simulator, data_path)
    assert c.meta.service_model.protocol == request.param
    return c


def test_describe_agreement(agreements):
    out = agreements.describe_agreement(agreementId=AGREEMENT)
    assert out["agreementId"] == AGREEMENT
    assert out["status"] == "ACTIVE"
    assert out["acceptor"]["accountId"] == "111122223333"
    assert out["startTime"].isoformat() == "2026-03-01T00:00:00+00:00"


def test_terms_and_search(agreements):
    terms = agreements.get_agreement_terms(agreementId=AGREEMENT)["acceptedTerms"]
    usage = next(t["usageBasedPricingTerm"] for t in terms if "usageBasedPricingTerm" in t)
    assert usage["rateCards"][0]["rateCard"] == [{"dimensionKey": "requests", "price": "0.0025"}]
    found = agreements.search_agreements(
        catalog="AWSMarketplace",
        filters=[
            {"name": "AgreementType", "values": ["PurchaseAgreement"]},
            {"name": "LicenseArn", "values": [LICENSE]},
        ],
    )
    assert [s["agreementId"] for s in found["agreementViewSummaries"]] == [AGREEMENT]


def test_modeled_errors(agreements):
    with pytest.raises(agreements.exceptions.ResourceNotFoundException) as err:
        agreements.describe_agreement(agreementId="agmt-none")
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(agreements.exceptions.ValidationException):
        agreements.search_agreements(filters=[{"name": "Status", "values": ["ACTIVE"]}])


def test_billing_adjustment_of_an_unknown_invoice_is_refused_per_entry(agreements):
    out = agreements.batch_create_billing_adjustment_request(
        billingAdjustmentRequestEntries=[
            {
                "agreementId": AGREEMENT,
                "originalInvoiceId": "E2E-none",
                "adjustmentAmount": "1.00",
                "currencyCode": "USD",
                "adjustmentReasonCode": "OTHER",
                "clientToken": "boto3-token",
            }
        ]
    )
    assert out["items"] == []
    assert out["errors"][0]["code"] == "RESOURCE_NOT_FOUND_EXCEPTION"


def test_admin_api_lists_the_configured_agreement(simulator):
    with urllib.request.urlopen(f"{simulator}/admin/agreements") as answer:
        listed = json.load(answer)
    assert [a["agreement_id"] for a in listed] == [AGREEMENT]
