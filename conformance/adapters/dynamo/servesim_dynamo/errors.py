"""The adapter's one error of Dynamo's making (exit 1), apart from the modules that raise it."""


class DynamoResult(Exception):
    """Dynamo's replay failed, or recorded something a servesim report cannot hold (exit 1)."""
