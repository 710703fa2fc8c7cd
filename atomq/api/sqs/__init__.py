"""The SQS-compatible front: every AWS SDK is an atomq client.

``credentials``: ``GET /v1/credentials/sqs``, the SQS pair of the API key
that asks. The front itself parses SQS's wire formats, checks their SigV4
signatures, calls the same services as the native routes and renders SQS's
answers and errors; it owns only its wire format and its error mapping.
"""
