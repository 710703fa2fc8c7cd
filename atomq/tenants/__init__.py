"""Accounts, API keys and attachments (rate limit, disk quota): built on `atomq.platform`."""
