"""What the store layer raises; the gateway maps each to one HTTP status."""


class StoreError(Exception):
    pass


class NotFound(StoreError):
    """The row does not exist for this tenant (another tenant's rows are reported the same way)."""


class Conflict(StoreError):
    """The request contradicts a row that exists (a second deployment of one model version)."""


class QuotaExceeded(StoreError):
    """The tenant is at one of its quotas (answered 429). A count quota frees only when the tenant deletes
    something or an operator raises it, so `retry_after_s` is a polite polling interval, not a promise."""

    def __init__(self, message: str, retry_after_s: float = 60.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s
