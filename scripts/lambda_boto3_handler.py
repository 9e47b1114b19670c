"""The Python side of the Lambda init comparison (scripts/lambda-artifacts.sh): what a
typical Python DynamoDB handler does at import, so its init costs what a real one does."""

import boto3

dynamodb = boto3.client("dynamodb")


def handler(event, context):
    """Never called by the measurement (init ends at the first /next)."""
    return {"tables": dynamodb.list_tables().get("TableNames", [])}
