"""Scheduling and execution: admission, per-deployment request queues (`queues/`: in memory or Redis Streams),
workers and their registry, compile jobs, language-model generation (`generation/`) and the billing ledger."""
