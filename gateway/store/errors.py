"""What the store layer raises; the gateway maps each to one HTTP status."""


class StoreError(Exception):
    pass


class NotFound(StoreError):
    """The row does not exist for this tenant (another tenant's rows are reported the same way)."""


class Conflict(StoreError):
    """The request contradicts a row that exists (a second deployment of one model version)."""
