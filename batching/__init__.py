"""Dynamic batching: `policy` (size, queue delay, buckets), `layout` (whether and how a program batches),
`sequence` (padding requests of different lengths to share a batch), `assemble` (requests into one padded
batch and its outputs back), `former` (batches taken from a queue)."""
